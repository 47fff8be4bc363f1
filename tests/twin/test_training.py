"""The training model: step time, utilization, calibration to the incident's figures."""

from __future__ import annotations

import pytest

from agent.twin.training import (
    JobPhase,
    Link,
    TrainingParams,
    ZoneModel,
    allreduce_seconds,
    bytes_sent_per_step,
    gpu_utilization,
    jitter,
    step_timing,
)

ZONES = ZoneModel()


@pytest.mark.parametrize(
    ("ranks", "gradient_bytes", "link", "expected"),
    [
        (1, 1e9, Link(0.001, 1e9), 0.0),
        (2, 1e9, Link(0.0, 1e9), 1.0),  # 2(n-1)/n = 1 of the bytes
        (4, 0.0, Link(0.001, 1e9), 0.006),  # 6 latency-bound exchanges
        (4, 2e9, Link(0.001, 1e9), 0.006 + 3.0),
    ],
)
def test_allreduce_seconds(ranks: int, gradient_bytes: float, link: Link, expected: float) -> None:
    assert allreduce_seconds(ranks, gradient_bytes, link) == pytest.approx(expected)


def test_bytes_per_step() -> None:
    assert bytes_sent_per_step(1, 1e9) == 0.0
    assert bytes_sent_per_step(4, 1e9) == pytest.approx(1.5e9)


@pytest.mark.parametrize(
    ("zones", "low", "high"),
    [
        (["a", "a", "a", "a", "a"], 0.80, 0.90),  # co-located (the fix)
        (["b", "a", "a", "a", "a"], 0.35, 0.45),  # coordinator in another zone (the incident)
        (["a", "a"], 0.80, 0.95),
    ],
)
def test_default_calibration_matches_the_incident(
    zones: list[str], low: float, high: float
) -> None:
    timing = step_timing(TrainingParams(), ranks=len(zones), link=ZONES.slowest(zones))
    assert low <= timing.utilization <= high


def test_utilization_per_phase() -> None:
    timing = step_timing(TrainingParams(), ranks=5, link=ZONES.intra)
    assert gpu_utilization(JobPhase.TRAINING, timing) == timing.utilization
    assert gpu_utilization(JobPhase.BLOCKED, timing) < 0.05
    assert gpu_utilization(JobPhase.WAITING, timing) == 0.0


def test_zone_links() -> None:
    assert ZONES.link("a", "a") == ZONES.intra
    assert ZONES.link("a", "b") == ZONES.inter
    assert ZONES.slowest(["a"]) == ZONES.intra


def test_jitter_is_reproducible_and_bounded() -> None:
    values = [jitter("gpu-0", b, amplitude=0.02) for b in range(200)]
    assert values == [jitter("gpu-0", b, amplitude=0.02) for b in range(200)]
    assert all(-0.02 <= v <= 0.02 for v in values)
    assert len(set(values)) > 100
