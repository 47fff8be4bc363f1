"""What the chat layer needs from the rest of the agent, as Protocols the composition root fills.

Who uses it: `agent.chatops.slack` (clicks and slash commands) and `agent.chatops.delivery` (the
outbox deliverer). The chat layer never imports the store or the remediation package: the runtime
passes the incident store (it satisfies `ChatStore` structurally), the one decision function
(wrapped as a `Decide`) and, optionally, a sweep to run from `/zonemedic sweep`.

What it does not do: implement any of these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from agent.model.admission import AdmissionSummary
from agent.model.incident import (
    Actor,
    ClaimedMessage,
    IncidentDetail,
    IncidentListing,
    IncidentQuery,
    IncidentStats,
)
from agent.model.lifecycle import DecisionOutcome, EventKind, IncidentStatus, MessageKind
from agent.policy.explanation import ExplainQuery


class ChatStore(Protocol):
    """The incident store's methods the chat layer calls."""

    def get_incident(self, incident_id: int) -> IncidentDetail: ...

    def list_incidents(self, query: IncidentQuery | None = None) -> IncidentListing: ...

    def stats(self, *, since: datetime, now: datetime) -> IncidentStats: ...

    def admission_summary(self, *, since: datetime, now: datetime) -> AdmissionSummary: ...

    def add_event(
        self,
        incident_id: int,
        kind: EventKind,
        *,
        now: datetime,
        actor: str | None = ...,
        detail: Mapping[str, Any] | None = ...,
    ) -> int: ...

    def enqueue_message(
        self,
        kind: MessageKind,
        *,
        payload: Mapping[str, Any],
        now: datetime,
        incident_id: int | None = ...,
        channel: str | None = ...,
        dedupe_key: str | None = ...,
    ) -> int: ...


class Outbox(Protocol):
    """The outbox's delivery side: claim due messages (a token each), then settle each claim.
    Claims follow the order per incident: a message is not claimable while an earlier message of
    its incident is pending. Settling applies only while the claim still holds the message."""

    def claim(self, *, now: datetime, limit: int) -> list[ClaimedMessage]: ...

    def delivered(self, claim: ClaimedMessage, *, now: datetime, external_ref: str | None) -> bool: ...

    def failed(self, claim: ClaimedMessage, *, now: datetime, error: str) -> None: ...


@dataclass(frozen=True)
class DecisionReply:
    """What the decision function answered, in the words the chat layer shows."""

    recorded: bool
    status: IncidentStatus | None
    decided_by: str | None
    message: str  # one line for the person who clicked
    refused: bool = False  # the clicker is not an approver in force now (audited as a note)


class Decide(Protocol):
    def __call__(
        self, incident_id: int, outcome: DecisionOutcome, *, actor: Actor, now: datetime
    ) -> DecisionReply: ...


Sweep = Callable[[], str]  # runs one sweep now; returns a one-line summary
# explains one flow (`agent.runtime.explainer.LiveExplainer.explain`): `Explanation.to_dict()`
Explain = Callable[[ExplainQuery], Mapping[str, Any]]
# the blast radius of deleting these `KIND/NS/NAME`s over every job (`agent.runtime.whatif.
# LiveWhatIf.delete`): `BlastRadius.to_dict()`; `InputError` names a bad or absent object
WhatIf = Callable[[tuple[str, ...]], Mapping[str, Any]]
# whether this actor (a Slack user) may start a sweep: the approval rule over `slack.approvers`
MaySweep = Callable[[Actor], bool]
Clock = Callable[[], datetime]
