"""The agent's own Prometheus metrics, on a private `prometheus_client` registry served at /metrics.

Built once by the composition root and passed to whoever records: the watch loops (restarts), the
Prometheus source (query errors), the admission webhook (its decisions, by outcome, and
their duration), the detector (detection latency, incidents), sweeps (duration),
leader election (leader status), the Alertmanager endpoint, the pipeline (store writes that failed
and were retried; split jobs' cross-zone bytes and egress dollars), the PacketDrop event reader. A
private registry keeps tests and several agents in one process independent. No I/O here; the HTTP
app renders `exposition()`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._cache_counts: Callable[[], Mapping[str, int]] | None = None
        r = self.registry
        self.incidents = Gauge(
            "zonemedic_incidents",
            "Incidents by verdict and status (refreshed by sweeps and the detector).",
            ["verdict", "status"],
            registry=r,
        )
        self.findings = Counter(
            "zonemedic_findings_total", "Diagnoses made, by verdict.", ["verdict"], registry=r
        )
        self.detection_latency = Histogram(
            "zonemedic_detection_latency_seconds",
            "From the cluster change that triggered a diagnosis to the finding being stored.",
            buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0),
            registry=r,
        )
        self.watch_restarts = Counter(
            "zonemedic_watch_restarts_total",
            "List/watch restarts by resource and reason (gone, error, stream).",
            ["resource", "reason"],
            registry=r,
        )
        self.prometheus_queries = Counter(
            "zonemedic_prometheus_queries_total",
            "Queries sent to Prometheus, by outcome (ok, error).",
            ["outcome"],
            registry=r,
        )
        self.prometheus_query_errors = Counter(
            "zonemedic_prometheus_query_errors_total",
            "Prometheus queries that failed (after bounded retries).",
            registry=r,
        )
        self.sweep_duration = Histogram(
            "zonemedic_sweep_duration_seconds",
            "Duration of scheduled health sweeps.",
            buckets=(0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
            registry=r,
        )
        self.detection_batches = Counter(
            "zonemedic_detection_batches_total",
            "Detector batches handled, by outcome: ok, retried (the store refused its writes; put "
            "back with backoff), error (an unexpected error, logged; the batch dropped and left to "
            "the next cluster-wide diagnosis).",
            ["outcome"],
            registry=r,
        )
        self.sweeps = Counter(
            "zonemedic_sweeps_total", "Sweeps run, by outcome.", ["outcome"], registry=r
        )
        self.leader = Gauge(
            "zonemedic_leader", "1 while this replica holds the leader lease.", registry=r
        )
        self.alerts = Counter(
            "zonemedic_alertmanager_alerts_total",
            "Alerts received on the webhook, by outcome (new, duplicate, unmapped, unavailable).",
            ["outcome"],
            registry=r,
        )
        self.store_write_failures = Counter(
            "zonemedic_store_write_failures_total",
            "Work whose database writes failed because the database refused them (after the "
            "store's own retries), by work (detector, alert, sweep, metrics).",
            ["work"],
            registry=r,
        )
        self.store_write_retries = Counter(
            "zonemedic_store_write_retries_total",
            "Work run again after its database writes failed (a detector batch retried, an alert "
            "re-sent by Alertmanager, the next sweep or metric refresh), by work.",
            ["work"],
            registry=r,
        )
        self.slack_refused = Counter(
            "zonemedic_slack_refused_total",
            "Slack requests refused, by reason (signature, other_team, unknown_action, "
            "no_incident, other_cluster, not_approver).",
            ["reason"],
            registry=r,
        )
        self.job_cross_zone_bytes = Gauge(
            "zonemedic_job_cross_zone_bytes_per_second",
            "Cross-zone bytes per second of each split job with an open incident, by source "
            "(measured: by the cluster's exporter, Beyla/OBI/egress.query; estimated: from "
            "diagnosis.steps_per_day).",
            ["namespace", "kind", "job", "source"],
            registry=r,
        )
        self.job_egress_cost = Gauge(
            "zonemedic_job_egress_usd_per_day",
            "Cross-zone egress dollars per day of each split job with an open incident (at "
            "diagnosis.price_per_gb, each way), by source (measured, estimated).",
            ["namespace", "kind", "job", "source"],
            registry=r,
        )
        self.packet_drops = Counter(
            "zonemedic_packet_drop_events_total",
            "Cilium PacketDrop events read, by outcome: job (naming a job's pod: re-diagnosed), "
            "namespace (a pod of no Kubeflow job: its namespace re-diagnosed), ignored (not a "
            "pod).",
            ["outcome"],
            registry=r,
        )
        self.admission_decisions = Counter(
            "zonemedic_admission_decisions_total",
            "Admission webhook decisions, by outcome: placed (the zone patch or Kueue's topology "
            "annotations returned), warned (admission.mode warn: it would have placed the job), "
            "constrained, not_needed, no_zone, deferred, skipped (passed unchanged, with a "
            "warning saying why), invalid (a body that is not an AdmissionReview).",
            ["outcome"],
            registry=r,
        )
        self.admission_duration = Histogram(
            "zonemedic_admission_duration_seconds",
            "Time the admission webhook took to decide one request (from the body read to the "
            "answer), dry runs included.",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5),
            registry=r,
        )
        self.cache_objects = Gauge(
            "zonemedic_cache_objects", "Objects in the watch cache, by resource (its unique name: `pods`, a custom resource's `<plural>.<version>.<group>`).", ["resource"],
            registry=r,
        )

    def record_restart(self, resource: str, reason: str) -> None:
        self.watch_restarts.labels(resource=resource, reason=reason).inc()

    def record_prometheus_query(self, ok: bool) -> None:
        self.prometheus_queries.labels(outcome="ok" if ok else "error").inc()
        if not ok:
            self.prometheus_query_errors.inc()

    def record_slack_refusal(self, reason: str) -> None:
        self.slack_refused.labels(reason=reason).inc()

    def set_leader(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)

    def count_cache_with(self, counts: Callable[[], Mapping[str, int]]) -> None:
        """Refresh `zonemedic_cache_objects` from `counts()` (resource -> objects) at each
        exposition: what a test compares with the cluster to see the cache converge."""
        self._cache_counts = counts

    def exposition(self) -> bytes:
        if self._cache_counts is not None:
            for resource, n in self._cache_counts().items():
                self.cache_objects.labels(resource=resource).set(n)
        return bytes(generate_latest(self.registry))
