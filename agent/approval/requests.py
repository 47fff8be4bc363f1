"""The approval step of a new incident: request a decision with a deadline, or approve it at once.

Who calls it: the pipeline's playbook actions (`agent.runtime.playbooks`), when a playbook's
`propose_colocation` action fires for a newly opened incident (before the proposal is queued for
the chat layer, so the message sees the deadline).
What the incident needs is the pure rule `agent.approval.step.approval_step`; this module
applies it to the store:

- REQUEST: `open -> awaiting_approval` with the deadline (`store.request_approval`); past it, the
  leader's expiry job moves the incident to `expired` and decisions record nothing.
- AUTO (a namespace the playbook opts in): the one decision function with the `auto` source, as
  if a person had approved; the leader's remediation queue then remediates it. Held when the same job's
  (same uid) last co-location rolled back within `remediation.auto_hold`: a REQUEST instead, and
  a note on the incident's timeline says why.
- NONE (the finding is not remediable): nothing; the incident stays `open`.

`planned` is the same rule for an incident opened in a batch (`IncidentStore.record_findings`):
the request is written with the incident, in its transaction; an automatic approval is left to
`propose`. A second proposal for the same incident (two playbooks) changes nothing: the incident is no longer
`open`, and both steps are conditional. What it does not do: post anything or touch the cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from agent.approval.approvers import Authority
from agent.approval.decision import Authorizer, DecisionRequest, decide
from agent.approval.step import (
    ApprovalStep,
    ApprovalStepKind,
    Remediability,
    RolledBack,
    approval_step,
)
from agent.model.document import IncidentDocument
from agent.model.incident import Actor, IncidentQuery, IncidentSummary
from agent.model.lifecycle import DecisionOutcome, DecisionSource, EventKind, IncidentStatus
from agent.playbook.model import ApprovalPolicy
from agent.settings import Settings
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

ACTOR = "zonemedic"


class ApprovalRequests:
    def __init__(
        self, store: IncidentStore, *, settings: Settings, now: Callable[[], datetime],
        authority: Authorizer | None = None,
    ) -> None:
        self.store = store
        # zonemedic itself (`auto`) may always decide; the authority is the one decisions pass
        self.authority = authority if authority is not None else Authority.of(settings, ())
        self.cluster = settings.cluster_name
        self.protected = frozenset(settings.diagnosis.protected_namespaces)
        self.default_ttl = settings.slack.approval_ttl
        self.auto_hold = settings.remediation.auto_hold
        self.now = now

    def _rolled_back(self, incident: IncidentSummary) -> RolledBack | None:
        """The job's most recent co-location that rolled back (the same uid when it is known)."""
        listing = self.store.list_incidents(IncidentQuery(
            cluster=self.cluster, namespace=incident.namespace, name=incident.name,
            uid=incident.uid, status=IncidentStatus.ROLLED_BACK, limit=20,
        ))  # fmt: skip
        closed = [(i.closed_at, i.id) for i in listing.incidents
                  if i.kind == incident.kind and i.closed_at is not None]
        if not closed:
            return None
        at, last = max(closed)
        events = self.store.get_incident(last).events
        reason = next((str(e.detail["reason"]) for e in reversed(events) if e.detail.get("reason")),
                      "no reason recorded")
        return RolledBack(at=at, reason=f"incident {last}: {reason}")

    def planned(
        self, incident: IncidentSummary, document: IncidentDocument, policy: ApprovalPolicy
    ) -> ApprovalStep | None:
        """The step `propose` takes for a new incident where it needs no reads and no decision
        (a request with its deadline, or none), for the caller to write with the incident; None
        in a namespace the playbook approves automatically (`propose` reads the job's last
        rollback and decides there)."""
        if policy.is_auto(incident.namespace) and incident.status is IncidentStatus.OPEN:
            return None
        return approval_step(
            namespace=incident.namespace, subject=Remediability.of(document), policy=policy,
            protected_namespaces=self.protected, default_ttl=self.default_ttl, now=self.now(),
            rolled_back=None, auto_hold=self.auto_hold,
        )  # fmt: skip

    def propose(
        self,
        incident: IncidentSummary,
        document: IncidentDocument,
        policy: ApprovalPolicy,
        *,
        playbook: str,
    ) -> ApprovalStep:
        """Apply what the new incident needs; returns the step (its deadline for a request)."""
        now = self.now()
        auto = policy.is_auto(incident.namespace) and incident.status is IncidentStatus.OPEN
        step = approval_step(
            namespace=incident.namespace, subject=Remediability.of(document), policy=policy,
            protected_namespaces=self.protected, default_ttl=self.default_ttl, now=now,
            rolled_back=self._rolled_back(incident) if auto else None, auto_hold=self.auto_hold,
        )
        if incident.status is not IncidentStatus.OPEN or step.kind is ApprovalStepKind.NONE:
            return step  # not remediable, or already moved on (another playbook, a person)
        if step.kind is ApprovalStepKind.AUTO:
            result = decide(
                self.store,
                DecisionRequest(
                    incident.id, DecisionOutcome.APPROVE,
                    Actor(id=ACTOR, name=None, source=DecisionSource.AUTO),
                    reason=f"playbook {playbook}: {step.reason}",
                ),
                now=now, authority=self.authority,
            )
            log.info("auto-approval", extra={"incident": incident.id, "playbook": playbook,
                                             "recorded": result.recorded})
            return step
        if step.deadline is None:  # a REQUEST always carries its deadline
            return step
        requested = self.store.request_approval(
            incident.id, deadline=step.deadline, now=now, actor=ACTOR
        )
        if auto and requested.applied:  # the automatic approval was held: say why
            self.store.add_event(incident.id, EventKind.NOTE, now=now, actor=ACTOR,
                                 detail={"reason": step.reason})
        log.info("approval requested", extra={"incident": incident.id, "playbook": playbook,
                                              "deadline": step.deadline.isoformat(),
                                              "applied": requested.applied})
        return step
