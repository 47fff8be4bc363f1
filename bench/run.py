"""The benchmark harness (`make bench`, `make bench QUICK=1`): every benchmark in bench/, one at a time.

Runs each script of `BENCHMARKS` as its own process (`--quick` passed on with QUICK=1: reduced
sizes, the whole run under 2 minutes), one after the other (several are heavy: 150,000 pods take
gigabytes), each writing its figures into bench/results.json (`bench.results`); then prints the
table of this run's figures. A benchmark that fails is reported and the run goes on; the exit
status is 1 when one failed (a missed target is not a failure: benchmarks report figures).
Each script also runs alone: `python bench/NAME.py [--quick]`. Usage:
`python bench/run.py [--quick] [NAME ...]`.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.results import load, quick_mode, table  # noqa: E402

# in order: quick ones first
BENCHMARKS = (
    "policy_check",
    "explain_latency",
    "twin_idle",
    "agent_detection",
    "agent_steady",
    "diagnose_yaml",
    "diagnose_scale",
    "whatif_scale",
    "cost_model",
    "remediation",
    "slack_clicks",
    "store_queries",
    "twin_apiserver",
    "agent_sync",
    "agent_standby",
)


def main() -> int:
    quick, names = quick_mode(sys.argv[1:])
    chosen = names or list(BENCHMARKS)
    started = time.time()
    failed = []
    for name in chosen:
        script = ROOT / "bench" / f"{name}.py"
        if not script.exists():
            print(f"== {name}: no such benchmark (bench/{name}.py)")
            failed.append(name)
            continue
        print(f"== {name}{' (quick)' if quick else ''}", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, str(script), *(["--quick"] if quick else [])], cwd=ROOT, check=False
        )
        print(f"== {name}: {'ok' if proc.returncode == 0 else 'FAILED'} in {time.perf_counter() - t0:.0f} s",
              flush=True)
        if proc.returncode != 0:
            failed.append(name)
    rows = [
        r for r in load()
        if r["quick"] == quick and r["bench"] in chosen and r["date"] >= _iso(started)
    ]
    print()
    print(table(rows))
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


def _iso(epoch: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(int(epoch), UTC).isoformat(timespec="seconds")


if __name__ == "__main__":
    sys.exit(main())
