"""Audit the locked dependencies (constraints.txt) for known vulnerabilities with pip-audit, offline-tolerant.

Run by `make lint`: `python tools/dependency_audit.py constraints.txt [pip-audit options]`. It runs
`pip-audit -r LOCK --no-deps --disable-pip -f json` and judges the JSON it prints:

- a known vulnerability in any locked package: each printed as `error: NAME VERSION: ID (fix:
  VERSIONS)`, exit 1;
- the vulnerability service could not be reached or had no data (no network, a missing database,
  packages it could not look up): one `warning:` line saying how many packages went unaudited,
  exit 0 (an unreachable service never fails the build);
- otherwise `ok`, exit 0.

What it does not do: install or upgrade anything, or audit the virtualenv beyond the lock.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any


class Outcome(Enum):
    OK = "ok"
    UNAUDITED = "warning"  # the service could not answer: a warning, never a failure
    VULNERABLE = "error"


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    lines: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.outcome is Outcome.VULNERABLE else 0


def judge(stdout: str, stderr: str) -> Verdict:
    """Classify one pip-audit run from its JSON output (and its stderr when there is none)."""
    try:
        report: Any = json.loads(stdout) if stdout.strip() else None
    except json.JSONDecodeError:
        report = None
    if not isinstance(report, dict) or not isinstance(report.get("dependencies"), list):
        reason = _last_line(stderr) or "no report"
        return Verdict(Outcome.UNAUDITED, [
            f"warning: the vulnerability service could not be used, dependencies not audited "
            f"({reason})"
        ])
    dependencies = [d for d in report["dependencies"] if isinstance(d, dict)]
    found: list[str] = []
    for dep in dependencies:
        for vuln in dep.get("vulns") or []:
            fixes = ", ".join(vuln.get("fix_versions") or []) or "none yet"
            found.append(f"error: {dep.get('name')} {dep.get('version')}: {vuln.get('id')} "
                         f"(fix: {fixes})")
    skipped = [d for d in dependencies if d.get("skip_reason")]
    lines = list(found)
    if skipped:
        lines.append(
            f"warning: {len(skipped)} of {len(dependencies)} locked packages could not be audited "
            f"(vulnerability service unreachable or without data), e.g. "
            f"{_one_line(skipped[0]['skip_reason'])}"
        )
    if found:
        return Verdict(Outcome.VULNERABLE, lines)
    if skipped:
        return Verdict(Outcome.UNAUDITED, lines)
    return Verdict(Outcome.OK, [f"ok: {len(dependencies)} locked packages, no known vulnerability"])


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return _one_line(lines[-1]) if lines else ""


def _one_line(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= 200 else flat[:197] + "..."


def main(argv: Sequence[str]) -> int:
    if not argv:
        print("usage: dependency_audit.py LOCKFILE [pip-audit options]", file=sys.stderr)
        return 2
    lock, *extra = argv
    if not Path(lock).is_file():
        print(f"error: {lock}: no such lock file", file=sys.stderr)
        return 2
    command = [
        sys.executable, "-m", "pip_audit", "-r", lock, "--no-deps", "--disable-pip",
        "-f", "json", "--progress-spinner", "off", "--timeout", "15", *extra,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        verdict = Verdict(Outcome.UNAUDITED, [
            "warning: pip-audit did not finish within 300 s, dependencies not audited"
        ])
    else:
        verdict = judge(done.stdout, done.stderr)
    for line in verdict.lines:
        print(f"dependency audit: {line}", file=sys.stderr if verdict.exit_code else sys.stdout)
    return verdict.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
