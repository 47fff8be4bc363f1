"""A stand-in for `agent.remediation.remediator.Remediator` (built on another branch) in the
executor's tests: it walks an incident through the lifecycle with the real store (approved ->
remediating -> verifying -> resolved), records which incidents it was handed, and raises or stops
early (leaving the incident in flight) when a test asks it to."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from itertools import pairwise

from agent.model.lifecycle import IncidentStatus
from agent.store.repository import IncidentStore

S = IncidentStatus
PATH = (S.APPROVED, S.REMEDIATING, S.VERIFYING, S.RESOLVED)


class StepRemediator:
    def __init__(self, store: IncidentStore, now: Callable[[], datetime], name: str = "remediator"
                 ) -> None:
        self.store = store
        self.now = now
        self.name = name
        self.calls: list[int] = []
        self.fail: set[int] = set()
        self.error: Callable[[int], Exception] = lambda i: RuntimeError(f"cluster said no to {i}")
        self.stop_early: set[int] = set()  # stop once verifying (as if the process died there)
        self._lock = threading.Lock()

    def run(self, incident_id: int) -> S:
        with self._lock:
            self.calls.append(incident_id)
        if incident_id in self.fail:
            raise self.error(incident_id)
        status = self.store.get_incident(incident_id).incident.status
        path = PATH[: PATH.index(S.VERIFYING) + 1] if incident_id in self.stop_early else PATH
        for current, new in pairwise(path):
            if status is current:
                result = self.store.transition(incident_id, current, new, actor=self.name,
                                               now=self.now())
                if not result.applied:
                    return result.status
                status = new
        return status
