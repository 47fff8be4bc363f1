"""Backoff: exponential ceiling, full jitter, cap, floor, Retry-After, reset."""

from __future__ import annotations

import pytest

from agent.sources.backoff import Backoff


def test_ceiling_doubles_up_to_the_cap() -> None:
    b = Backoff(base=0.5, cap=4.0, rand=lambda: 1.0)
    assert [b.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    b.reset()
    assert b.next() == 0.5


@pytest.mark.parametrize(("rand", "expected"), [(0.0, 0.05), (0.5, 0.25)])
def test_full_jitter_and_floor(rand: float, expected: float) -> None:
    assert Backoff(base=0.5, rand=lambda: rand).next() == pytest.approx(expected)


@pytest.mark.parametrize(("retry_after", "expected"), [(3.0, 3.0), (0.01, 0.5), (100.0, 30.0)])
def test_retry_after_wins_when_larger_but_is_capped(retry_after: float, expected: float) -> None:
    assert Backoff(base=0.5, rand=lambda: 1.0).next(retry_after) == expected
