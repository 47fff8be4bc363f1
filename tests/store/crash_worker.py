"""A process the crash test kills with SIGKILL between "approved" and "remediating".

Usage: python -m tests.store.crash_worker URL ID [ID ...]
For each incident (in awaiting_approval): approve it, print "approved ID", move it to remediating,
print "remediating ID". Before moving the LAST one to remediating it prints "approved ID" and then
blocks reading stdin, so the parent can kill it exactly between the two states.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from agent.model.incident import Actor
from agent.model.lifecycle import DecisionOutcome, DecisionSource, IncidentStatus
from agent.settings import DatabaseSettings
from agent.store.repository import open_store


def main() -> None:
    url, *ids = sys.argv[1:]
    store = open_store(DatabaseSettings(), url=url)
    approver = Actor("U42", "carol", DecisionSource.SLACK)
    for n, raw in enumerate(ids):
        incident_id = int(raw)
        now = datetime.now(UTC)
        store.record_decision(incident_id, DecisionOutcome.APPROVE, actor=approver, now=now)
        print(f"approved {incident_id}", flush=True)
        if n == len(ids) - 1:
            sys.stdin.readline()  # the parent kills us here
        store.transition(incident_id, IncidentStatus.APPROVED, IncidentStatus.REMEDIATING,
                         actor="agent-crashy", now=now)
        print(f"remediating {incident_id}", flush=True)


if __name__ == "__main__":
    main()
