"""Incident ids past the 32-bit id column (PostgreSQL INTEGER) are simply not found on both backends:
the store never sends them to the database, where PostgreSQL would fail with "integer out of
range" (a 500 in the API before this guard)."""

from __future__ import annotations

import pytest

from agent.model.incident import MAX_INCIDENT_ID
from agent.parsing.numbers import INT64_MAX
from agent.store.errors import IncidentNotFoundError, InvalidRecordError
from agent.store.repository import IncidentStore
from tests.store.helpers import finding


@pytest.mark.parametrize("incident_id", [INT64_MAX, 2**31, MAX_INCIDENT_ID, 0, -1])
def test_ids_past_the_column_are_not_found(store: IncidentStore, incident_id: int) -> None:
    store.record_finding(finding())
    with pytest.raises(IncidentNotFoundError):
        store.get_incident(incident_id)


@pytest.mark.parametrize("gpus", [2**31, -1])
def test_a_gpu_count_past_the_column_is_refused_naming_it(store: IncidentStore, gpus: int) -> None:
    with pytest.raises(InvalidRecordError, match=r"gpus is -?\d+, the column takes 0 to 2147483647"):
        store.record_finding(finding(gpus=gpus))
    assert store.record_finding(finding(gpus=2**31 - 1)).new  # nothing was written before
