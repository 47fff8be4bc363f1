"""Fixtures shared by the remediation tests that run against the lab: a migrated SQLite template
(once per module) and a fresh incident store copied from it per test.

Who uses it: test_remediator, test_remediator_group and test_kill (template only; it opens stores with
its own budgets). What it does not do: start the lab (see `tests.remediation.harness`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.store.repository import IncidentStore
from tests.remediation.harness import migrated_template, new_store


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return migrated_template(tmp_path_factory.mktemp("db"))


@pytest.fixture
def store(template: Path, tmp_path: Path) -> Iterator[IncidentStore]:
    s, _ = new_store(template, tmp_path)
    yield s
    s.close()
