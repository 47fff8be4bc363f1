"""Waste per day (pure): idle GPU-hours from utilization or a blocked split, cross-zone egress
dollars measured (the exporter's bytes per second) or estimated (bytes per step and a step rate,
labelled as such); "unknown" with the reason when there is no basis."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agent.diagnosis.waste import (
    egress_per_day,
    estimate_waste,
    idle_gpu_hours_per_day,
    measured_egress_per_day,
    span_text,
)
from agent.model.egress import EgressExporter, MeasuredEgress
from agent.model.finding import Impact
from agent.model.verdict import Verdict
from agent.model.waste import EgressBasis

BLOCKED = Verdict.ZONE_SPLIT_BLOCKED
DEGRADED = Verdict.ZONE_SPLIT_DEGRADED


@pytest.mark.parametrize(
    ("verdict", "gpus", "now", "baseline", "hours", "basis"),
    [
        (DEGRADED, 4, 40.0, 85.0, 4 * 0.45 * 24, "4 GPU(s) x (85% baseline - 40% now) x 24 h"),
        (DEGRADED, 8, 90.0, 85.0, 0.0, "(85% baseline - 90% now)"),  # above baseline: no waste
        # no pre-split baseline: the share idle now, an upper bound
        (DEGRADED, 4, 40.0, None, 4 * 0.6 * 24,
         "4 GPU(s) x 60% idle now x 24 h; no pre-split baseline, so an upper bound"),
        (DEGRADED, 4, None, None, None, "not measured yet: no utilization sample of the job yet"),
        (DEGRADED, 4, None, 85.0, None, "not measured yet: no utilization sample of the job yet"),
        (BLOCKED, 4, None, None, 96.0, "training blocked: 4 GPU(s) idle x 24 h"),
        (BLOCKED, 4, 2.0, None, 4 * 0.98 * 24, "training blocked: 4 GPU(s) x 98% idle x 24 h"),
        (BLOCKED, 4, 2.0, 85.0, 4 * 0.83 * 24, "(85% baseline - 2% now)"),
        (BLOCKED, 0, None, None, None, "unknown: the job requests no GPUs"),
    ],
)
def test_idle_gpu_hours_per_day(
    verdict: Verdict, gpus: int, now: float | None, baseline: float | None,
    hours: float | None, basis: str,
) -> None:
    got, why = idle_gpu_hours_per_day(verdict=verdict, gpus=gpus, utilization_now=now,
                                      utilization_baseline=baseline)
    assert got == (pytest.approx(hours) if hours is not None else None)
    assert basis in why


@pytest.mark.parametrize(
    ("verdict", "per_step", "steps", "price", "dollars", "gb", "basis"),
    [
        # 0.25 GB x 2,000 steps = 500 GB/day crossing, billed each way at $0.01/GB: $10
        (DEGRADED, 250_000_000, 2000.0, 0.01, 10.0, 500.0,
         "0.25 GB/step x 2,000 steps/day x $0.01/GB each way"),
        (DEGRADED, 250_000_000, 2000.0, 0.02, 20.0, 500.0, "$0.02/GB"),
        (DEGRADED, 250_000_000, 0.0, 0.01, None, None, "unknown: no step rate (set diagnosis.steps_per_day)"),
        (DEGRADED, None, 2000.0, 0.01, None, None, "unknown: set diagnosis.bytes_per_step"),
        (BLOCKED, 250_000_000, 2000.0, 0.01, 0.0, 0.0, "none while blocked"),
        (BLOCKED, None, 0.0, 0.01, 0.0, 0.0, "none while blocked"),
    ],
)  # fmt: skip
def test_egress_per_day(
    verdict: Verdict, per_step: int | None, steps: float, price: float,
    dollars: float | None, gb: float | None, basis: str,
) -> None:
    got, got_gb, why = egress_per_day(verdict=verdict, cross_zone_bytes_per_step=per_step,
                                      steps_per_day=steps, price_per_gb=price)
    assert got == (pytest.approx(dollars) if dollars is not None else None)
    assert got_gb == (pytest.approx(gb) if gb is not None else None)
    assert basis in why


def test_estimate_waste_uses_the_impact() -> None:
    impact = Impact(gpus_total=4, gpus_outside_target=1, gpu_share_outside_target=0.25,
                    pods_outside_target=1, cross_zone_bytes_per_step=250_000_000,
                    cross_zone_cost_per_step_usd=0.005, reference_zone="zone-a")
    waste = estimate_waste(verdict=DEGRADED, impact=impact, utilization_now=40.0,
                           utilization_baseline=85.0, steps_per_day=2000.0, price_per_gb=0.01)
    assert waste.to_dict() == {
        "gpu_hours_per_day": pytest.approx(43.2), "gpu_hours_basis":
            "4 GPU(s) x (85% baseline - 40% now) x 24 h",
        "egress_usd_per_day": pytest.approx(10.0),
        "egress_basis": "estimated from diagnosis.steps_per_day: 0.25 GB/step x 2,000 steps/day "
                        "x $0.01/GB each way",
        "cross_zone_gb_per_day": pytest.approx(500.0),
        "egress_source": "estimated", "egress_measured_by": None, "egress_window_seconds": None,
        "egress_unmeasured": None,
    }
    none = estimate_waste(verdict=DEGRADED, impact=None, utilization_now=None,
                          utilization_baseline=None, steps_per_day=0.0, price_per_gb=0.01,
                          unmeasured="no cross-zone byte counter in Prometheus")
    assert none.gpu_hours_per_day is None and none.egress_usd_per_day is None
    assert none.gpu_hours_basis.startswith("unknown") and none.egress_basis.startswith("unknown")
    assert none.egress_source is EgressBasis.UNKNOWN
    assert none.to_dict()["egress_unmeasured"] == "no cross-zone byte counter in Prometheus"


@pytest.mark.parametrize(
    ("exporter", "rate", "window", "price", "dollars", "gb", "basis"),
    [
        # 1 MB/s = 86.4 GB/day, billed each way at $0.01/GB: $1.728
        (EgressExporter.BEYLA, 1e6, timedelta(hours=1), 0.01, 1.728, 86.4,
         "measured by Beyla over the last 1h: 86.4 GB/day x $0.01/GB each way"),
        (EgressExporter.OBI, 1e6, timedelta(minutes=5), 0.02, 3.456, 86.4,
         "measured by OpenTelemetry eBPF Instrumentation over the last 5m"),
        (EgressExporter.QUERY, 0.0, timedelta(seconds=90), 0.01, 0.0, 0.0,
         "measured by egress.query over the last 90s: 0 GB/day"),
        (EgressExporter.BEYLA, 2.3e6, timedelta(hours=1), 0.01, 3.9744, 198.72,
         "measured by Beyla over the last 1h: 199 GB/day"),
        (EgressExporter.BEYLA, 2.3e9, timedelta(hours=1), 0.01, 3974.4, 198_720.0,
         "measured by Beyla over the last 1h: 198,720 GB/day"),
    ],
)  # fmt: skip
def test_a_measured_rate_is_priced_and_labelled_with_its_exporter_and_window(
    exporter: EgressExporter, rate: float, window: timedelta, price: float,
    dollars: float, gb: float, basis: str,
) -> None:
    measured = MeasuredEgress(bytes_per_second=rate, exporter=exporter, window=window, flows=2)
    got, got_gb, why = measured_egress_per_day(measured, price_per_gb=price)
    assert (got, got_gb) == (pytest.approx(dollars), pytest.approx(gb))
    assert basis in why


def test_a_measurement_wins_over_the_estimate_even_while_blocked() -> None:
    impact = Impact(gpus_total=4, gpus_outside_target=1, gpu_share_outside_target=0.25,
                    pods_outside_target=1, cross_zone_bytes_per_step=250_000_000)
    measured = MeasuredEgress(bytes_per_second=2e6, exporter=EgressExporter.BEYLA,
                              window=timedelta(hours=1), flows=3)
    for verdict in (DEGRADED, BLOCKED):
        waste = estimate_waste(verdict=verdict, impact=impact, utilization_now=40.0,
                               utilization_baseline=85.0, steps_per_day=2000.0,
                               price_per_gb=0.01, measured=measured)
        doc = waste.to_dict()
        assert doc["egress_source"] == "measured" and doc["egress_measured_by"] == "beyla"
        assert doc["egress_usd_per_day"] == pytest.approx(3.456)
        assert doc["cross_zone_gb_per_day"] == pytest.approx(172.8)
        assert doc["egress_window_seconds"] == 3600.0
        assert doc["egress_basis"].startswith("measured by Beyla over the last 1h")


@pytest.mark.parametrize(
    ("window", "text"),
    [(timedelta(hours=1), "1h"), (timedelta(hours=2), "2h"), (timedelta(minutes=90), "90m"),
     (timedelta(seconds=45), "45s"), (timedelta(seconds=61), "61s")],
)
def test_span_text(window: timedelta, text: str) -> None:
    assert span_text(window) == text
