"""Slack's directory of approvers: members of user groups and display names, read from Slack, cached.

The Slack adapter of the approval domain: `members` is the `agent.approval.approvers.Members`
port (who may decide an incident is the one decision function's rule, in `agent.approval`).
Who calls it: the decision authority reads user group members through `members` (wired by
`agent.runtime.chat`, and built by the CLI in `agent.commands.decisions`; the authority's rule
decides clicks and the slash command's `sweep` alike), the click handler reads display names
(`name`). Group members come from Slack's
`usergroups.users.list`, cached per group for a TTL; display names from `users.info`, cached
too. A group that cannot be read right now (Slack down) counts as having no members, so a
click is refused rather than trusted ("fail closed"), and the answer says it could not check.

What it does not do: record anything, decide who may decide or sweep (the one rule is
`agent.approval.approvers.authorize`), or know an incident's playbook approvers (the authority,
`agent.approval.approvers.Authority`, adds those).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

log = logging.getLogger(__name__)
T = TypeVar("T")


class ApproverDirectory:
    """User group members and display names from Slack, each cached for `ttl`."""

    def __init__(
        self,
        client: WebClient,
        *,
        ttl: timedelta,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.ttl = ttl.total_seconds()
        self.clock = clock
        self._groups: dict[str, tuple[frozenset[str], float]] = {}
        self._names: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def members(self, group: str) -> frozenset[str] | None:
        """The members of user group `group` (cached), or None when Slack cannot say now."""
        return self._members(group)

    def _members(self, group: str) -> frozenset[str] | None:
        def fetch() -> frozenset[str] | None:
            try:
                response = self.client.usergroups_users_list(usergroup=group)
            except (SlackApiError, SlackClientError, OSError) as exc:
                log.warning("cannot read a Slack user group", extra={"usergroup": group,
                                                                     "error": str(exc)})
                return None
            return frozenset(str(u) for u in response.get("users") or [])

        return self._cached(self._groups, group, fetch)

    def name(self, user_id: str) -> str | None:
        """The user's Slack name (cached), or None when Slack cannot say."""

        def fetch() -> str | None:
            try:
                response = self.client.users_info(user=user_id)
            except (SlackApiError, SlackClientError, OSError):
                return None
            user = response.get("user") or {}
            return str(user.get("name") or user.get("real_name") or "") or None

        return self._cached(self._names, user_id, fetch)

    def _cached(
        self, table: dict[str, tuple[T, float]], key: str, fetch: Callable[[], T | None]
    ) -> T | None:
        """`table[key]` while its TTL runs; else what `fetch` says, kept for a TTL unless None
        (Slack could not say: asked again next time). Slack is called outside the lock."""
        now = self.clock()
        with self._lock:
            cached = table.get(key)
            if cached is not None and cached[1] > now:
                return cached[0]
        value = fetch()
        if value is not None:
            with self._lock:
                table[key] = (value, now + self.ttl)
        return value
