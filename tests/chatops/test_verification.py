"""Request verification on its own: the signature, the window on both sides, replays and how long
signatures are remembered."""

from __future__ import annotations

import pytest

from agent.chatops.verification import Refusal, RequestGuard
from agent.fakes.slack import sign

SECRET = "s3cret"
NOW = 1_800_000_000


class Clock:
    def __init__(self) -> None:
        self.now = float(NOW)

    def __call__(self) -> float:
        return self.now


def headers(ts: int, body: bytes, secret: str = SECRET) -> dict[str, str]:
    return {"x-slack-request-timestamp": str(ts),
            "x-slack-signature": sign(secret, timestamp=ts, body=body)}


@pytest.mark.parametrize(
    ("ts_offset", "secret", "given", "expected"),
    [
        (0, SECRET, None, None),
        (-300, SECRET, None, None),  # exactly 5 minutes old: still inside
        (300, SECRET, None, None),  # a clock 5 minutes ahead: still inside
        (-301, SECRET, None, Refusal.STALE),
        (301, SECRET, None, Refusal.STALE),
        (0, "other", None, Refusal.FORGED),
        (0, SECRET, {"x-slack-signature": "v0=00"}, Refusal.MISSING),
        (0, SECRET, {"x-slack-request-timestamp": "soon", "x-slack-signature": "v0=00"},
         Refusal.MALFORMED),
    ],
)
def test_check(ts_offset: int, secret: str, given: dict[str, str] | None,
               expected: Refusal | None) -> None:
    guard = RequestGuard(SECRET, clock=Clock())
    body = b"payload=%7B%7D"
    assert guard.check(body, given if given is not None else headers(NOW + ts_offset, body, secret)) is expected


def test_replay_refused_until_it_would_be_stale_anyway() -> None:
    clock = Clock()
    guard = RequestGuard(SECRET, clock=clock)
    body = b"x=1"
    h = headers(NOW, body)
    assert guard.check(body, h) is None
    assert guard.check(body, h) is Refusal.REPLAYED
    assert guard.check(b"x=2", headers(NOW, b"x=2")) is None  # another request: fine
    clock.now += 301
    assert guard.check(body, h) is Refusal.STALE
    guard.check(b"y", headers(int(clock.now), b"y"))
    assert guard.remembered == 1, "old signatures are forgotten"


def test_title_case_headers_are_read() -> None:
    guard = RequestGuard(SECRET, clock=Clock())
    h = {k.title(): v for k, v in headers(NOW, b"b").items()}
    assert guard.check(b"b", h) is None
