"""The soak: the agent under a changing workload, people clicking and random faults, then every
guarantee checked (tests/soak/guarantees.py). The soaks, a 60-second and a 10-minute run, are
marked slow (`make soak`). `make test` keeps a quiet run of the same rig: no workload changes and
no faults, the seed job's split remediated, settled and checked by the same guarantees (the rig,
the approvers, the settling and the checks stay exercised; the faults' own tests are
test_faults.py). ZONEMEDIC_SOAK_SEED replays a seed; ZONEMEDIC_SOAK_SECONDS shortens (or
lengthens) the 10-minute run's workload phase (e.g. 180)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.soak.soak import run_quiet, run_soak
from tests.support import pgcluster
from tests.support.prometheus import requires_prometheus

needs_postgres_binaries = pytest.mark.skipif(
    not pgcluster.available(), reason="no PostgreSQL binaries under /usr/lib/postgresql")


def seed() -> int:
    given = os.environ.get("ZONEMEDIC_SOAK_SEED", "")
    return int(given) if given.isascii() and given.isdigit() else random.SystemRandom().randrange(2**32)


def duration() -> float:
    given = os.environ.get("ZONEMEDIC_SOAK_SECONDS", "")
    return float(given) if given.isascii() and given.isdigit() and int(given) > 0 else 600.0


@requires_prometheus
@needs_postgres_binaries
@pytest.mark.timeout(300)
def test_a_quiet_run_of_the_soak_rig_remediates_the_split_job_and_keeps_every_guarantee(
    tmp_path: Path,
) -> None:
    report = run_quiet(tmp_path, settle=150)
    assert report.counts["remediations"] >= 1 and report.counts["clicks"] == 1
    assert report.counts["faults injected"] == 0
    assert report.violated == 0, "\n".join(report.lines())


@pytest.mark.slow
@requires_prometheus
@needs_postgres_binaries
@pytest.mark.timeout(400)
def test_soak_one_minute(tmp_path: Path) -> None:
    report = run_soak(tmp_path, seconds=60, seed=seed(), settle=150)
    assert report.counts["remediations"] >= 1 and report.counts["faults injected"] >= 5
    assert report.violated == 0, "\n".join(report.lines())


@pytest.mark.slow
@requires_prometheus
@needs_postgres_binaries
@pytest.mark.timeout(1200)
def test_soak_ten_minutes(tmp_path: Path) -> None:
    seconds = duration()
    report = run_soak(tmp_path, seconds=seconds, seed=seed(), settle=240)
    assert report.counts["remediations"] >= 10 * seconds / 600
    assert report.counts["faults injected"] >= 100 * seconds / 600
    assert report.violated == 0, "\n".join(report.lines())
