"""Fixtures of the soak's fast tests (test_guarantees, test_faults): a fresh SQLite incident
store per test (SQLite only: the checks read a recorded history, the backend is not their
concern), copied from the migrated template (`sqlite_template`, tests/conftest.py). It does not
start the soak's rig."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.settings import DatabaseSettings
from agent.store.engine import make_engine
from agent.store.repository import IncidentStore


@pytest.fixture
def store(sqlite_template: Path, tmp_path: Path) -> Iterator[IncidentStore]:
    shutil.copy(sqlite_template, tmp_path / "z.db")
    opened = IncidentStore(make_engine(f"sqlite:///{tmp_path / 'z.db'}", DatabaseSettings()))
    yield opened
    opened.close()
