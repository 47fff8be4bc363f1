"""Running a Makefile target that installs a Debian package, without touching the machine.

Who calls it: the tests of `make prometheus` and `make rsvg`. `stand_ins` writes apt-get,
systemctl, service and id scripts into a directory (put first on PATH) that log how they were
called to `calls.log`; `make_target` runs `make -s TARGET VAR=...` from the repository root with
that PATH.

What it does not do: run the machine's own apt-get, systemctl, service or id.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")


def stand_ins(bin_dir: Path, *, apt_ok: bool, uid: int) -> Path:
    """apt-get, systemctl, service and id that log their arguments to calls.log (its path)."""
    log = bin_dir / "calls.log"
    bin_dir.mkdir()
    scripts = {
        "apt-get": f'echo "apt-get $*" >> {log}; exit {0 if apt_ok else 100}',
        "systemctl": f'echo "systemctl $*" >> {log}; exit 0',
        "service": f'echo "service $*" >> {log}; exit 0',
        "id": f'echo {uid}',
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return log


def make_target(target: str, bin_dir: Path, *variables: str) -> subprocess.CompletedProcess[str]:
    """`make -s TARGET VARIABLES...` with the stand-ins of `bin_dir` first on PATH."""
    assert MAKE is not None
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(
        [MAKE, "-s", "--no-print-directory", target, *variables, "APT_GET=apt-get"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
