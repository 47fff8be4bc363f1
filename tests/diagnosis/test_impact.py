"""Impact estimate: GPUs outside the target zone and the cross-zone traffic formula."""

from __future__ import annotations

import pytest

from agent.diagnosis.impact import cross_zone_cost_usd, estimate_impact


@pytest.mark.parametrize(
    (
        "gpus",
        "pods",
        "target",
        "bytes_per_step",
        "outside",
        "share",
        "pods_out",
        "crossing",
        "cost",
    ),
    [
        ({"a": 3, "b": 1}, {"a": 3, "b": 1}, "a", 0, 1, 0.25, 1, None, None),
        ({"a": 2, "b": 2}, {"a": 2, "b": 2}, "b", 0, 2, 0.5, 2, None, None),
        # no target: relative to the zone with most GPUs
        ({"a": 4, "b": 8}, {"a": 1, "b": 2}, None, 0, 4, 4 / 12, 1, None, None),
        # CPU-only job: no GPUs, share 0
        ({"a": 0, "b": 0}, {"a": 2, "b": 1}, "a", 0, 0, 0.0, 1, None, None),
        # 2 GB per step per pod, one pod outside: 2 GB crossing, $0.01/GB each way = $0.04
        ({"a": 3, "b": 1}, {"a": 3, "b": 1}, "a", 2_000_000_000, 1, 0.25, 1, 2_000_000_000, 0.04),
        (
            {"a": 1, "b": 1, "c": 2},
            {"a": 1, "b": 1, "c": 2},
            "c",
            500_000_000,
            2,
            0.5,
            2,
            1_000_000_000,
            0.02,
        ),
    ],
)
def test_estimate_impact(
    gpus: dict[str, int],
    pods: dict[str, int],
    target: str | None,
    bytes_per_step: int,
    outside: int,
    share: float,
    pods_out: int,
    crossing: int | None,
    cost: float | None,
) -> None:
    impact = estimate_impact(
        gpus_by_zone=gpus,
        pods_by_zone=pods,
        target_zone=target,
        bytes_per_step=bytes_per_step,
        price_per_gb=0.01,
    )
    assert impact.gpus_outside_target == outside
    assert impact.reference_zone == (target or max(gpus, key=lambda z: gpus[z]))
    assert impact.gpu_share_outside_target == pytest.approx(share)
    assert impact.pods_outside_target == pods_out
    assert impact.cross_zone_bytes_per_step == crossing
    assert impact.cross_zone_cost_per_step_usd == (
        pytest.approx(cost) if cost is not None else None
    )


@pytest.mark.parametrize(
    ("nbytes", "price", "usd"), [(10**9, 0.01, 0.02), (5 * 10**9, 0.02, 0.2), (0, 0.01, 0.0)]
)
def test_cross_zone_cost(nbytes: int, price: float, usd: float) -> None:
    assert cross_zone_cost_usd(nbytes, price_per_gb=price) == pytest.approx(usd)
