"""Impact estimate of a split job: GPUs outside the target zone and the cross-zone traffic bill.

Formulas (pure functions; metrics later supply `bytes_per_step` and a step rate):
- `gpus_outside_target` = the job's GPU requests on pods outside the target zone; the share is that
  over the job's total. With no target zone, the reference is the zone holding most of the job's
  GPUs (tie: most pods, then name).
- `cross_zone_bytes_per_step` = `bytes_per_step` x pods outside the reference zone (each such pod
  exchanges its per-step bytes with the rest of the job across a zone boundary).
- `cross_zone_cost_per_step_usd` = bytes / 1e9 x `price_per_gb` x 2 (billed leaving one zone and
  entering the other: "each way"). Both are None while `bytes_per_step` is 0 (unknown).
Called by `agent.diagnosis.diagnose`. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.model.finding import Impact

BYTES_PER_GB = 1_000_000_000


def reference_zone(
    *, gpus_by_zone: Mapping[str, int], pods_by_zone: Mapping[str, int], target_zone: str | None
) -> str | None:
    if target_zone is not None:
        return target_zone
    zones = sorted(pods_by_zone, key=lambda z: (-gpus_by_zone.get(z, 0), -pods_by_zone[z], z))
    return zones[0] if zones else None


def cross_zone_cost_usd(bytes_crossing: int, *, price_per_gb: float) -> float:
    """Cost of `bytes_crossing` bytes crossing a zone boundary, billed each way."""
    return bytes_crossing / BYTES_PER_GB * price_per_gb * 2


def estimate_impact(
    *,
    gpus_by_zone: Mapping[str, int],
    pods_by_zone: Mapping[str, int],
    target_zone: str | None,
    bytes_per_step: int = 0,
    price_per_gb: float = 0.01,
) -> Impact:
    """The impact of the job's current placement relative to `target_zone`."""
    ref = reference_zone(
        gpus_by_zone=gpus_by_zone, pods_by_zone=pods_by_zone, target_zone=target_zone
    )
    total = sum(gpus_by_zone.values())
    outside = total - gpus_by_zone.get(ref, 0) if ref is not None else 0
    pods_outside = sum(pods_by_zone.values()) - (pods_by_zone.get(ref, 0) if ref else 0)
    crossing: int | None = None
    cost: float | None = None
    if bytes_per_step > 0:
        crossing = bytes_per_step * pods_outside
        cost = round(cross_zone_cost_usd(crossing, price_per_gb=price_per_gb), 9)
    return Impact(
        gpus_total=total,
        gpus_outside_target=outside,
        gpu_share_outside_target=outside / total if total else 0.0,
        pods_outside_target=pods_outside,
        cross_zone_bytes_per_step=crossing,
        cross_zone_cost_per_step_usd=cost,
        reference_zone=ref,
    )
