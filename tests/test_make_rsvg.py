"""`make rsvg` (run by `make demo-docs`, which regenerates the README's demo pictures):
rsvg-convert missing, its Debian packages are installed with apt-get when this user may (root);
an install that fails, or a user who may not install, gets one clear message naming the packages.
The machine's own apt-get and id are not used: stand-ins first on PATH record how they were
called."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.installer import make_target, stand_ins

PACKAGES = "librsvg2-bin fonts-noto-color-emoji"


@pytest.mark.parametrize(
    ("apt_ok", "uid", "says", "calls"),
    [
        (True, 0, [f"make: installing rsvg-convert (Debian packages {PACKAGES})"],
         [f"apt-get install -y -qq {PACKAGES}"]),
        (False, 0, [f"make: installing rsvg-convert (Debian packages {PACKAGES})",
                    "make: could not install rsvg-convert: no terminal picture (the text and the "
                    "chart are written)"],
         [f"apt-get install -y -qq {PACKAGES}", "apt-get update -qq"]),
        (True, 1000, ["make: rsvg-convert is not installed and cannot be installed here (needs root and",
                      f"      apt-get: sudo apt-get install {PACKAGES}); no terminal picture"],
         []),
    ],
    ids=["installed", "install-fails", "not-root"],
)
def test_make_rsvg_when_it_is_missing(
    tmp_path: Path, apt_ok: bool, uid: int, says: list[str], calls: list[str]
) -> None:
    log = stand_ins(tmp_path / "bin", apt_ok=apt_ok, uid=uid)
    done = make_target("rsvg", tmp_path / "bin", "RSVG_BIN=")
    assert done.returncode == 0, done.stderr  # the docs script goes on either way
    assert done.stdout.splitlines() == says
    assert (log.read_text().splitlines() if log.exists() else []) == calls


def test_make_rsvg_does_nothing_when_it_is_installed(tmp_path: Path) -> None:
    log = stand_ins(tmp_path / "bin", apt_ok=True, uid=0)
    done = make_target("rsvg", tmp_path / "bin", "RSVG_BIN=/usr/bin/rsvg-convert")
    assert done.returncode == 0 and done.stdout == ""
    assert not log.exists()
