"""Benchmark: `zonemedic diagnose` on large `kubectl get -o yaml` dumps (wall time, peak RSS).

Two dumps of the synthetic cluster of `bench/diagnose_scale.py`, each one `kind: List` in
kubectl's layout (keys sorted, block style, no anchors: every object written out in full):

- with managed fields: 15,000 pods carrying what `kubectl get -o yaml` prints for a pod
  (managed fields, status conditions, container statuses, env, volumes), ~40 MB;
- compact: 78,000 compact pods (labels, owner reference, containers with image, ports and GPU
  limits, node, phase; no managed fields), ~45 MB: the same bytes in five times the objects, so
  the per-object cost dominates.

Each runs as `zonemedic diagnose --snapshot F --output json` in a subprocess, three times; the
median wall time and the child's peak RSS are reported. Targets: <= 12 s (managed fields, issue
13) and <= 8 s (compact), both <= 1.2 GB. `--quick`: a tenth of each, one run.

Changes and their measured effect (2-core machine, shared):
- before: the file decoded with `yaml.load_all(CSafeLoader)` (libyaml parses in C, but the node
  graph of the whole document is composed and then constructed in Python) into one list of every
  item, then parsed: 37 s and 2.2 GB when the issue was filed; on the 39 MB dump and this
  machine 10.7 s and 1,737 MB (`/usr/bin/time -v`, one run).
- `agent.snapshot.yamlstream`: libyaml's C parser's events, built into Python objects by a
  loop without the node graph, the items of a List handed to the snapshot parser one at a time
  (never the whole document): 3.7 s and 154 MB (same run conditions; identical JSON output).
  The compact dump (5.6 million events) still took 14-18 s: building libyaml's event objects
  alone is 3.8 s of CPU, the event loop and its bounds checks as much again.
- `agent.snapshot.blockyaml`: the block style kubectl prints is read line by line, each distinct
  line's reading cached (92,888 distinct lines of 2.2 million in the compact dump), with
  yamlstream's resolver and constructors; anything else goes to yamlstream. The compact dump:
  8.3 s of CPU -> 3.8 s (identical JSON output), peak RSS 208 MB -> 314 MB (the text's lines).
  The dumps' objects are also written out in full now: PyYAML's anchors for the owner
  references a job's pods share (`&id001`, `*id001`) are not what kubectl prints.
- a key's value written out again (the containers and owner reference of a job's pods) looked
  up by its lines and read once (shared), parsed once (`PodParts`); the non-printable check of
  an ASCII text at memory speed: the compact dump 12.0 s -> 7.7 s of CPU (load ~7, identical
  JSON output, peak RSS 315 MB); at a tenth of the size 2.95 -> 2.36 billion instructions
  (callgrind, imports excluded). The children's CPU time is reported beside the wall.
Usage: python bench/diagnose_yaml.py [--quick] [--keep DIR]
"""

from __future__ import annotations

import copy
import os
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


def compact(item: dict[str, Any]) -> dict[str, Any]:
    """A compact pod: what `generate` makes, without the CPU and memory requests or the restart
    policy (GPU limits and requests stay)."""
    if item["kind"] != "Pod":
        return item
    item["spec"].pop("restartPolicy", None)
    for container in item["spec"]["containers"]:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        for key in ("cpu", "memory"):
            requests.pop(key, None)
        if not requests:
            resources.pop("requests", None)
        if not resources:
            container.pop("resources", None)
    return item


def write_dump(path: Path, *, pods: int, compact_pods: bool = False) -> int:
    """The dump of `pods` pods (with kubectl's managed fields and status, or compact), every
    object written out in full (no YAML anchors, as kubectl prints)."""
    if compact_pods:
        items = generate(nodes=max(30, pods // 30), pods=pods, jobs=max(10, pods // 75),
                         policies=max(10, pods // 150), per_job=12)
        items = [compact(copy.deepcopy(item)) for item in items]
    else:
        items = generate(nodes=max(30, pods // 30), pods=pods, jobs=max(10, pods // 75),
                         policies=max(10, pods // 150))
        items = [kubectl_noise(copy.deepcopy(item), i) for i, item in enumerate(items)]
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


def run_once(path: Path) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MB, CPU seconds: user + system) of one `zonemedic diagnose`
    child."""
    started, before = time.perf_counter(), os.times()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, "diagnose", "--snapshot", str(path), "--output", "json"],
        cwd=ROOT, capture_output=True, check=False,
    )
    wall, after = time.perf_counter() - started, os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system
                                                           - before.children_system)
    if proc.returncode != 0:
        raise SystemExit(f"diagnose failed: {proc.stderr.decode()[-2000:]}")
    hwm = [line for line in proc.stderr.decode().splitlines() if line.startswith("VmHWM ")]
    return wall, int(hwm[-1].split()[1]) / 1024, cpu


CASES = (
    # name, pods (full, quick), compact, wall target (s), label
    ("managed", (15_000, 1_500), False, 12.0, "kubectl YAML with managed fields"),
    ("compact", (78_000, 7_800), True, 8.0, "compact kubectl YAML"),
)


def main() -> int:
    quick, args = quick_mode(sys.argv[1:])
    keep = Path(args[args.index("--keep") + 1]) if "--keep" in args else None
    runs = 1 if quick else 3
    results = Results("diagnose_yaml", quick=quick)
    for name, sizes_, compact_pods, target, label in CASES:
        pods = sizes_[1] if quick else sizes_[0]
        with tempfile.TemporaryDirectory() as tmp:
            path = (keep or Path(tmp)) / f"{name}-{pods}.yaml"
            if not path.exists() or path.stat().st_size == 0:  # a kept dump cut short: again
                started = time.perf_counter()
                count = write_dump(path, pods=pods, compact_pods=compact_pods)
                print(f"generated {count} objects ({pods} pods), {path.stat().st_size / 1e6:.1f} MB "
                      f"YAML in {time.perf_counter() - started:.1f} s", flush=True)
            size_mb = path.stat().st_size / 1e6
            measured = [run_once(path) for _ in range(runs)]
        walls = [w for w, _, _ in measured]
        cpus = [c for _, _, c in measured]
        peak = max(p for _, p, _ in measured)
        load = os.getloadavg()[0]
        print(f"diagnose {size_mb:.1f} MB {label} ({pods:,} pods): wall "
              f"{', '.join(f'{w:.2f}' for w in walls)} s; CPU "
              f"{', '.join(f'{c:.2f}' for c in cpus)} s; peak RSS {peak:.0f} MB; load average "
              f"{load:.1f}", flush=True)
        sizes = {"yaml_mb": round(size_mb, 1), "pods": pods}
        results.add(Figure(f"diagnose {label} ({pods:,} pods), wall", "s", statistics.median(walls),
                           p95=max(walls), target=None if quick else target, sizes=sizes,
                           note=f"{size_mb:.0f} MB; CPU {statistics.median(cpus):.2f} s"))
        results.add(Figure(f"diagnose {label} ({pods:,} pods), CPU (user + system)", "s",
                           statistics.median(cpus), p95=max(cpus),
                           target=None if quick else target, sizes=sizes,
                           note=f"{size_mb:.0f} MB; what the wall is on an idle machine"))
        results.add(Figure(f"diagnose {label} ({pods:,} pods), peak RSS", "MB", peak,
                           target=None if quick else 1200.0, sizes=sizes, note=f"{size_mb:.0f} MB"))
    results.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
