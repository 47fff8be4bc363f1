"""Benchmark: remediation latency on the twin -- approval to the suspend patch sent, and the whole
remediation split into agent time and time spent waiting for the cluster.

Each round starts a fresh twin (`seed-blocked`, fast pod timings) served over HTTP, diagnoses the
split job, records the finding and approves it through the store (SQLite), then runs a
`Remediator` (no Prometheus: verification judges placement and re-diagnosed flows). The clock
starts when the approval is committed; "suspend patch sent" is when the merge patch carrying
`runPolicy.suspend: true` has been answered (the SUSPENDED step, recorded right after it).
"Waiting for the cluster" is the time the executor spends in its poll sleeps (pods to go, pods to
be bound, verification); the rest is agent time (reads, diagnosis, planning, writes, the store).
Target: approval -> suspend patch sent <= 500 ms at p95. Prints the figures, writes them to
bench/results.json and exits 0 (a missed target is reported, not failed). `--quick`: 5 rounds.
Usage: `python bench/remediation.py [--quick] [ROUNDS]` (default 20).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.remediation.run import Clock, Step
from bench.results import Figure, Results, percentile, quick_mode
from tests.remediation.harness import (
    approved_incident,
    migrated_template,
    new_store,
    running_lab,
)


def one_round(directory: Path, template: Path) -> tuple[float, float, float]:
    """(approval -> suspend sent, total, waiting) in seconds."""
    with running_lab(directory, "seed-blocked") as lab:
        store, _ = new_store(template, directory)
        try:
            waited = [0.0]

            def sleep(seconds: float) -> None:
                waited[0] += seconds
                time.sleep(seconds)

            marks: dict[Step, float] = {}
            remediator = lab.remediator(
                store, prometheus=None, clock=Clock(sleep=sleep),
                on_step=lambda step: marks.setdefault(step, time.monotonic()),
            )  # fmt: skip
            incident_id = approved_incident(lab, store)
            start = time.monotonic()
            status = remediator.run(incident_id)
            total = time.monotonic() - start
            if status.value != "resolved":
                events = store.get_incident(incident_id).events
                raise SystemExit(f"round ended {status.value}: {dict(events[-1].detail)}")
            return marks[Step.SUSPENDED] - start, total, waited[0]
        finally:
            store.close()


def main() -> int:
    quick, args = quick_mode(sys.argv[1:])
    rounds = int(args[0]) if args else 5 if quick else 20
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        template = migrated_template(root)
        results = []
        for n in range(rounds):
            directory = root / f"round-{n}"
            directory.mkdir()
            results.append(one_round(directory, template))
    to_suspend = [r[0] * 1000 for r in results]
    totals = [r[1] for r in results]
    waiting = [r[2] for r in results]
    agent = [t - w for t, w in zip(totals, waiting, strict=True)]
    print(f"rounds: {rounds} (seed-blocked with fast twin pod timings, fresh twin per round, "
          "SQLite, no Prometheus)")
    out = Results("remediation", quick=quick)
    sizes = {"rounds": rounds}
    out.add(Figure("approval -> suspend patch sent", "ms", statistics.median(to_suspend),
                   p95=percentile(to_suspend, 0.95), target=500.0, target_on="p95",
                   note=f"max {max(to_suspend):.0f} ms", sizes=sizes))
    for name, values in (("whole remediation", totals), ("agent time", agent),
                         ("waiting for the cluster", waiting)):
        out.add(Figure(name, "s", statistics.median(values), p95=percentile(values, 0.95),
                       sizes=sizes))
    out.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
