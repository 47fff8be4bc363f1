"""Slack request verification: the v0 signature over the raw body, a 5-minute window, no replays.

Who calls it: the `/slack/events` endpoint (`agent.chatops.slack`), on the raw bytes, before any
parsing or work; a refused request is answered 401. A request counts when its
`X-Slack-Signature` equals `v0=` + HMAC-SHA256(signing secret, `v0:{timestamp}:{body}`), compared
in constant time, and its `X-Slack-Request-Timestamp` is within the window of now (either side).
A signature already accepted inside the window is a replay and refused; remembered signatures are
forgotten once they are too old to pass the window anyway.

What it does not do: parse the payload or decide anything about the user.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from enum import StrEnum

WINDOW = timedelta(minutes=5)


class Refusal(StrEnum):
    MISSING = "missing signature headers"
    MALFORMED = "malformed timestamp"
    STALE = "timestamp outside the 5-minute window"
    FORGED = "signature does not match"
    REPLAYED = "request already received"


class RequestGuard:
    """Verifies signed requests and remembers accepted signatures (thread-safe)."""

    def __init__(
        self,
        signing_secret: str,
        *,
        window: timedelta = WINDOW,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not signing_secret:
            raise ValueError("a signing secret is required")
        self._secret = signing_secret.encode()
        self._window = window.total_seconds()
        self._clock = clock
        self._seen: dict[str, float] = {}  # signature -> when it stops mattering
        self._lock = threading.Lock()

    def signature(self, timestamp: str, body: bytes) -> str:
        base = b"v0:" + timestamp.encode() + b":" + body
        return "v0=" + hmac.new(self._secret, base, hashlib.sha256).hexdigest()

    def check(self, body: bytes, headers: Mapping[str, str]) -> Refusal | None:
        """None when the request is genuine, fresh and new; else why it is refused."""
        timestamp = _header(headers, "x-slack-request-timestamp")
        given = _header(headers, "x-slack-signature")
        if not timestamp or not given:
            return Refusal.MISSING
        try:
            sent = int(timestamp)
        except ValueError:
            return Refusal.MALFORMED
        now = self._clock()
        if abs(now - sent) > self._window:
            return Refusal.STALE
        if not hmac.compare_digest(self.signature(timestamp, body), given):
            return Refusal.FORGED
        with self._lock:
            self._forget(now)
            if given in self._seen:
                return Refusal.REPLAYED
            self._seen[given] = sent + self._window
        return None

    def _forget(self, now: float) -> None:
        expired = [s for s, until in self._seen.items() if until < now]
        for s in expired:
            del self._seen[s]

    @property
    def remembered(self) -> int:
        with self._lock:
            return len(self._seen)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = headers.get(name.title())
    return value
