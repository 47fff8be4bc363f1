"""Drop detection (pure): below threshold x baseline for the whole window, with coverage."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agent.sources.drop import detect_drop

NOW = 10_000.0
STEP = timedelta(seconds=30)
WINDOW = timedelta(minutes=10)


def series(value: float, *, start: float = NOW - 600, end: float = NOW) -> list[tuple[float, float]]:
    out, t = [], start
    while t <= end:
        out.append((t, value))
        t += 30
    return out


@pytest.mark.parametrize(
    ("samples", "baseline", "dropped", "reason"),
    [
        (series(30), 90.0, True, "below 70% of baseline"),
        (series(80), 90.0, False, "not below the threshold throughout"),
        ([*series(30)[:-1], (NOW, 70.0)], 90.0, False, "not below"),  # recovered at the end
        (series(30) + series(95, start=NOW - 1200, end=NOW - 630), 90.0, True, "below"),  # before window ignored
        (series(30, start=NOW - 300), 90.0, False, "do not cover the window"),  # began 5 min ago
        (series(30, end=NOW - 300), 90.0, False, "do not cover the window"),  # stale
        (series(30), None, False, "no baseline"),
        (series(0), 0.0, False, "baseline is zero"),
        ([], 90.0, False, "no samples"),
    ],
)
def test_detect_drop(
    samples: list[tuple[float, float]], baseline: float | None, dropped: bool, reason: str
) -> None:
    verdict = detect_drop(
        samples, baseline, now=NOW, threshold=0.7, duration=WINDOW, step=STEP
    )
    assert verdict.dropped is dropped
    assert reason in verdict.reason


def test_ratio_is_latest_over_baseline() -> None:
    verdict = detect_drop(series(45), 90.0, now=NOW, threshold=0.7, duration=WINDOW, step=STEP)
    assert verdict.ratio == pytest.approx(0.5)
