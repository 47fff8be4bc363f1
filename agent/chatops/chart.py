"""A PNG chart of a job's GPU utilization over the last hours, with the moment of the split marked.

Who calls it: the outbox deliverer (`agent.chatops.delivery`), off the request path, before it
uploads the chart into the incident's thread. It draws with matplotlib's Agg canvas on a private
`Figure` (no pyplot global state, so two threads may draw at once) and returns the PNG bytes;
matplotlib is imported on the first chart, not with the agent (it costs most of a second).
No metrics, no chart: `utilization_png` returns None for fewer than two samples.

What it does not do: query Prometheus, upload, or read the clock.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from datetime import UTC
from typing import Any

MIN_SAMPLES = 2
SECONDS_PER_DAY = 86400.0
SECONDS_PER_MINUTE = 60.0


def _days(unix_seconds: float) -> float:
    """matplotlib's date number (days since its default epoch, 1970-01-01 UTC)."""
    return unix_seconds / SECONDS_PER_DAY


def time_axis(axes: Any, *, span: float) -> None:
    """UTC dates on the x axis; a span of seconds (a demo's) ticks on whole seconds, labelled
    HH:MM:SS (matplotlib would label half seconds with microseconds)."""
    from matplotlib.dates import DateFormatter, SecondLocator

    axes.xaxis_date(tz=UTC)
    if span < SECONDS_PER_MINUTE:
        every = max(1, math.ceil(span / 6))
        axes.xaxis.set_major_locator(SecondLocator(interval=every, tz=UTC))  # type: ignore[no-untyped-call]
        axes.xaxis.set_major_formatter(DateFormatter("%H:%M:%S", tz=UTC))  # type: ignore[no-untyped-call]


def utilization_png(
    samples: Sequence[tuple[float, float]],
    *,
    title: str,
    split_at: float | None = None,
    baseline: float | None = None,
    marks: Sequence[tuple[float, str]] = (),
) -> bytes | None:
    """The chart as PNG bytes: utilization (0-100 %) against UTC time (`samples` are
    (unix seconds, percent)); a vertical line at `split_at`, a dashed one at `baseline`, and a
    dotted vertical line at each of `marks` ((unix seconds, label), e.g. the approval)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    points = sorted(samples)
    if len(points) < MIN_SAMPLES:
        return None
    times = [_days(t) for t, _ in points]
    values = [v for _, v in points]
    figure = Figure(figsize=(8, 3), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.plot(times, values, color="#1f77b4", linewidth=1.8, label="GPU utilization")
    if baseline is not None:
        axes.axhline(baseline, color="#2ca02c", linestyle="--", linewidth=1, label="baseline")
    if split_at is not None and points[0][0] <= split_at <= points[-1][0]:
        axes.axvline(_days(split_at), color="#d62728", linewidth=1.5,
                     label="split detected")
    for (at, label), color in zip(marks, ("#9467bd", "#ff7f0e", "#8c564b"), strict=False):
        if points[0][0] <= at <= points[-1][0]:
            axes.axvline(_days(at), color=color, linestyle=":", linewidth=1.5, label=label)
    time_axis(axes, span=points[-1][0] - points[0][0])
    axes.set_ylim(0, 100)
    axes.set_ylabel("GPU utilization (%)")
    axes.set_xlabel("time (UTC)")
    axes.set_title(title[:120], fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower left", fontsize=8)
    figure.autofmt_xdate()
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()
