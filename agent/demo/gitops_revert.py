"""The demo's GitOps sequel (`zonemedic demo --scenario lab --gitops`): the fix, undone by a sync.

Who calls it: `agent.demo.story` when its stage runs the lab deployed from Git (`Stage.gitops`).
`auto_approved` replaces the approver's click (the lab's namespace opts in to automatic
co-location: the agent approves and applies the live fix itself). `tell_revert` follows the
story's resolved incident:

1. the sync: the demo runs the application's sync (Argo CD's next one, now): `argocd-controller`
   applies the coordinator's manifest again, its zone label `zone-b` comes back while
   zonemedic's zone pin stays (read from the twin and said), so the coordinator runs in zone-a
   labelled zone-b;
2. the revert named: the agent's new incident, named "fix reverted by argocd-controller" (its
   `reverted_by`), with the `fix_reverted` event (by whom, when, which field) on its timeline;
3. the hold: the automatic approval is held (the incident awaits a person; the agent's note says
   why), so the live fix is not re-applied in a loop;
4. the hand-over: the re-detection's Slack post leads with the kustomize patch for the source and
   the `zonemedic incidents patch N` command (the chat view prints it as posted).
Each wait has a deadline (`DemoError` names the step). What it does not do: touch the cluster or
the store other than running the sync; the agent does everything else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from agent.demo.lookout import Lookout
from agent.demo.narration import Narration
from agent.demo.stage import Stage
from agent.model.incident import IncidentQuery, IncidentSummary
from agent.model.lifecycle import EventKind, IncidentStatus

T = TypeVar("T")
S = IncidentStatus
HANDOVER = "*Kustomize patch for the source:*"
STEPS = [
    ("synced", "GitOps sync re-applies the manifest"),
    ("reverted", "Fix reverted, named"),
    ("held", "Automatic approval held"),
    ("handover", "Kustomize patch posted"),
]


class Story(Protocol):
    """What the sequel uses of the story (`agent.demo.story.Story`)."""

    narration: Narration
    look: Lookout
    stage: Stage

    def wait(self, what: str, check: Callable[[], T | None], *, timeout: float,
             interval: float = 0.1) -> T: ...


@dataclass(frozen=True)
class RevertSeen:
    """What the sequel saw: the re-detection's incident, who undid the fix, its status."""

    incident_id: int
    reverted_by: str | None
    status: str
    handover_posted: bool


def auto_approved(story: Story, incident: IncidentSummary) -> str:
    """The agent approves the first fix itself (the namespace opts in): no click; who
    approved."""
    n = story.narration
    n.begin("approved", "the namespace opts in to automatic co-location")
    decided = set(S) - {S.AWAITING_APPROVAL, S.OPEN}
    story.wait("the automatic approval", lambda: story.look.status_in(incident.id, decided),
               timeout=20)
    decision = next(iter(story.look.detail(incident.id).decisions), None)
    who = decision.actor_id if decision is not None else "zonemedic"
    n.done("approved", f"approved automatically by {who}: namespace {incident.namespace} opts in")
    return who


def _redetected(story: Story, fixed: int) -> IncidentSummary | None:
    """The target's incident after `fixed` that names the revert."""
    store, target = story.stage.store, story.stage.target
    assert store is not None
    found = store.list_incidents(IncidentQuery(namespace=target.namespace, name=target.name,
                                               limit=5, with_reverts=True)).incidents  # fmt: skip
    return next((i for i in found if i.id > fixed and i.reverted_by), None)


def _post_of(story: Story, incident_id: int) -> Any:
    """The incident's top-level Slack post once it carries the kustomize patch."""
    for message in story.stage.slack.messages():
        if (message.thread_ts is None and f"#{incident_id}" in message.text
                and any(HANDOVER in str(b.get("text", {}).get("text", "")) for b in message.blocks)):
            return message
    return None


def _held_note(story: Story, incident_id: int) -> str | None:
    """The agent's note saying why the automatic approval is held (written after the request)."""
    for event in story.look.detail(incident_id).events:
        reason = str(event.detail.get("reason") or "")
        if event.kind is EventKind.NOTE and reason.startswith("automatic co-location held"):
            return reason
    return None


def tell_revert(story: Story, fixed: int) -> RevertSeen:
    """The sequel of the resolved incident `fixed` (see the module docstring)."""
    n, stage = story.narration, story.stage
    n.begin("synced", "Argo CD's next sync, now (simulated)")
    before = stage.sync()
    story.wait("the GitOps sync", lambda: stage.syncs() > before, timeout=20)
    now = "; ".join(f"{what}: template label zone={label or '-'}, zone pin {pin or 'none'}"
                    for what, label, pin in stage.synced_zones())  # fmt: skip
    n.done("synced", f"argocd-controller applied its manifest again, now {now}")
    n.begin("reverted", "the agent watches the pods")
    again = story.wait("the re-detection", lambda: _redetected(story, fixed), timeout=40)
    event = next((e for e in story.look.detail(again.id).events
                  if e.kind is EventKind.FIX_REVERTED), None)  # fmt: skip
    detail = dict(event.detail) if event is not None else {}
    fields = ", ".join(str(f) for f in detail.get("fields") or ())
    n.done("reverted", f"incident #{again.id}: fix reverted by {again.reverted_by} at "
           f"{detail.get('reverted_at') or '?'} ({fields})")
    n.begin("held", "re-applying the live fix would be undone again")
    held = story.wait("the held approval",
                      lambda: story.look.status_in(again.id, {S.AWAITING_APPROVAL}), timeout=20)
    note = story.wait("the note saying why it is held", lambda: _held_note(story, again.id),
                      timeout=20)
    n.done("held", note)
    n.begin("handover", "the change for the coordinator's source")
    story.wait("the kustomize patch in Slack", lambda: _post_of(story, again.id), timeout=20)
    n.done("handover", f"in the post of incident #{again.id}; whole: `zonemedic incidents patch "
           f"{again.id} --format kustomize`")
    return RevertSeen(again.id, again.reverted_by, held.status.value, handover_posted=True)
