"""Egress source: the cluster's measured cross-zone bytes per second, per flow, all jobs at once.

Called by the pipeline at each metrics refresh (after the utilization fetch): exactly one instant
query whatever the number of jobs. `egress.source` picks the counters:
- `beyla` / `obi`: Grafana Beyla's (`beyla_network_*`) or the OpenTelemetry eBPF Instrumentation's
  (`obi_network_*`) counters: the inter-zone counter (`*_network_inter_zone_bytes_total`, feature
  `network_inter_zone`) and the flow counter (`*_network_flow_bytes_total`, feature `network`) where
  it carries `src_zone`; each summed as a rate (`rate_expr`: over `egress.window`, or, for a flow
  younger than the window, over its own life) by the ends' namespace, owner name and pod name
  (`k8s_{src,dst}_{namespace,owner_name,name}`) and the two zones. A series whose two zones are
  equal is not cross-zone and is dropped here.
- `auto`: both of them in one query (`or`).
- `query`: `egress.query`, its `$window` replaced; the series must use the same label names.
Each exporter's part also answers one unlabelled series while its counters exist at all, so "the
exporter runs but measured no flow of this job" is told apart from "no counter exists" (either way
the finding falls back to the estimate, labelled as such, and says why). Rows are labelled
(`label_replace`) by exporter (`zonemedic_exporter`) and counter (`zonemedic_counter`), so rows of
two exporters or two counters never merge: a job's figure is read from one of them
(`agent.diagnosis.egress`).

Prometheus being down or answering garbage is an `EgressReport` with `available=False` and the
reason, never an exception. What it does not do: attribute rows to jobs (`agent.diagnosis.egress`)
or price them (`agent.diagnosis.waste`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from agent.model.egress import EgressCounter, EgressExporter, EgressReport, FlowEnd, ZoneFlow
from agent.settings import EGRESS_WINDOW_PLACEHOLDER, EgressSettings, EgressSource
from agent.sources.prometheus import (
    UNAVAILABLE,
    PrometheusSource,
    QueryFailedError,
    promql_duration,
)

log = logging.getLogger(__name__)

EXPORTER_LABEL = "zonemedic_exporter"
COUNTER_LABEL = "zonemedic_counter"
END_LABELS = ("namespace", "owner_name", "name")
FLOW_LABELS = (
    *(f"k8s_src_{part}" for part in END_LABELS),
    *(f"k8s_dst_{part}" for part in END_LABELS),
    "src_zone",
    "dst_zone",
)
PREFIXES = {EgressExporter.BEYLA: "beyla", EgressExporter.OBI: "obi"}
MAX_ROWS = 1_000_000  # an answer larger than this is refused (a misconfigured query)
YOUNG_SHARE = 0.9  # a series that has existed for less of the window than this is young


def _labelled(expr: str, label: str, value: str) -> str:
    return f'label_replace({expr}, "{label}", "{value}", "", "")'


def resolution(window: timedelta) -> timedelta:
    """The step of the subqueries that find a series' first sample in the window: 1/240 of the
    window, from 1 s to 15 s (a flow is measured at most one step after its first scrape)."""
    seconds = min(15, max(1, int(window.total_seconds() / 240)))
    return timedelta(seconds=seconds)


def rate_expr(selector: str, *, window: timedelta) -> str:
    """Bytes per second of each counter: `rate` over the window for a series that has existed
    for (nearly) all of it; for a younger one, the slope from the sample current at the first
    subquery step of its life to its latest sample (value and timestamp both read at that step,
    so they agree; no extrapolation), so a flow younger than the window is neither diluted by
    the time before it began nor inflated by `rate`'s extrapolation."""
    span, res = promql_duration(window), resolution(window)
    grid = f"[{span}:{promql_duration(res)}]"
    first_at = f"min_over_time(timestamp({selector}){grid})"
    first_value = f"min_over_time({selector}{grid})"
    full = YOUNG_SHARE * window.total_seconds()
    old = f"(rate({selector}[{span}]) and (time() - {first_at}) >= {full:g})"
    young = (f"(({selector} - {first_value}) / clamp_min(timestamp({selector}) - {first_at}, "
             f"{res.total_seconds():g}) and (time() - {first_at}) < {full:g})")
    return f"({old} or {young})"


def exporter_expr(exporter: EgressExporter, *, window: timedelta) -> str:
    """Cross-zone bytes per second of one eBPF exporter, by flow ends and zones (see the module)."""
    prefix = PREFIXES[exporter]
    by = ", ".join(FLOW_LABELS)
    inter = f"{prefix}_network_inter_zone_bytes_total"
    flow = f"{prefix}_network_flow_bytes_total"
    inter_rate = rate_expr(inter, window=window)
    flow_rate = rate_expr(f'{flow}{{src_zone!=""}}', window=window)
    inter_rows = _labelled(f"sum by ({by}) ({inter_rate})", COUNTER_LABEL,
                           EgressCounter.INTER_ZONE.value)  # fmt: skip
    flow_rows = _labelled(f"sum by ({by}) ({flow_rate})", COUNTER_LABEL,
                          EgressCounter.FLOW.value)  # fmt: skip
    presence = f"count({inter} or {flow}) * 0"
    return _labelled(f"({inter_rows} or {flow_rows} or {presence})", EXPORTER_LABEL,
                     exporter.value)  # fmt: skip


def egress_expr(settings: EgressSettings) -> str | None:
    """The one query of `settings.source` (None for `none`)."""
    source = settings.source
    if source is EgressSource.NONE:
        return None
    if source is EgressSource.QUERY:
        query = (settings.query or "").replace(
            EGRESS_WINDOW_PLACEHOLDER, promql_duration(settings.window)
        )
        return _labelled(f"({query})", EXPORTER_LABEL, EgressExporter.QUERY.value)
    if source is EgressSource.AUTO:
        parts = [exporter_expr(e, window=settings.window) for e in PREFIXES]
        return " or ".join(f"({p})" for p in parts)
    return exporter_expr(EgressExporter(source.value), window=settings.window)


def _rate(sample: Any) -> float | None:
    value = sample.get("value") if isinstance(sample, Mapping) else None
    if not isinstance(value, list) or len(value) != 2:
        return None
    try:
        number = float(value[1])
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _end(labels: Mapping[str, Any], side: str) -> FlowEnd | None:
    def get(part: str) -> str:
        value = labels.get(f"k8s_{side}_{part}")
        return value if isinstance(value, str) else ""

    namespace, owner, pod = get("namespace"), get("owner_name"), get("name")
    if not namespace or not (owner or pod):
        return None
    return FlowEnd(namespace=namespace, owner=owner, pod=pod)


def parse_flows(
    result: Iterable[Any], *, at: datetime, window: timedelta
) -> EgressReport:
    """The report of one answer: the attributable cross-zone rows, and which exporters answered."""
    flows: list[ZoneFlow] = []
    exporters: set[EgressExporter] = set()
    for count, sample in enumerate(result):
        if count >= MAX_ROWS:
            return EgressReport(available=False, at=at, window=window,
                                error=f"{UNAVAILABLE}: the egress query answered more than "
                                      f"{MAX_ROWS:,} series")  # fmt: skip
        labels = sample.get("metric") if isinstance(sample, Mapping) else None
        if not isinstance(labels, Mapping):
            continue
        try:
            exporter = EgressExporter(str(labels.get(EXPORTER_LABEL)))
        except ValueError:
            continue
        exporters.add(exporter)
        if exporter is EgressExporter.QUERY:
            counter = EgressCounter.QUERY
        else:
            try:
                counter = EgressCounter(str(labels.get(COUNTER_LABEL)))
            except ValueError:
                continue  # the presence series
        rate = _rate(sample)
        src, dst = _end(labels, "src"), _end(labels, "dst")
        src_zone, dst_zone = str(labels.get("src_zone") or ""), str(labels.get("dst_zone") or "")
        if rate is None or rate == 0 or src is None or dst is None:
            continue
        if src_zone and src_zone == dst_zone:
            continue  # the flow counter's same-zone traffic
        flows.append(ZoneFlow(src=src, dst=dst, bytes_per_second=rate, exporter=exporter,
                              counter=counter, src_zone=src_zone, dst_zone=dst_zone))  # fmt: skip
    return EgressReport(available=True, at=at, window=window, flows=tuple(flows),
                        exporters=frozenset(exporters))  # fmt: skip


class EgressMeter:
    """One instant query per fetch over the Prometheus source's client (timeouts, retries, TLS)."""

    def __init__(self, prometheus: PrometheusSource, settings: EgressSettings) -> None:
        self.prometheus = prometheus
        self.settings = settings
        self.expr = egress_expr(settings)

    def fetch(self, now: datetime) -> EgressReport | None:
        """The cluster's cross-zone flows at `now` (None when `egress.source` is none)."""
        if self.expr is None:
            return None
        window = self.settings.window
        try:
            result = self.prometheus.instant(self.expr, at=now)
        except QueryFailedError as exc:
            log.warning("egress query failed", extra={"error": str(exc)})
            return EgressReport(available=False, at=now, window=window,
                                error=f"{UNAVAILABLE}: {exc}")  # fmt: skip
        return parse_flows(result, at=now, window=window)
