"""Waiting in twin tests: poll a condition until it holds or a deadline passes (no fixed sleeps)."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """True as soon as `predicate()` holds; False when it still does not after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()
