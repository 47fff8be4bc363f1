"""GPU utilization drop detection: below `threshold x baseline` for the whole of `duration`.

Called by `agent.sources.prometheus` on each job's samples (from one range query for all jobs).
Pure: samples, baseline and `now` in, a verdict out; no clock, no Prometheus.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class DropVerdict:
    dropped: bool
    reason: str
    ratio: float | None = None  # latest / baseline


def detect_drop(
    samples: Sequence[tuple[float, float]],
    baseline: float | None,
    *,
    now: float,
    threshold: float,
    duration: timedelta,
    step: timedelta,
) -> DropVerdict:
    """`samples` are (unix time, utilization); dropped when every sample in the window
    `[now - duration, now]` is below `threshold * baseline` and the samples cover the window
    (first within two steps of its start, last within two steps of `now`)."""
    if baseline is None:
        return DropVerdict(False, "no baseline")
    if baseline <= 0:
        return DropVerdict(False, "baseline is zero")
    start = now - duration.total_seconds()
    window = sorted((t, v) for t, v in samples if start - 1e-9 <= t <= now + 1e-9)
    if not window:
        return DropVerdict(False, "no samples in the window")
    ratio = window[-1][1] / baseline
    slack = 2 * step.total_seconds()
    if window[0][0] > start + slack or window[-1][0] < now - slack:
        return DropVerdict(False, "samples do not cover the window", ratio)
    limit = threshold * baseline
    if all(v < limit for _, v in window):
        return DropVerdict(True, f"below {threshold:.0%} of baseline for {duration}", ratio)
    return DropVerdict(False, "not below the threshold throughout", ratio)
