"""Approvals as the agent sets them up, for the tests of "the approvers in force now": the
shipped zone-split playbook with given approvers, and an incident whose proposal that playbook
queued (recording the approvers it had then, as the pipeline does)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from agent.model.lifecycle import MessageKind
from agent.playbook.model import Playbook
from agent.playbook.schema import parse_playbook
from agent.store.repository import IncidentStore

REPO = Path(__file__).resolve().parents[2]


def zone_split(approvers: str, *, directory: Path | None = None) -> Playbook:
    """The shipped zone-split playbook with `approvers` (Slack user ids, `U5, U6`); written as
    `directory/zone-split.yaml` too when a directory is given (for a configuration to load)."""
    text = (REPO / "playbooks" / "zone-split.yaml").read_text()
    text = text.replace("approvers: []", f"approvers: [{approvers}]", 1)
    path = Path("zone-split.yaml")
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "zone-split.yaml"
        path.write_text(text)
    return parse_playbook(text, path=path)


def queue_proposal(store: IncidentStore, incident: int, *, approvers: list[str]) -> None:
    """Queue zone-split's proposal for `incident`, recording `approvers` as its approvers then."""
    store.enqueue_message(
        MessageKind.POST, now=datetime.now(UTC), incident_id=incident, channel="C0FAKE",
        payload={"action": "propose_colocation", "playbook": "zone-split", "incident_id": incident,
                 "approval": {"approvers": approvers, "expiry_seconds": 14400.0, "auto": False,
                              "deadline": None}},
        dedupe_key=f"propose_colocation:zone-split:{incident}",
    )
