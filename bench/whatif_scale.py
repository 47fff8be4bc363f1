"""Benchmark: `zonemedic whatif` over every job at 150,000 pods and 1,000 policies.

The cluster is `bench/diagnose_scale.py`'s synthetic one (5,000 nodes, 150,000 pods, 2,000
Kubeflow jobs, 1,000 policies), parsed once; the change deletes one zone-boundary policy. Timed:
`blast_radius` (the jobs the change can reach diagnosed before and after; the required flows of
the jobs with a touched pod and the declared-port flows of the touched pods compared, a pair
evaluated only when the change reaches one of its hops, every pair counted), best of 3,
each with policy sets and caches built from scratch; target <= 2 s. Two figures: from scratch
(as `zonemedic whatif` on a dump: the cluster facts and the jobs found first), and with the
cluster facts and jobs given as already held (`Held`). Then the agent's answer, as `POST
/api/whatif` computes it (`agent.runtime.whatif.LiveWhatIf` over the pipeline's view: the body
parsed, the jobs brought up to date once per cache generation, the blast radius, its JSON form),
first asked in the agent's life (every job found, the policy set's caches cold), first asked after
the background warm-up (`LiveWhatIf.warm`; its time too), first asked after a pod change
in one namespace (a new cache generation: that namespace's jobs found again) and asked again in
the same generation (best of 3). Figures go to bench/results.json. `--quick`: a twentieth of the cluster.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.diagnosis.whatif import BlastRadius, Cluster, Held, blast_radius
from agent.policy import PolicySet
from agent.runtime.whatif import LiveWhatIf, parse_change
from agent.settings import DiagnosisSettings
from agent.snapshot.collection import Snapshot, parse_objects
from agent.topology.facts import FactsIndex
from agent.topology.jobs import find_jobs
from bench.diagnose_scale import generate
from bench.results import Figure, Results, quick_mode

REPEAT = 3


def _best(snapshot: Snapshot, changed: Snapshot, settings: DiagnosisSettings,
          held: Held | None) -> tuple[float, BlastRadius]:  # fmt: skip
    runs = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        result = blast_radius(Cluster(snapshot.state, PolicySet(snapshot.policies)),
                              Cluster(changed.state, PolicySet(changed.policies)),
                              settings=settings, held=held)  # fmt: skip
        runs.append(time.perf_counter() - t0)
    return min(runs), result


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
    best, result = _best(snapshot, changed, settings, None)
    index = FactsIndex(snapshot.state.nodes)
    index.add_many({(p.namespace, p.name): p for p in snapshot.state.pods})
    held = Held(index.facts(), tuple(find_jobs(snapshot.state, settings.groups)))
    best_held, again = _best(snapshot, changed, settings, held)
    assert again == result, "the answer with the facts and jobs held differs"
    t = result.touched
    print(f"whatif (delete {victim.id}) at {len(snapshot.state.pods):,} pods, "
          f"{len(snapshot.policies)} policies: {result.jobs_checked} jobs, "
          f"{result.flows_checked:,} required pod-pair flows, {t.checked:,} declared-port flows "
          f"of {t.touched:,} touched pods; {len(result.jobs)} job(s), {len(result.flows)} "
          f"required and {t.changed:,} declared-port flow(s) change; best of {REPEAT}: "
          f"{best:.2f} s from scratch, {best_held:.2f} s with the facts and jobs held")
    live = PolicySet(snapshot.policies)
    view = [(snapshot.state, live, held.facts, 1)]
    agent = LiveWhatIf(lambda: view[0], settings=settings, ready=lambda: True)
    body = orjson.dumps({"delete": victim.id})

    def ask() -> float:
        t0 = time.perf_counter()
        answer = agent.whatif(parse_change(body))
        elapsed = time.perf_counter() - t0
        assert answer == result.to_dict(), "the agent's answer differs"
        return elapsed

    first = ask()  # every job found, the policy set's caches cold
    again_best = min(ask() for _ in range(REPEAT))
    # a pod event in one namespace: a new generation, that namespace's pod tuple a new object
    ns = snapshot.state.pods[0].namespace
    pods_in = {**held.facts.pods_in, ns: tuple(list(held.facts.pods_in[ns]))}
    view[0] = (snapshot.state, live, dataclasses.replace(held.facts, pods_in=pods_in), 2)
    changed_ns = ask()
    assert agent.found_last == 2
    # a fresh agent over a cluster parsed again (nothing cached on its objects), warmed as in
    # the background (`WhatIfWarmer` over `LiveWhatIf.warm`), then asked
    cluster = parse_objects(generate(**size), source="bench")
    fresh_index = FactsIndex(cluster.state.nodes)
    fresh_index.add_many({(p.namespace, p.name): p for p in cluster.state.pods})
    warmed_view = [(cluster.state, PolicySet(cluster.policies), fresh_index.facts(), 1)]
    fresh = LiveWhatIf(lambda: warmed_view[0], settings=settings, ready=lambda: True)
    t0 = time.perf_counter()
    fresh.warm()
    warm_up = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm_answer = fresh.whatif(parse_change(body))
    first_warmed = time.perf_counter() - t0
    assert warm_answer == result.to_dict(), "the warmed agent's answer differs"
    # measured last, so the other figures run without the second cluster in memory
    print(f"agent warm-up (LiveWhatIf.warm, in the background) {warm_up:.2f} s; first asked "
          f"after it {first_warmed:.2f} s")
    print(f"agent POST /api/whatif: {first:.2f} s first asked (every job found, caches cold), "
          f"{changed_ns:.2f} s first asked after a pod change in one namespace, "
          f"{again_best:.2f} s asked again (best of {REPEAT})")
    out = Results("whatif_scale", quick=quick)
    sizes = {"pods": len(snapshot.state.pods), "policies": len(snapshot.policies),
             "jobs": result.jobs_checked, "flows": result.flows_checked,
             "declared_port_flows": t.checked, "touched_pods": t.touched}  # fmt: skip
    target = None if quick else 2.0
    pods = f"{len(snapshot.state.pods):,} pods"
    out.add(Figure(f"whatif over every job, {pods}, from scratch (best of {REPEAT})",
                   "s", best, target=target, sizes=sizes))
    out.add(Figure(f"whatif over every job, {pods}, facts and jobs held (best of {REPEAT})",
                   "s", best_held, target=target, sizes=sizes))
    out.add(Figure(f"agent POST /api/whatif, {pods}, first asked (jobs found, caches cold)",
                   "s", first, target=target, sizes=sizes))
    out.add(Figure(f"agent what-if warm-up (background, once per generation), {pods}",
                   "s", warm_up, sizes=sizes))
    out.add(Figure(f"agent POST /api/whatif, {pods}, first asked after the warm-up",
                   "s", first_warmed, target=target, sizes=sizes))
    out.add(Figure(f"agent POST /api/whatif, {pods}, after a pod change in one namespace",
                   "s", changed_ns, target=target, sizes=sizes))
    out.add(Figure(f"agent POST /api/whatif, {pods}, asked again (best of {REPEAT})",
                   "s", again_best, target=target, sizes=sizes))
    out.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
