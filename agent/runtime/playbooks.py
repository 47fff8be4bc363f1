"""Playbook actions of the running agent: fire the playbooks an event matches into the outbox, and
queue sweep digests.

Called by the pipeline (`agent.runtime.pipeline`): `fire` when a finding, an alert or a utilization
drop opens a new incident, with its typed document (`agent.model.document.IncidentDocument`, whose
JSON is the payloads' `finding`), `post_digest` after a sweep (and by `zonemedic sweep --once`). Which
playbooks fire is the pure `agent.playbook.matching`; this module builds the matched subject from
the watch cache (namespace, kind, labels, requested GPUs, verdict), the outbox payloads, and
enqueues them with dedupe keys: one message per action, playbook and incident, one digest per
playbook and minute, so firing the same thing twice queues it once.

Nothing is lost when the store refuses a write: a firing whose messages could not all be queued
is kept (in memory) and `retry_unfired` queues it again; the pipeline calls it before its next
work, so the outbox gets the messages of an incident opened just before the database went away.

`follow_up` is the same firing as data, for an incident opened in a batch: the store writes the
preview, the approval request, the messages and the note with the incident, in its transaction
(`IncidentStore.record_findings`), so the messages of an incident are never lost between two
transactions; a firing that needs an automatic approval is left to `fire`.

A firing that carries a plan preview (`agent.runtime.plan_previews`) records it on the incident
first, so the queued messages and `incidents show` carry the fix's diff (or why it cannot be
applied); the preview rides along in the finding of the outbox payloads as plain data
(`proposed_fix`). A `propose_colocation` action then takes the incident's approval step
(`ApprovalRequests`: a request with its deadline, or auto-approval where the playbook opts the
namespace in); a fix the preview refused needs no decision (nothing to approve).

An incident no playbook posts (its conditions exclude the job, or no playbook has the trigger)
gets a note saying why (`not_posted`), shown by `incidents show`; the digest's payload names the
open incidents the current playbooks do not post, with the reason, for the digest to say so. A
declared group (kind `Group`) is a training job whatever its pods request (`min_gpus` does not
exclude it).

What it does not do: deliver messages (the chat layer reads the outbox) or record findings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from agent.approval.requests import ApprovalRequests
from agent.approval.step import ApprovalStep, ApprovalStepKind
from agent.errors import UnavailableError, ZonemedicError
from agent.model.document import IncidentDocument
from agent.model.incident import (
    ActionDraft,
    EventDraft,
    FollowUp,
    IncidentQuery,
    IncidentSummary,
    MessageDraft,
)
from agent.model.job import JobRef
from agent.model.lifecycle import EventKind, MessageKind, to_jsonable
from agent.model.workload import JobKind
from agent.playbook.matching import (
    NOT_POSTED,
    Event,
    Subject,
    fired,
    trigger_for_verdict,
    unposted_reason,
)
from agent.playbook.model import ApprovalPolicy, Playbook, PlaybookActionKind
from agent.runtime.plan_previews import PlanPreviews, Preview
from agent.sources.cache import ClusterCache
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

ACTOR = "agent"
APPROVAL_ACTOR = "zonemedic"  # the actor of approval requests (`ApprovalRequests`)


class PlaybookActions:
    """Turns matched playbooks into outbox messages (see the module docstring)."""

    def __init__(
        self,
        *,
        playbooks: Sequence[Playbook],
        store: IncidentStore | None,
        cache: ClusterCache,
        cluster: str,
        channel: str | None,
        approvals: ApprovalRequests | None = None,
        previews: PlanPreviews | None = None,
        approval_ttl: timedelta,
        now: Callable[[], datetime],
    ) -> None:
        self.playbooks = playbooks
        self.store = store
        self.cache = cache
        self.cluster = cluster
        self.channel = channel
        self.approvals = approvals
        self.previews = previews
        self.approval_ttl = approval_ttl
        self.now = now
        # incident id -> a firing not (fully) queued yet, retried by `retry_unfired`
        self._unfired: dict[int, tuple[Event, IncidentSummary, IncidentDocument, Preview | None]] = {}

    def subject(self, key: JobRef, verdict: str, gpus: int | None = None) -> Subject:
        """What playbook conditions match on; `gpus` defaults to what the job's live pods request."""
        return Subject(
            namespace=key.namespace,
            kind=key.kind.value,
            labels=self.cache.job_labels(key),
            gpus=self.cache.job_gpus(key) if gpus is None else gpus,
            verdict=verdict,
            declared=key.kind == JobKind.GROUP,
        )

    def fire(
        self,
        event: Event,
        incident: IncidentSummary,
        document: IncidentDocument,
        *,
        preview: Preview | None = None,
    ) -> None:
        """Record the plan preview (if any), then queue the actions (digests aside) of every
        playbook the event fires, for this incident. When the store refuses, the firing is kept
        for `retry_unfired` and the error raised."""
        if self.store is None:
            return
        try:
            self._queue(self.store, event, incident, document, preview)
        except UnavailableError:
            self._unfired[incident.id] = (event, incident, document, preview)
            raise

    def retry_unfired(self) -> int:
        """Queue the firings an earlier store failure left unqueued (raises while it still
        refuses); how many were queued. A firing the store rejects for good (its incident
        purged meanwhile) is logged and dropped."""
        if self.store is None:
            return 0
        done = 0
        for incident_id, (event, incident, document, preview) in sorted(self._unfired.items()):
            try:
                self._queue(self.store, event, incident, document, preview)
            except ZonemedicError as exc:
                if isinstance(exc, UnavailableError):
                    raise
                log.error("playbook firing dropped: %s", exc, extra={"incident": incident_id})
            self._unfired.pop(incident_id, None)  # another thread may have queued it too
            done += 1
        return done

    @property
    def unfired(self) -> int:
        """How many firings wait for `retry_unfired`."""
        return len(self._unfired)

    def follow_up(
        self,
        event: Event,
        incident: IncidentSummary,
        document: IncidentDocument,
        *,
        preview: Preview | None = None,
    ) -> FollowUp | None:
        """What `fire` writes for a newly opened incident, as data the store writes with the
        incident in its transaction (`IncidentStore.record_findings`): the plan preview, the
        approval request, the messages and the note saying why nothing is posted. No I/O (the
        store calls it inside its transaction). None when a firing needs a read or a decision
        of its own (an automatic approval): `fire` it once the incident is recorded."""
        now = self.now()
        action: ActionDraft | None = None
        if preview is not None:
            if self.previews is not None:
                action = self.previews.draft(preview)
            document = document.with_fix(preview.to_dict())
        approvals = self.approvals
        finding = document.to_dict()

        def planned(policy: ApprovalPolicy, _playbook: str) -> ApprovalStep | None:
            return None if approvals is None else approvals.planned(incident, document, policy)

        posts = self._posts(event, incident, finding, approve=planned)
        if posts is None:
            return None
        messages, steps = posts
        deadline = next((step.deadline for step in steps
                         if step.kind is ApprovalStepKind.REQUEST), None)  # fmt: skip
        reason = unposted_reason(self.playbooks, event)
        notes = () if reason is None else (
            EventDraft(EventKind.NOTE, {NOT_POSTED: reason}, actor=ACTOR),)  # fmt: skip
        if action is None and deadline is None and not messages and not notes:
            return None
        return FollowUp(now=now, action=action, approval_deadline=deadline,
                        approval_actor=APPROVAL_ACTOR, messages=tuple(messages), notes=notes)

    def followed(self, incident: IncidentSummary, up: FollowUp) -> None:
        """Log what a follow-up recorded with its incident (as `fire` logs it)."""
        if up.approval_deadline is not None:
            log.info("approval requested", extra={"incident": incident.id,
                                                  "deadline": up.approval_deadline.isoformat()})
        for note in up.notes:
            log.info("incident not posted", extra={"incident": incident.id,
                                                   "reason": note.detail.get(NOT_POSTED)})

    def _posts(
        self,
        event: Event,
        incident: IncidentSummary,
        finding: Mapping[str, Any],
        *,
        approve: Callable[[ApprovalPolicy, str], ApprovalStep | None],
    ) -> tuple[list[MessageDraft], list[ApprovalStep]] | None:
        """The posts (digests aside) of every playbook the event fires, each carrying its
        approval step as `approve` (policy, playbook name) gives it, and those steps; `finding`:
        the document's JSON, the payloads' `finding`. None when
        `approve` gives no step for an action that needs one (where `follow_up` cannot decide
        without a read)."""
        messages: list[MessageDraft] = []
        steps: list[ApprovalStep] = []
        for firing in fired(self.playbooks, event):
            for action in firing.actions:
                if action.kind is PlaybookActionKind.DIGEST:
                    continue
                payload = _payload(action.kind, firing.playbook.name, incident, finding)
                if action.approval is not None and self.approvals is not None:
                    step = approve(action.approval, firing.playbook.name)
                    if step is None:
                        return None
                    steps.append(step)
                    payload["approval"] = self._approval(action.approval, step)
                messages.append(MessageDraft(
                    MessageKind.POST, payload=payload, channel=action.channel or self.channel,
                    dedupe_key=f"{action.kind.value}:{firing.playbook.name}:{incident.id}",
                ))  # fmt: skip
        return messages, steps

    def _approval(self, policy: ApprovalPolicy, step: ApprovalStep) -> dict[str, Any]:
        return {
            "approvers": list(policy.approvers),
            "expiry_seconds": (policy.expiry or self.approval_ttl).total_seconds(),
            "auto": step.kind is ApprovalStepKind.AUTO,
            "deadline": step.deadline.isoformat() if step.deadline else None,
        }

    def _queue(
        self,
        store: IncidentStore,
        event: Event,
        incident: IncidentSummary,
        document: IncidentDocument,
        preview: Preview | None,
    ) -> None:
        if preview is not None:
            if self.previews is not None:
                self.previews.record(incident.id, preview)
            document = document.with_fix(preview.to_dict())
        approvals = self.approvals
        finding = document.to_dict()

        def propose(policy: ApprovalPolicy, playbook: str) -> ApprovalStep | None:
            # the approval step first (a conditional write, so a retried firing repeats nothing),
            # so the queued proposal carries the deadline
            if approvals is None:
                return None
            return approvals.propose(incident, document, policy, playbook=playbook)

        posts = self._posts(event, incident, finding, approve=propose)
        for message in () if posts is None else posts[0]:
            store.enqueue_message(message.kind, payload=message.payload, now=self.now(),
                                  incident_id=incident.id, channel=message.channel,
                                  dedupe_key=message.dedupe_key)  # fmt: skip
        reason = unposted_reason(self.playbooks, event)
        if reason is not None:
            store.add_event(incident.id, EventKind.NOTE, now=self.now(), actor=ACTOR,
                            detail={NOT_POSTED: reason})
            log.info("incident not posted", extra={"incident": incident.id, "reason": reason})

    def not_posted(self, incidents: Sequence[IncidentSummary]) -> dict[str, str]:
        """Incident id -> why the current playbooks do not post it, for those they do not (an
        incident opened by a finding or a utilization drop; alerts are posted by their own
        matchers)."""
        out: dict[str, str] = {}
        for incident in incidents:
            trigger = trigger_for_verdict(incident.verdict.value)
            if trigger is None:
                continue
            key = incident.job_ref
            if key is None:
                continue
            reason = unposted_reason(
                self.playbooks,
                Event(trigger, self.subject(key, incident.verdict.value, incident.gpus)),
            )
            if reason is not None:
                out[str(incident.id)] = reason
        return out

    def post_digest(self, playbook: Playbook, summary: Mapping[str, Any]) -> int:
        """Queue the playbook's digest actions (deduped per playbook and minute); how many."""
        if self.store is None:
            return 0
        queued = 0
        for action in playbook.actions:
            if action.kind is not PlaybookActionKind.DIGEST:
                continue
            open_now = self.store.list_incidents(
                IncidentQuery(cluster=self.cluster, open_only=True, limit=200)
            ).incidents
            payload = {
                "playbook": playbook.name,
                "summary": {k: v for k, v in summary.items() if k != "findings"},
                "open_incidents": [to_jsonable(i) for i in open_now],
                NOT_POSTED: self.not_posted(open_now),
            }
            self.store.enqueue_message(
                MessageKind.DIGEST,
                payload=payload,
                now=self.now(),
                channel=action.channel or self.channel,
                dedupe_key=f"digest:{playbook.name}:{summary['at'][:16]}",
            )
            queued += 1
        return queued


def _payload(
    kind: PlaybookActionKind, playbook: str, incident: IncidentSummary, finding: Mapping[str, Any]
) -> dict[str, Any]:
    """The outbox payload of one playbook action for an incident."""
    return {"action": kind.value, "playbook": playbook, "incident_id": incident.id,
            "finding": dict(finding)}
