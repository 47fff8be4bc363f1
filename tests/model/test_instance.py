"""Which job instance an incident may be bound to: the creation time read from an object, the
incident's first evidence, and the rule (created no later than that)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agent.model.instance import binds, creation_time, first_evidence

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"metadata": {"creationTimestamp": "2026-12-03T09:00:00Z"}}, T0),
        ({"metadata": {"creationTimestamp": "2026-12-03T10:00:00+01:00"}}, T0),
        ({"metadata": {"creationTimestamp": "2026-12-03T09:00:00"}}, T0),  # no zone: UTC
        ({"metadata": {"creationTimestamp": "yesterday"}}, None),
        ({"metadata": {"creationTimestamp": 17}}, None),
        ({"metadata": {}}, None),
        ({}, None),
        (None, None),
    ],
)
def test_creation_time(obj: dict[str, Any] | None, expected: datetime | None) -> None:
    assert creation_time(obj) == expected


@pytest.mark.parametrize(
    ("onset", "expected"),
    [(None, T0), (T0 - timedelta(seconds=5), T0 - timedelta(seconds=5)), (T0 + timedelta(1), T0)],
)
def test_first_evidence_is_the_opening_or_an_earlier_onset(
    onset: datetime | None, expected: datetime
) -> None:
    assert first_evidence(T0, onset) == expected


@pytest.mark.parametrize(
    ("created", "expected"),
    [
        (T0 - timedelta(hours=1), True),
        (T0, True),
        (T0 + timedelta(seconds=1), False),  # created after the evidence: another job
        (None, False),
    ],
)
def test_binds_only_a_job_created_by_the_first_evidence(
    created: datetime | None, expected: bool
) -> None:
    assert binds(created, T0) is expected
