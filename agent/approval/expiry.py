"""The leader's approval expiry: incidents past their approval deadline become `expired`.

Who calls it: the composition root (today `agent.runtime.assembly`, through `register`) registers
`ApprovalExpiry.tick` as the leader-gated background job `approval-expiry` (`JOB`, every
`remediation.pickup_interval`); `register` takes any `BackgroundJobs` (the runtime's `Parts`), so
this package does not import the runtime. Each tick is one store call,
`expire_due(now=...)`: an incident awaiting approval (or open with a deadline) whose deadline has
passed becomes `expired`, and a snooze that ended goes back to awaiting approval. Every change is a
conditional transition, so an expiry racing a decision has one winner; a decision that comes after
the deadline records nothing whether or not this job ran yet (`agent.approval.decision`).

What it does not do: choose deadlines (the approval step, `agent.approval.step`, does when approval
is requested), hold the SQL (`agent.store.approval_deadlines` does), post anything, or run on a follower
(the scheduler gates every background job).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from agent.settings import Settings
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

JOB = "approval-expiry"  # the background job's name


class ApprovalExpiry:
    def __init__(
        self, store: IncidentStore, *, now: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.store = store
        self.now = now
        self.moved = 0

    def tick(self) -> None:
        moved = self.store.expire_due(now=self.now())
        if moved:
            self.moved += len(moved)
            log.info("approvals expired or snoozes ended", extra={"incidents": moved})



class BackgroundJobs(Protocol):
    """Where the leader's background jobs are registered (`agent.runtime.root.Parts`)."""

    @property
    def settings(self) -> Settings: ...

    def add_background_job(self, name: str, *, every: timedelta, run: Callable[[], None]) -> None: ...


def register(parts: BackgroundJobs, store: IncidentStore) -> ApprovalExpiry:
    """Register the expiry as the leader-gated background job `approval-expiry` (`JOB`)."""
    expiry = ApprovalExpiry(store)
    parts.add_background_job(JOB, every=parts.settings.remediation.pickup_interval, run=expiry.tick)
    return expiry
