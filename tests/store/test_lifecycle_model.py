"""Model-based test: random sequences of transitions applied to the real store always agree with
the pure state machine (applied exactly when the table allows it from the current state)."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.model.lifecycle import TRANSITIONS, IncidentStatus, LifecycleError, can_transition
from agent.store.repository import IncidentStore
from tests.store.helpers import T0, finding

STATUSES = list(IncidentStatus)
_COUNTER = itertools.count()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), n_steps=st.integers(min_value=1, max_value=8))
def test_store_follows_the_state_machine(
    store: IncidentStore, data: st.DataObject, n_steps: int
) -> None:
    # A new job per example: every example starts from a fresh open incident.
    incident_id = store.record_finding(finding(f"job-{next(_COUNTER)}")).incident.id
    current = IncidentStatus.OPEN
    for _ in range(n_steps):
        # Mostly the true current state (so the incident moves), sometimes a stale one.
        expected = data.draw(st.one_of(st.just(current), st.sampled_from(STATUSES)))
        allowed = sorted(TRANSITIONS[expected])
        new = data.draw(st.sampled_from(allowed) if allowed and data.draw(st.booleans())
                        else st.sampled_from(STATUSES))
        if not can_transition(expected, new):
            try:
                store.transition(incident_id, expected, new, actor="prop", now=T0)
            except LifecycleError:
                continue
            raise AssertionError(f"{expected} -> {new} was accepted")
        result = store.transition(incident_id, expected, new, actor="prop", now=T0)
        assert result.applied is (expected is current)
        if result.applied:
            current = new
        assert result.status is current
    detail = store.get_incident(incident_id)
    assert detail.incident.status is current
    assert (detail.incident.closed_at is not None) is (not TRANSITIONS[current])
