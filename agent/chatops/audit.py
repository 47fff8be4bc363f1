"""The audit of refused Slack requests: one warning log line and one counted refusal each.

Who calls it: the `/slack/events` endpoint (a bad signature), the request screen (another team's
payload, an action id the agent never sends) and the click handler (an incident that does not exist
or belongs to another cluster, a user who is not an approver), all in `agent.chatops.slack`. Where
the refused request names an incident that exists, the click handler also writes a `note` event on
its timeline; this module keeps the part that always happens: the log line (reason, user, team,
incident) and the count per reason, reported to an injected counter (the runtime's
`zonemedic_slack_refused_total`).

What it does not do: decide whether a request is refused, or answer it.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from enum import StrEnum

log = logging.getLogger(__name__)


class RefusalReason(StrEnum):
    """Why a Slack request was refused (the counter's `reason` label)."""

    SIGNATURE = "signature"  # forged, tampered, stale, replayed or unsigned
    OTHER_TEAM = "other_team"  # a payload from a workspace that is not ours
    UNKNOWN_ACTION = "unknown_action"  # an action id the agent never sends
    NO_INCIDENT = "no_incident"  # a button naming no incident, or one that does not exist
    OTHER_CLUSTER = "other_cluster"  # an incident of another cluster's agent
    NOT_APPROVER = "not_approver"  # a decision from someone who may not decide


class RefusalAudit:
    """Logs and counts refusals (thread-safe); `count` also reports each to a metric."""

    def __init__(self, count: Callable[[RefusalReason], None] | None = None) -> None:
        self._count = count
        self._lock = threading.Lock()
        self._seen: Counter[RefusalReason] = Counter()

    def refused(
        self,
        reason: RefusalReason,
        *,
        detail: str,
        user: str | None = None,
        team: str | None = None,
        incident_id: int | None = None,
    ) -> None:
        log.warning(
            "slack request refused",
            extra={"reason": reason.value, "detail": detail, "user": user, "team": team,
                   "incident_id": incident_id},
        )
        with self._lock:
            self._seen[reason] += 1
        if self._count is not None:
            self._count(reason)

    def counts(self) -> dict[RefusalReason, int]:
        with self._lock:
            return dict(self._seen)
