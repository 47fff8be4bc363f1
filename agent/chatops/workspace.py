"""Our Slack workspace: the team id the bot token belongs to, from `auth.test`.

Who calls it: the chat wiring resolves it at start-up (`agent.runtime.chat`); the request screen
(`agent.chatops.slack`) compares every payload's team id with it. If Slack cannot be reached at
start-up the id stays unknown and is asked again (at most every `retry` seconds) when a request
arrives; while it is unknown every request is refused ("fail closed"): a payload cannot prove it
comes from our workspace. One request at a time asks: a request arriving while `auth.test` is
under way does not wait for it (it is refused, the id not known yet), so a Slack that hangs
holds one worker thread for the client's timeout, never a lock every request waits on. The
screen runs off the event loop (`agent.chatops.slack.events_route`).

What it does not do: verify signatures (`agent.chatops.verification`) or check users.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

log = logging.getLogger(__name__)


class Workspace:
    """The team id of the bot token's workspace (thread-safe, asked once, then cached)."""

    def __init__(
        self,
        client: WebClient,
        *,
        retry: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self.retry = retry  # seconds between two auth.test calls while the id is unknown
        self._clock = clock
        self._lock = threading.Lock()
        self._team_id: str | None = None
        self._asked_at: float | None = None
        self._asking = False

    def resolve(self) -> str | None:
        """Our team id (asks `auth.test` when not known yet and nobody is asking); None while
        Slack cannot say. The lock is never held while Slack is asked."""
        with self._lock:
            if self._team_id is not None:
                return self._team_id
            now = self._clock()
            if self._asking or (self._asked_at is not None and now - self._asked_at < self.retry):
                return None
            self._asked_at = now
            self._asking = True
        team: str | None = None
        try:
            answer = self._client.auth_test()
            team = str(answer.get("team_id") or "") or None
            if team is None:
                log.warning("auth.test named no team id; requests are refused until it does")
        except (SlackApiError, SlackClientError, OSError) as exc:
            log.warning("cannot learn the Slack team id (auth.test); requests are refused "
                        "until it is known", extra={"error": str(exc)})
        finally:
            with self._lock:
                self._asking = False
                if team is not None:
                    self._team_id = team
        return team

    def check(self, team_id: str | None) -> str | None:
        """None when `team_id` is ours; else why the payload is refused."""
        ours = self.resolve()
        if ours is None:
            return "the workspace of this agent is not known yet (Slack unreachable)"
        if not team_id:
            return "the request names no workspace"
        if team_id != ours:
            return f"the request comes from another workspace ({team_id})"
        return None
