"""Benchmark: `zonemedic whatif` over every job at 150,000 pods and 1,000 policies.

The cluster is `bench/diagnose_scale.py`'s synthetic one (5,000 nodes, 150,000 pods, 2,000
Kubeflow jobs, 1,000 policies), parsed once; the change deletes one zone-boundary policy. Timed:
`blast_radius` (every job diagnosed before, those the change can reach after; the required flows
of the jobs with a touched pod and the declared-port flows of the touched pods compared), best of 3,
each with policy sets and caches built from scratch; target <= 2 s. Figures go to
bench/results.json. `--quick`: a twentieth of the cluster.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.diagnosis.whatif import Cluster, blast_radius
from agent.policy import PolicySet
from agent.settings import DiagnosisSettings
from agent.snapshot.collection import parse_objects
from bench.diagnose_scale import generate
from bench.results import Figure, Results, quick_mode

REPEAT = 3


def main() -> int:
    quick, _ = quick_mode(sys.argv[1:])
    scale = 0.05 if quick else 1.0
    size = {k: int(v * scale) for k, v in
            {"nodes": 5000, "pods": 150_000, "jobs": 2000, "policies": 1000}.items()}  # fmt: skip
    snapshot = parse_objects(generate(**size), source="bench")
    victim = next(p for p in snapshot.policies if p.kind.value == "CiliumNetworkPolicy")
    changed = dataclasses.replace(
        snapshot, policies=tuple(p for p in snapshot.policies if p.id != victim.id))
    settings = DiagnosisSettings()
    runs = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        result = blast_radius(Cluster(snapshot.state, PolicySet(snapshot.policies)),
                              Cluster(changed.state, PolicySet(changed.policies)),
                              settings=settings)  # fmt: skip
        runs.append(time.perf_counter() - t0)
    best = min(runs)
    print(f"whatif (delete {victim.id}) at {len(snapshot.state.pods):,} pods, "
          f"{len(snapshot.policies)} policies: {result.jobs_checked} jobs, "
          f"{result.flows_checked:,} pod-pair flows; {len(result.jobs)} job(s) and "
          f"{len(result.flows)} flow(s) change; best {best:.2f} s of {REPEAT}")
    out = Results("whatif_scale", quick=quick)
    sizes = {"pods": len(snapshot.state.pods), "policies": len(snapshot.policies),
             "jobs": result.jobs_checked, "flows": result.flows_checked}  # fmt: skip
    out.add(Figure(f"whatif over every job, {len(snapshot.state.pods):,} pods (best of {REPEAT})",
                   "s", best, target=None if quick else 2.0, sizes=sizes))
    out.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
