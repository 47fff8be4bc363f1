"""`make prometheus` (run by `make demo`): Prometheus missing, it is installed with apt-get when
this user may (root), its own service stopped again; an install that fails, or a user who may not
install, gets one clear message and the demo goes on without metrics. The machine's own apt-get,
systemctl, service and id are not used: stand-ins first on PATH record how they were called."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.installer import make_target, stand_ins


@pytest.mark.parametrize(
    ("apt_ok", "uid", "says", "calls"),
    [
        (True, 0, ["make: installing Prometheus (Debian package prometheus)"],
         ["apt-get install -y -qq prometheus", "systemctl stop prometheus"]),
        (False, 0, ["make: installing Prometheus (Debian package prometheus)",
                    "make: could not install Prometheus: the demo runs without metrics"],
         ["apt-get install -y -qq prometheus", "apt-get update -qq"]),
        (True, 1000, ["make: Prometheus is not installed and cannot be installed here (needs root and",
                      "      apt-get: sudo apt-get install prometheus); the demo runs without metrics"],
         []),
    ],
    ids=["installed", "install-fails", "not-root"],
)
def test_make_prometheus_when_it_is_missing(
    tmp_path: Path, apt_ok: bool, uid: int, says: list[str], calls: list[str]
) -> None:
    log = stand_ins(tmp_path / "bin", apt_ok=apt_ok, uid=uid)
    done = make_target("prometheus", tmp_path / "bin", "PROMETHEUS_BIN=")
    assert done.returncode == 0, done.stderr  # the demo goes on either way
    assert done.stdout.splitlines() == says
    assert (log.read_text().splitlines() if log.exists() else []) == calls
