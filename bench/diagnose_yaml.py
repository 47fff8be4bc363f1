"""Benchmark: `zonemedic diagnose` on a 40 MB `kubectl get -o yaml` dump (wall time, peak RSS).

Generates the synthetic cluster of `bench/diagnose_scale.py` at a size whose YAML is ~40 MB, with
the fields a real `kubectl get -o yaml` prints for each pod (managed fields, status conditions,
container statuses, env, volumes), dumped as one `kind: List` in kubectl's layout (keys sorted,
block style), then runs the command as a subprocess (`zonemedic diagnose --snapshot F --output
json`), three times, and reports the median wall time and the peak RSS of the child. Target
(issue 13): <= 12 s and <= 1.2 GB. `--quick`: a ~4 MB dump (1,500 pods), one run.

Changes and their measured effect (2-core machine, shared):
- before: the file decoded with `yaml.load_all(CSafeLoader)` (libyaml parses in C, but the node
  graph of the whole document is composed and then constructed in Python) into one list of every
  item, then parsed: 37 s and 2.2 GB when the issue was filed; on this 39 MB dump and machine
  10.7 s and 1,737 MB (`/usr/bin/time -v`, one run).
- after: `agent.snapshot.yamlstream`: libyaml's C parser's events, built into Python objects by a
  loop without the node graph, the items of a List handed to the snapshot parser one at a time
  (never the whole document): 3.7 s and 154 MB (same run conditions; identical JSON output).
Usage: python bench/diagnose_yaml.py [--quick] [--keep FILE]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from bench.diagnose_scale import generate  # noqa: E402
from bench.results import Figure, Results, quick_mode  # noqa: E402


def kubectl_noise(item: dict[str, Any], i: int) -> dict[str, Any]:
    """What `kubectl get -o yaml` adds to a pod: metadata and status the diagnosis never reads."""
    if item["kind"] != "Pod":
        return item
    meta = item["metadata"]
    meta["creationTimestamp"] = "2026-11-30T09:00:00Z"
    meta["resourceVersion"] = str(100000 + i)
    meta["uid"] = f"6f1c2d3e-0000-4000-8000-{i:012d}"
    meta["generateName"] = meta["name"].rsplit("-", 1)[0] + "-"
    meta["managedFields"] = [
        {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kube-scheduler",
         "operation": "Update", "time": "2026-11-30T09:00:01Z",
         "fieldsV1": {"f:status": {"f:conditions": {".": {}, 'k:{"type":"PodScheduled"}': {
             ".": {}, "f:lastProbeTime": {}, "f:status": {}, "f:type": {}}}}}},
    ]
    container = item["spec"]["containers"][0]
    container["env"] = [{"name": "WORLD_SIZE", "value": "16"}, {"name": "NCCL_DEBUG", "value": "INFO"}]
    container["volumeMounts"] = [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                                  "name": "kube-api-access", "readOnly": True}]
    container["imagePullPolicy"] = "IfNotPresent"
    container["terminationMessagePath"] = "/dev/termination-log"
    item["spec"].update({
        "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
        "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
        "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
    })
    item["status"].update({
        "hostIP": f"192.168.{i // 250 % 250}.{i % 250}", "podIP": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
        "qosClass": "Burstable", "startTime": "2026-11-30T09:00:02Z",
        "conditions": [{"lastProbeTime": None, "lastTransitionTime": "2026-11-30T09:00:02Z",
                        "status": "True", "type": t} for t in ("Initialized", "Ready", "PodScheduled")],
        "containerStatuses": [{"name": container["name"], "ready": True, "restartCount": 0,
                               "image": container["image"], "started": True,
                               "state": {"running": {"startedAt": "2026-11-30T09:00:03Z"}}}],
    })
    return item


def write_dump(path: Path, *, pods: int) -> int:
    items = generate(nodes=max(30, pods // 30), pods=pods, jobs=max(10, pods // 75),
                     policies=max(10, pods // 150))
    items = [kubectl_noise(item, i) for i, item in enumerate(items)]
    doc = {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
    with path.open("w") as out:
        yaml.dump(doc, out, Dumper=yaml.CSafeDumper, default_flow_style=False, sort_keys=True)
    return len(items)


# the command as `zonemedic diagnose` runs it, then the child's own peak RSS (VmHWM: ru_maxrss
# would carry over the high-water mark of this large parent process through fork + exec)
CHILD = """
import sys
from pathlib import Path
from agent.cli import main
try:
    code = main()
finally:
    hwm = [l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM:")]
    sys.stderr.write("VmHWM " + hwm[0].split()[1] + "\\n")
sys.exit(code)
"""


def run_once(path: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one `zonemedic diagnose` child."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, "diagnose", "--snapshot", str(path), "--output", "json"],
        cwd=ROOT, capture_output=True, check=False,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"diagnose failed: {proc.stderr.decode()[-2000:]}")
    hwm = [line for line in proc.stderr.decode().splitlines() if line.startswith("VmHWM ")]
    return wall, int(hwm[-1].split()[1]) / 1024


def main() -> int:
    quick, args = quick_mode(sys.argv[1:])
    keep = Path(args[args.index("--keep") + 1]) if "--keep" in args else None
    pods = 1_500 if quick else 15_000
    runs = 1 if quick else 3
    with tempfile.TemporaryDirectory() as tmp:
        path = keep or Path(tmp) / "dump.yaml"
        if not path.exists():
            started = time.perf_counter()
            count = write_dump(path, pods=pods)
            print(f"generated {count} objects, {path.stat().st_size / 1e6:.1f} MB YAML "
                  f"in {time.perf_counter() - started:.1f} s")
        size_mb = path.stat().st_size / 1e6
        measured = [run_once(path) for _ in range(runs)]
    walls = [w for w, _ in measured]
    peak = max(p for _, p in measured)
    print(f"diagnose {size_mb:.1f} MB YAML: wall {', '.join(f'{w:.2f}' for w in walls)} s; peak RSS {peak:.0f} MB")
    results = Results("diagnose_yaml", quick=quick)
    sizes = {"yaml_mb": round(size_mb, 1), "pods": pods}
    results.add(Figure(f"diagnose {size_mb:.0f} MB kubectl YAML, wall", "s", statistics.median(walls),
                       p95=max(walls), target=None if quick else 12.0, sizes=sizes))
    results.add(Figure(f"diagnose {size_mb:.0f} MB kubectl YAML, peak RSS", "MB", peak,
                       target=None if quick else 1200.0, sizes=sizes))
    results.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
