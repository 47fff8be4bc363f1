"""Estimated waste per day (pure): idle GPU-hours from utilization or a blocked split, cross-zone
egress dollars from bytes per step and a step rate; "unknown" with the reason when there is no
basis."""

from __future__ import annotations

import pytest

from agent.diagnosis.waste import egress_per_day, estimate_waste, idle_gpu_hours_per_day
from agent.model.finding import Impact
from agent.model.verdict import Verdict

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
        "egress_basis": "0.25 GB/step x 2,000 steps/day x $0.01/GB each way",
        "cross_zone_gb_per_day": pytest.approx(500.0),
    }
    none = estimate_waste(verdict=DEGRADED, impact=None, utilization_now=None,
                          utilization_baseline=None, steps_per_day=0.0, price_per_gb=0.01)
    assert none.gpu_hours_per_day is None and none.egress_usd_per_day is None
    assert none.gpu_hours_basis.startswith("unknown") and none.egress_basis.startswith("unknown")
