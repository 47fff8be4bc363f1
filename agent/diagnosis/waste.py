"""Waste per day of a split job: idle GPU-hours and cross-zone egress dollars (measured, estimated).

Who calls it: the agent's pipeline when it records a finding (with the utilization evidence it
holds and the job's measured cross-zone bytes, if any), so the figures travel with the incident's
diagnosis (the model's `agent.model.waste.Waste`, `to_dict()` under `waste`) to the chat message, `incidents show`,
`incidents stats` and the API. Pure: numbers in, numbers and the basis of each figure out; no I/O,
no clock.

GPU-hours per day = idle GPU share x the job's GPUs x 24 h, where the idle share is
- utilization now and its pre-split baseline known: (baseline - now) / 100, at least 0: the share
  the split costs against the job's own healthy figure;
- else a blocked split (the job's traffic is denied, training cannot proceed): 1 - now / 100 when
  utilization is known, else 1 (every GPU of the job waits);
- else a degraded split with utilization now but no baseline (a job split from its start has no
  healthy past): 1 - now / 100, the share the GPUs sit idle now, said to be an upper bound of what
  the split costs;
- else unknown: a degraded split with no utilization sample yet (detected as its pods are bound,
  before they report): no figure, said as such (the agent estimates again when the first samples
  arrive).

Cross-zone egress dollars per day = cross-zone bytes per day / 1e9 x price per GB x 2 (billed
leaving one zone and entering the other), where the bytes per day are
- measured (`egress_source: measured`) where the cluster's exporter (Beyla, OBI, a configured
  query) measured the job's pods: their cross-zone bytes per second over the window x 86,400;
  the basis names the exporter and the window ("measured by Beyla over the last 1h");
- else estimated (`egress_source: estimated`, the basis says "estimated from
  diagnosis.steps_per_day"): cross-zone bytes per step (`bytes_per_step` configured x pods outside
  the reference zone, the impact's `cross_zone_bytes_per_step`) x the configured `steps_per_day`;
  without either the figure is unknown (`egress_source: unknown`), said as such. A blocked split
  completes no step: $0 per day while blocked (its traffic is dropped). `egress_unmeasured` says
  why nothing was measured.
What it does not do: read metrics or settings, or render text for people.
"""

from __future__ import annotations

from datetime import timedelta

from agent.diagnosis.impact import BYTES_PER_GB, cross_zone_cost_usd
from agent.model.egress import MeasuredEgress
from agent.model.finding import Impact
from agent.model.verdict import Verdict
from agent.model.waste import EgressBasis, Waste

HOURS_PER_DAY = 24.0
SECONDS_PER_DAY = 86_400.0


def span_text(window: timedelta) -> str:
    """A window as people say it: `1h`, `90m`, `45s`."""
    seconds = round(window.total_seconds())
    if seconds and seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds and seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def idle_gpu_hours_per_day(
    *,
    verdict: Verdict,
    gpus: int,
    utilization_now: float | None,
    utilization_baseline: float | None,
) -> tuple[float | None, str]:
    """GPU-hours per day lost to the split and the basis of the figure (see the module)."""
    if gpus <= 0:
        return None, "unknown: the job requests no GPUs"
    if utilization_now is not None and utilization_baseline is not None:
        share = max(0.0, utilization_baseline - utilization_now) / 100.0
        basis = (f"{gpus} GPU(s) x ({utilization_baseline:.0f}% baseline - "
                 f"{utilization_now:.0f}% now) x 24 h")  # fmt: skip
        return round(gpus * share * HOURS_PER_DAY, 3), basis
    if verdict is Verdict.ZONE_SPLIT_BLOCKED:
        if utilization_now is not None:
            share = max(0.0, 100.0 - utilization_now) / 100.0
            basis = f"training blocked: {gpus} GPU(s) x {100 - utilization_now:.0f}% idle x 24 h"
            return round(gpus * share * HOURS_PER_DAY, 3), basis
        return gpus * HOURS_PER_DAY, f"training blocked: {gpus} GPU(s) idle x 24 h"
    if utilization_now is not None:
        share = max(0.0, 100.0 - utilization_now) / 100.0
        basis = (f"{gpus} GPU(s) x {100 - utilization_now:.0f}% idle now x 24 h; no pre-split "
                 "baseline, so an upper bound")  # fmt: skip
        return round(gpus * share * HOURS_PER_DAY, 3), basis
    return None, "not measured yet: no utilization sample of the job yet"


def egress_per_day(
    *,
    verdict: Verdict,
    cross_zone_bytes_per_step: int | None,
    steps_per_day: float,
    price_per_gb: float,
) -> tuple[float | None, float | None, str]:
    """(dollars per day, GB per day, basis) of the estimated cross-zone traffic (see the module)."""
    if verdict is Verdict.ZONE_SPLIT_BLOCKED:
        return 0.0, 0.0, "none while blocked: no training step completes"
    if cross_zone_bytes_per_step is None:
        return None, None, "unknown: set diagnosis.bytes_per_step"
    if steps_per_day <= 0:
        return None, None, "unknown: no step rate (set diagnosis.steps_per_day)"
    crossing = cross_zone_bytes_per_step * steps_per_day
    dollars = cross_zone_cost_usd(int(crossing), price_per_gb=price_per_gb)
    per_step = cross_zone_bytes_per_step / 1e9
    basis = (f"estimated from diagnosis.steps_per_day: {per_step:.3g} GB/step x "
             f"{steps_per_day:,.0f} steps/day x ${price_per_gb:g}/GB each way")  # fmt: skip
    return round(dollars, 4), round(crossing / 1e9, 3), basis


def measured_egress_per_day(
    measured: MeasuredEgress, *, price_per_gb: float
) -> tuple[float, float, str]:
    """(dollars per day, GB per day, basis) of measured cross-zone bytes per second."""
    per_day = measured.bytes_per_second * SECONDS_PER_DAY
    dollars = cross_zone_cost_usd(int(per_day), price_per_gb=price_per_gb)
    gb = per_day / BYTES_PER_GB
    volume = f"{gb:,.0f}" if gb >= 100 else f"{gb:.3g}"
    basis = (f"measured by {measured.exporter.label} over the last {span_text(measured.window)}: "
             f"{volume} GB/day x ${price_per_gb:g}/GB each way")  # fmt: skip
    return round(dollars, 4), round(gb, 3), basis


def estimate_waste(
    *,
    verdict: Verdict,
    impact: Impact | None,
    utilization_now: float | None,
    utilization_baseline: float | None,
    steps_per_day: float,
    price_per_gb: float,
    measured: MeasuredEgress | None = None,
    unmeasured: str | None = None,
) -> Waste:
    """Both per-day figures of a split finding (see the module docstring): the egress figure from
    `measured` when given, else estimated (`unmeasured` says why nothing was measured)."""
    gpus = impact.gpus_total if impact is not None else 0
    hours, hours_basis = idle_gpu_hours_per_day(
        verdict=verdict, gpus=gpus, utilization_now=utilization_now,
        utilization_baseline=utilization_baseline,
    )  # fmt: skip
    if measured is not None:
        dollars_m, gb_m, basis_m = measured_egress_per_day(measured, price_per_gb=price_per_gb)
        return Waste(gpu_hours_per_day=hours, gpu_hours_basis=hours_basis,
                     egress_usd_per_day=dollars_m, egress_basis=basis_m,
                     cross_zone_gb_per_day=gb_m, egress_source=EgressBasis.MEASURED,
                     egress_measured_by=measured.exporter.value,
                     egress_window_seconds=measured.window.total_seconds())  # fmt: skip
    dollars, gb, egress_basis = egress_per_day(
        verdict=verdict,
        cross_zone_bytes_per_step=impact.cross_zone_bytes_per_step if impact is not None else None,
        steps_per_day=steps_per_day, price_per_gb=price_per_gb,
    )  # fmt: skip
    source = EgressBasis.ESTIMATED if dollars is not None else EgressBasis.UNKNOWN
    return Waste(gpu_hours_per_day=hours, gpu_hours_basis=hours_basis,
                 egress_usd_per_day=dollars, egress_basis=egress_basis,
                 cross_zone_gb_per_day=gb, egress_source=source,
                 egress_unmeasured=unmeasured)  # fmt: skip
