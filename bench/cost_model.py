"""Benchmark: the cost model of the diagnosis: how time and memory grow with pods, jobs, policies and
pods per job, each measured at three sizes while the others stay fixed.

Each point generates the synthetic cluster of `bench/diagnose_scale.py` (1,000 nodes in 3 zones;
training jobs of `per_job` pods, a quarter of them split; service pods fill up to `pods`;
zone-boundary and service policies) as a JSON List and measures, in a fresh subprocess, what
`zonemedic diagnose` does: load (read + parse), diagnosis of every job (best of 3) and peak RSS.
For each axis it reports the figures at the three sizes and the growth exponent between the
smallest and largest (time ~ size^k: 1.0 is linear). Base point: 20,000 pods, 300 jobs of 20
pods, 200 policies. `--quick`: every size divided by 10. Figures go to bench/results.json
(`sizes` holds the point), which bench/report.py turns into the README's cost-model table.
Usage: `python bench/cost_model.py [--quick]`.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.diagnose_scale import _run_child, generate  # noqa: E402
from bench.results import Figure, Results, quick_mode  # noqa: E402

BASE = {"pods": 20_000, "jobs": 300, "per_job": 20, "policies": 200}
AXES = {
    "pods": [10_000, 20_000, 40_000],
    "jobs": [150, 300, 600],
    "policies": [100, 200, 400],
    "per_job": [10, 20, 40],
}


def point(axis: str, value: int, scale: float) -> dict[str, int]:
    p = dict(BASE) | {axis: value}
    p = {k: max(2, int(v * scale)) if k != "per_job" else v for k, v in p.items()}
    # the training pods must fit: service pods fill the rest
    p["pods"] = max(p["pods"], p["jobs"] * p["per_job"] + 100)
    if axis in ("jobs", "per_job"):  # keep the service pods fixed: the axis alone grows
        p["pods"] = p["jobs"] * p["per_job"] + int(BASE["pods"] * scale) // 2
    return p


def main() -> int:
    quick, _ = quick_mode(sys.argv[1:])
    scale = 0.1 if quick else 1.0
    nodes = max(30, int(1000 * scale))
    results = Results("cost_model", quick=quick)
    with tempfile.TemporaryDirectory() as tmp:
        for axis, values in AXES.items():
            measured: list[tuple[int, dict[str, Any]]] = []
            for value in values:
                p = point(axis, value, scale)
                path = Path(tmp) / f"{axis}-{value}.json"
                items = generate(nodes=nodes, pods=p["pods"], jobs=p["jobs"],
                                 policies=p["policies"], per_job=p["per_job"])
                path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
                del items
                t0 = time.perf_counter()
                r = _run_child(path)
                path.unlink()
                size = p[axis]
                measured.append((size, r))
                print(f"{axis}={size:>6}: {r['pods']} pods, {r['jobs']} jobs, {r['policies']} policies: "
                      f"load {r['load_s']:.2f} s, diagnosis {r['diagnose_s']:.3f} s, peak RSS "
                      f"{r['peak_rss_mb']:.0f} MB ({time.perf_counter() - t0:.0f} s)", flush=True)
                sizes = {"axis": axis, "value": size, **p, "nodes": nodes}
                results.add(Figure(f"cost {axis}={size}: diagnosis", "s", r["diagnose_s"], sizes=sizes))
                results.add(Figure(f"cost {axis}={size}: load", "s", r["load_s"], sizes=sizes))
                results.add(Figure(f"cost {axis}={size}: peak RSS", "MB", r["peak_rss_mb"], sizes=sizes))
            (s0, r0), (s1, r1) = measured[0], measured[-1]
            for what, key in (("diagnosis", "diagnose_s"), ("load", "load_s"), ("peak RSS", "peak_rss_mb")):
                k = math.log(max(r1[key], 1e-6) / max(r0[key], 1e-6)) / math.log(s1 / s0)
                results.add(Figure(f"cost {axis}: {what} growth exponent", "k", k,
                                   sizes={"axis": axis, "from": s0, "to": s1},
                                   note="time ~ size^k between the smallest and largest size"))
                print(f"  {axis}: {what} ~ size^{k:.2f}")
    results.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
