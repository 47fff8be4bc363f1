"""Benchmark results: figures measured by the scripts in bench/, merged into bench/results.json.

Every benchmark script builds a `Results` for its own name, adds `Figure`s (a median, a p95 and
a p99 where they apply, a unit and the target of the issues) and calls `save()`: the figures
replace the ones of the same benchmark, name and mode (full or `--quick`) in `bench/results.json`,
each stamped with the machine (CPUs, load average while measuring), the date and the git
revision. `table()` prints them. Read by `bench/run.py` (the `make bench` harness) and
`bench/report.py` (the README's performance section). A figure is a report, never a test: a
missed target is shown, not raised.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results.json"


@dataclass
class Figure:
    """One measured figure. `better` says which way the target points ("lower" or "higher");
    `target_on` which statistic it applies to ("median", "p95" or "p99"); `sizes` the inputs it
    was measured at (for the cost model)."""

    name: str
    unit: str
    median: float
    p95: float | None = None
    target: float | None = None
    better: str = "lower"
    note: str = ""
    sizes: dict[str, Any] = field(default_factory=dict)
    target_on: str = "median"
    p99: float | None = None

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        value = {"p95": self.p95, "p99": self.p99}.get(self.target_on)
        if value is None:
            value = self.median
        return value <= self.target if self.better == "lower" else value >= self.target


def quick_mode(argv: list[str]) -> tuple[bool, list[str]]:
    """(`--quick` given, the other arguments)."""
    return "--quick" in argv, [a for a in argv if a != "--quick"]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of `values` (q in 0..1)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def git_revision() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
            check=True, timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{out}+dirty" if dirty else out


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(terse=True),
        "python": platform.python_version(),
        "load_average": round(os.getloadavg()[0], 2),
    }


class Results:
    def __init__(self, bench: str, *, quick: bool = False) -> None:
        self.bench = bench
        self.quick = quick
        self.figures: list[Figure] = []
        self.load_at_start = os.getloadavg()[0]

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        return figure

    def rows(self) -> list[dict[str, Any]]:
        stamp = {
            "bench": self.bench,
            "quick": self.quick,
            "machine": machine() | {"load_average_at_start": round(self.load_at_start, 2)},
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "git_revision": git_revision(),
        }
        return [asdict(f) | {"figure": f.name, "met": f.met} | stamp for f in self.figures]

    def save(self, path: Path = RESULTS) -> None:
        """Merge into the results file: this run's figures replace the same (bench, figure,
        mode) entries; others are kept."""
        existing = load(path)
        mine = self.rows()
        keys = {(r["bench"], r["figure"], r["quick"]) for r in mine}
        kept = [r for r in existing if (r["bench"], r["figure"], r["quick"]) not in keys]
        rows = sorted(kept + mine, key=lambda r: (r["quick"], r["bench"], r["figure"]))
        write(rows, path)
        print(table(mine))


def write(rows: list[dict[str, Any]], path: Path = RESULTS) -> None:
    """One figure per line (small diffs when a benchmark runs again)."""
    body = ",\n".join(json.dumps(r, sort_keys=True) for r in rows)
    path.write_text('{"figures": [\n' + body + "\n]}\n")


def load(path: Path = RESULTS) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return list(json.loads(path.read_text()).get("figures") or [])


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def target_text(row: dict[str, Any]) -> str:
    if row.get("target") is None:
        return "-"
    op = "<=" if row.get("better", "lower") == "lower" else ">="
    on_key = row.get("target_on")
    on = f" ({on_key})" if on_key in ("p95", "p99") and row.get(on_key) is not None else ""
    return f"{op} {fmt(row['target'])}{on}"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("bench", "figure", "unit", "median", "p95", "p99", "target", "met")
    lines = [
        (
            r["bench"], r["figure"], r["unit"], fmt(r["median"]), fmt(r.get("p95")), fmt(r.get("p99")),
            target_text(r), {True: "yes", False: "MISS", None: ""}[r.get("met")],
        )
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines, strict=False)]
    out = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)) for row in [head, *lines]]
    return "\n".join(out)


if __name__ == "__main__":
    print(table(load()))
    sys.exit(0)
