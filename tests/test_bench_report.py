"""The README's performance section is what `bench/report.py` writes from bench/results.json
(never edited by hand): after measuring, `make bench-report` regenerates it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_performance_section_is_generated_from_results() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "report.py"), "--check"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, (
        "README.md's performance section differs from bench/results.json: run `make bench-report`"
        f" ({proc.stderr.strip()})"
    )
