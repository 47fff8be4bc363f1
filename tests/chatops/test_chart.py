"""The utilization chart: a real PNG with the split marked, or nothing without metrics."""

from __future__ import annotations

import io
import threading

import pytest
from matplotlib.image import imread

from agent.chatops.chart import time_axis, utilization_png

T = 1_780_000_000.0
SAMPLES = [(T + 60 * i, 85.0 if i < 30 else 40.0) for i in range(60)]


def test_png_with_split_and_baseline() -> None:
    png = utilization_png(SAMPLES, title="ml/resnet", split_at=T + 1800, baseline=85.0)
    assert png is not None and png.startswith(b"\x89PNG\r\n\x1a\n")
    image = imread(io.BytesIO(png), format="png")
    assert image.shape[:2] == (300, 800)
    # the split line is drawn in red: some pixels are (214, 39, 40)
    red = ((image[..., 0] > 0.8) & (image[..., 1] < 0.2) & (image[..., 2] < 0.2)).sum()
    assert red > 50


def test_without_split_no_red_line() -> None:
    png = utilization_png(SAMPLES, title="ml/resnet")
    assert png is not None
    image = imread(io.BytesIO(png), format="png")
    red = ((image[..., 0] > 0.8) & (image[..., 1] < 0.2) & (image[..., 2] < 0.2)).sum()
    assert red == 0


@pytest.mark.parametrize("samples", [[], [(T, 50.0)]])
def test_no_metrics_no_chart(samples: list[tuple[float, float]]) -> None:
    assert utilization_png(samples, title="x") is None


def test_two_threads_draw_at_once() -> None:
    results: list[bytes | None] = []

    def draw() -> None:
        results.append(utilization_png(SAMPLES, title="t", split_at=T + 600))

    threads = [threading.Thread(target=draw) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 2 and all(r and r.startswith(b"\x89PNG") for r in results)


@pytest.mark.parametrize(("span", "seconds_ticks"), [(3.0, True), (40.0, True), (3600.0, False)])
def test_a_span_of_seconds_ticks_on_whole_seconds(span: float, seconds_ticks: bool) -> None:
    from matplotlib.dates import DateFormatter, SecondLocator
    from matplotlib.figure import Figure

    axes = Figure().add_subplot()
    time_axis(axes, span=span)
    formatter, locator = axes.xaxis.get_major_formatter(), axes.xaxis.get_major_locator()
    assert isinstance(locator, SecondLocator) is seconds_ticks
    assert (isinstance(formatter, DateFormatter) and formatter.fmt == "%H:%M:%S") is seconds_ticks
