"""Waiting on a condition with a deadline, for tests.

Who calls it: tests that wait for something another thread or process does (the agent, the twin,
the fake Slack, a subprocess). `wait(check, timeout=..., what=...)` calls `check` until it returns
a truthy value and returns that value; once the deadline has passed (the check is tried once more
at the deadline) it fails the test with an AssertionError that says what it waited for. `what` is
a string, or a function called only on failure (to show the state the check saw last).

What it does not do: sleep a fixed time for its own sake, or swallow an exception the check raises
(that exception is the test's failure).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait(
    check: Callable[[], T | None], *, timeout: float, what: str | Callable[[], str],
    interval: float = 0.05,
) -> T:  # fmt: skip
    """The first truthy value `check()` returns within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:g} s waiting for {said}")
        time.sleep(interval)


__all__ = ["wait"]
