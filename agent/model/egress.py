"""Measured cross-zone traffic as plain data: flow rows from the cluster's exporter, per-job totals.

Built by `agent.sources.egress` (one Prometheus answer per metrics refresh, for all jobs) and read
by `agent.diagnosis.egress` (which attributes rows to a job) and `agent.diagnosis.waste` (which
prices a job's measured bytes). An end of a flow is named the way Grafana Beyla and the
OpenTelemetry eBPF Instrumentation label their network metrics: namespace (`k8s_src_namespace`),
owner name (`k8s_src_owner_name`) and pod name (`k8s_src_name`), either of the names possibly
unknown (""). What it does not do: query, attribute or price anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum


class EgressExporter(StrEnum):
    """Who measured a flow: Grafana Beyla, the OpenTelemetry eBPF Instrumentation, or the
    operator's own PromQL query (`egress.query`)."""

    BEYLA = "beyla"
    OBI = "obi"
    QUERY = "query"

    @property
    def label(self) -> str:
        """How people read the exporter's name ("measured by Beyla")."""
        return {"beyla": "Beyla", "obi": "OpenTelemetry eBPF Instrumentation",
                "query": "egress.query"}[self.value]  # fmt: skip


class EgressCounter(StrEnum):
    """Which counter a row was read from: the exporter's inter-zone counter, its flow counter
    with zone attributes, or the operator's query."""

    INTER_ZONE = "inter_zone"
    FLOW = "flow"
    QUERY = "query"


@dataclass(frozen=True, slots=True)
class FlowEnd:
    """One end of a measured flow: its namespace and, where the exporter says, its owner's name
    and its pod's name ("" when not reported)."""

    namespace: str
    owner: str = ""
    pod: str = ""


@dataclass(frozen=True, slots=True)
class ZoneFlow:
    """Bytes per second from `src` to `dst` across a zone boundary, averaged over the window."""

    src: FlowEnd
    dst: FlowEnd
    bytes_per_second: float
    exporter: EgressExporter
    counter: EgressCounter = EgressCounter.QUERY
    src_zone: str = ""
    dst_zone: str = ""


@dataclass(frozen=True)
class EgressReport:
    """One answer of the egress query: the cross-zone flow rows of the whole cluster, or why there
    are none (`available` false: the query failed; `exporters` empty: no counter exists)."""

    available: bool
    at: datetime
    window: timedelta
    flows: tuple[ZoneFlow, ...] = ()
    exporters: frozenset[EgressExporter] = field(default_factory=frozenset)
    error: str | None = None

    @property
    def measured(self) -> bool:
        """An exporter answered: a job with no row of its own crossed no zone boundary."""
        return self.available and bool(self.exporters)


@dataclass(frozen=True)
class MeasuredEgress:
    """A job's measured cross-zone traffic: bytes per second over `window`, by `exporter`, summed
    over `flows` rows between two of the job's own pods."""

    bytes_per_second: float
    exporter: EgressExporter
    window: timedelta
    flows: int
