"""`tests.support.waiting.wait`: it returns the check's first truthy value, and past the deadline
it fails with what it waited for (a function for `what` is called only then)."""

from __future__ import annotations

import threading

import pytest

from tests.support.waiting import wait


def test_wait_returns_the_first_truthy_value_another_thread_brings() -> None:
    box: list[str] = []
    timer = threading.Timer(0.1, lambda: box.append("ready"))
    timer.start()
    try:
        assert wait(lambda: box[:1], timeout=10, what="the value") == ["ready"]
    finally:
        timer.cancel()


def test_wait_fails_past_the_deadline_saying_what_it_waited_for() -> None:
    calls: list[int] = []
    said: list[str] = []

    def check() -> int:
        calls.append(1)
        return 0

    def what() -> str:
        said.append("asked")
        return f"a value after {len(calls)} tries"

    with pytest.raises(AssertionError, match=r"timed out after 0\.2 s waiting for a value after"):
        wait(check, timeout=0.2, what=what, interval=0.01)
    assert len(calls) >= 2 and said == ["asked"]
