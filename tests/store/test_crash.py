"""Crash test: a real process killed (SIGKILL) between "approved" and "remediating".

The decision was committed with the `approved` state in one transaction, so after the kill the
incident is `approved` with its decision, and the resume rule says START_REMEDIATION: the agent
continues without asking again. Incidents the worker finished are `remediating` (REAPPLY_AND_VERIFY).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from agent.model.lifecycle import DecisionOutcome, IncidentStatus, ResumeAction
from agent.store.repository import IncidentStore, open_store
from tests.store.helpers import T0, finding
from tests.support.databases import TEST_DB_SETTINGS

REPO = Path(__file__).resolve().parents[2]


def test_sigkill_between_approved_and_remediating(store: IncidentStore, db_url: str) -> None:
    ids = []
    for name in ("a", "b", "c"):
        incident_id = store.record_finding(finding(name)).incident.id
        store.transition(incident_id, IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL,
                         actor="agent", now=T0)
        ids.append(incident_id)
    seen = []
    with subprocess.Popen(
        [sys.executable, "-m", "tests.store.crash_worker", db_url, *map(str, ids)],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            while True:
                line = proc.stdout.readline().strip()
                assert line, proc.stderr.read() or "worker ended early"
                seen.append(line)
                if line == f"approved {ids[-1]}":
                    break
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert seen == [f"approved {ids[0]}", f"remediating {ids[0]}", f"approved {ids[1]}",
                    f"remediating {ids[1]}", f"approved {ids[2]}"]

    # A fresh store (a restarted agent) sees every decision and knows how to resume.
    restarted = open_store(TEST_DB_SETTINGS, url=db_url)
    try:
        resume = {s.id: (s.status, action) for s, action in restarted.incidents_to_resume()}
        assert resume == {
            ids[0]: (IncidentStatus.REMEDIATING, ResumeAction.REAPPLY_AND_VERIFY),
            ids[1]: (IncidentStatus.REMEDIATING, ResumeAction.REAPPLY_AND_VERIFY),
            ids[2]: (IncidentStatus.APPROVED, ResumeAction.START_REMEDIATION),
        }
        for incident_id in ids:
            detail = restarted.get_incident(incident_id)
            assert [(d.outcome, d.actor_id) for d in detail.decisions] == [
                (DecisionOutcome.APPROVE, "U42")
            ]
        # Resuming: one replica wins approved -> remediating.
        result = restarted.transition(ids[2], IncidentStatus.APPROVED, IncidentStatus.REMEDIATING,
                                      actor="agent-new", now=T0)
        assert result.applied
    finally:
        restarted.close()
