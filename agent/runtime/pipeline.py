"""The glue from detection to the core and the store: diagnose, record, resolve, sweep, evidence.

Called by the composition root (`Agent`) through its `Pipeline` protocol: `handle_change` for the
detector's debounced batches, `handle_alert` for Alertmanager alerts, `sweep` for scheduled and
one-shot sweeps, `refresh_metrics` for the periodic utilization refresh (leader only).

- Diagnosis reads only the watch cache (no API request): the cache's slim, manifest-shaped objects
  go through the core's manifest parsers (incrementally: `agent.runtime.mirror`) and
  `diagnose_cluster`. A detector batch diagnoses only the jobs it affects (its jobs, and every job
  of its namespaces: a scoped diagnosis); a cluster-wide change (node, cluster-wide policy,
  namespace labels, start-up, leadership acquired) diagnoses everything and then reconciles like a
  sweep (open incidents of jobs no longer found are superseded), once the caches are synced.
  A cluster-wide batch (and a sweep) reads the cluster's open incidents once (not once per job:
  a job found healthy with none open costs no query) and records the problems that open a new
  incident first, then re-detections, then the healthy jobs. The problems go to the store
  `RECORD_BATCH` at a time (`IncidentStore.record_findings`: multi-row statements in one
  transaction), each new incident with its playbooks' follow-up (plan preview, approval request,
  outbox messages, the note saying why it is not posted) in the transaction that opens it; a
  firing that needs an automatic approval is fired once its incident is recorded. A follower remembers the jobs of the last
  changes it saw (at most `_FOLLOWED`); its first cluster-wide batch as the leader diagnoses and
  records those before the diagnosis of every job, so a split that appeared during the hand-over
  is recorded at the start of the new term, not after 150,000 pods are diagnosed.
- Only the leader records detector batches (with leader election off every replica is the
  leader); a follower only keeps its parsed mirror warm, so a re-detection lands once in a
  timeline. The composition root submits a cluster-wide change when this replica acquires the
  lease, so a new leader catches up on what it did not record as a follower.
- The right verdict first: a finding some of whose bound pods still await their zone-mirroring
  labels (`Finding.awaiting_labels`) is not recorded at all (no incident, no message) until a
  label write or the pods' start settles it (the cache reports those at once).
- A finding of a problem verdict goes to the store (`record_finding`: one open incident per job,
  whatever its verdicts; a re-detection adds a timeline event, and before a decision the incident
  takes a topology verdict seen) with the latest utilization evidence and samples (the incident's
  "utilization before" is read from those taken while it is open), or `"metrics unavailable"`;
  a new incident, or one whose verdict moved to another class, fires the matching playbooks'
  actions into the store's outbox (`agent.runtime.playbooks`; the chat layer delivers them, one
  message per incident). A job's uid, labels and requested GPUs come from the cache
  (`ClusterCache.job_uid`, `job_labels`, `job_gpus`). A job found healthy resolves its open
  incidents; a job that is gone (no live pods, and no Kubeflow object still there unfinished:
  a suspended or restarting job keeps its incident) supersedes its incidents. A split some zone
  would fix but none has room for (`Finding.awaits_room`) is remembered, and a change that may
  free capacity (`Change.capacity`) diagnoses it again in that batch.
- A remediable split that opens an incident gets a plan preview (`agent.runtime.previews`: the
  patches, their diff and preconditions, or why the fix cannot be applied), recorded before the
  playbooks' messages are queued; a re-detection of an undecided incident with another verdict
  or placement records a new one (a refusal saying why when the verdict has no fix). A split finding also carries its waste per day (`agent.diagnosis.waste`:
  idle GPU-hours, cross-zone egress dollars) under `waste`: the egress measured where the egress
  meter's last answer (one query per metrics refresh, `agent.sources.egress`) attributes cross-zone
  flows to the job's pods (`agent.diagnosis.egress`), else estimated, labelled as such; the dollars
  go to the incident's `estimated_cost` (per day) and to the split-job gauges. A refresh that starts
  (or stops) measuring a split job diagnoses and records it again at once; a recorded figure that
  moved (another basis, or beyond `EGRESS_MOVE_SHARE`) adds a `redetected` event of its own to the
  timeline (`detail.egress`), so its chat message is re-rendered.
- Metrics: a utilization drop and a firing alert open incidents of their own (the job may be slow
  for reasons zonemedic cannot see), and a refresh attaches evidence to open split incidents once
  the job's utilization is a steady reading (`steady_reading`), with the idle GPU-hours per day
  estimated again from it: a split found as its pods are bound has no utilization sample when it
  is recorded.
- Cilium's PacketDrop Events (`handle_packet_drops`): the pod an Event names is mapped to its job
  (the cache's Kubeflow job, else the generic group of the last diagnosis); the message goes once
  into the timeline of the job's open topology incidents (`evidence`, actor `cilium`), kept
  (bounded) until one is open; the jobs are returned to be re-diagnosed at once.
- The database refusing writes: the work raises `UnavailableError` instead of dropping anything.
  The detector retries the batch (recording again is safe: findings dedupe by fingerprint; a
  batch that failed half-way re-detects what it had recorded); the webhook answers 503, its
  store calls bounded by `http.database_timeout`, and Alertmanager re-sends; firings not queued
  are queued before the next work. `zonemedic_store_write_failures_total` and
  `zonemedic_store_write_retries_total` count it by work; readiness probes that a write
  transaction can start (`database_writes`), not only that the database answers a read.

One diagnosis at a time (a lock shared by the detector and sweeps). What it does not do: decide
approvals or touch the cluster (remediation does).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from agent.diagnosis.diagnose import JobScope, diagnose_cluster
from agent.diagnosis.egress import EgressIndex, job_ends
from agent.diagnosis.waste import EgressBasis, estimate_waste, idle_gpu_hours_per_day
from agent.errors import UnavailableError
from agent.model.cluster import ClusterState
from agent.model.egress import MeasuredEgress
from agent.model.finding import SPLIT_VERDICTS, Finding
from agent.model.incident import (
    FindingOutcome,
    FindingRecord,
    FollowUp,
    IncidentQuery,
    IncidentSummary,
)
from agent.model.job import Job, JobRef
from agent.model.lifecycle import (
    TOPOLOGY_CLASSES,
    EventKind,
    IncidentStatus,
    LifecycleError,
    VerdictClass,
    check_transition,
    verdict_class,
)
from agent.model.verdict import Verdict
from agent.model.workload import JobKind
from agent.playbook.matching import Event, trigger_for_verdict
from agent.playbook.model import Playbook, TriggerKind
from agent.runtime.approvals import ApprovalRequests
from agent.runtime.http import IncidentDecisions, IncidentQueries
from agent.runtime.incidents import StoreIncidents
from agent.runtime.mirror import ModelMirror
from agent.runtime.playbooks import PlaybookActions
from agent.runtime.previews import PlanPreviews, Preview, wanted
from agent.runtime.root import Parts
from agent.sources.alertmanager import Alert, AlertStatus
from agent.sources.change import Change
from agent.sources.packetdrops import PacketDrop
from agent.sources.prometheus import UNAVAILABLE, JobMetrics, MetricsReport
from agent.store.probe import write_blocker
from agent.store.repository import IncidentStore
from agent.store.resilience import deadline
from agent.topology.facts import ClusterFacts
from agent.topology.jobs import find_jobs

log = logging.getLogger(__name__)

ACTOR = "zonemedic"
_RESOLVABLE = (IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL, IncidentStatus.SNOOZED)
_MAX_FAILED_WORK = 10_000
RECORD_BATCH = 200  # problems of a cluster-wide batch recorded per store transaction
_FOLLOWED = 500  # jobs (and namespaces) changed while following that a new term records first
# a split job's egress figure is recorded again when the measurement moves this much (or its
# basis changes): the finding, its chat message and the dashboard follow the measurement
EGRESS_MOVE_SHARE = 0.2
EGRESS_MOVE_USD = 0.01
DROP_ACTOR = "cilium"  # the timeline actor of Cilium's PacketDrop messages
MAX_PENDING_DROP_JOBS = 10_000  # jobs whose drop messages wait for an open incident
MAX_PENDING_DROPS = 50  # messages one job keeps waiting
MAX_WRITTEN_DROPS = 50_000  # (job, pod, message) written lately, not asked of the store again
MAX_WAITING_ROOM = 10_000  # jobs waiting for room that capacity changes re-diagnose


class StoreWork(StrEnum):
    """The kinds of pipeline work that write to the store (the label of the write metrics)."""

    DETECTOR = "detector"
    ALERT = "alert"
    SWEEP = "sweep"
    METRICS = "metrics"


@dataclass
class _Pending:
    """A finding about to be recorded: its document and store record, and the plan preview to
    write with the incident it is expected to open."""

    finding: Finding
    key: JobRef
    document: dict[str, Any]
    gpus: int | None
    record: FindingRecord
    preview: Preview | None = None
    previewed: bool = False  # the preview was computed (it may be None: nothing to preview)


def in_scope(key: JobRef, change: Change) -> bool:
    return change.everything or key in change.jobs or key.namespace in change.namespaces


def job_scope(change: Change) -> JobScope:
    """The jobs a (not cluster-wide) change affects, as the core's scope."""
    return JobScope(jobs=change.jobs, namespaces=change.namespaces)


def metrics_evidence(report: MetricsReport | None, key: JobRef) -> dict[str, Any]:
    """What a finding says about utilization: numbers, or why there are none."""
    if report is None:
        return {"status": f"{UNAVAILABLE}: not fetched yet"}
    if not report.available:
        return {"status": report.error or UNAVAILABLE}
    found = report.for_job(key)
    if found is None:
        return {"status": "no samples for this job yet", "at": report.at.isoformat()}
    return {
        "status": "ok",
        "at": report.at.isoformat(),
        "utilization_now": found.now,
        "utilization_baseline": found.baseline,
        "dropped": found.drop.dropped,
        "drop_reason": found.drop.reason,
    }


class AgentPipeline:
    def __init__(
        self,
        parts: Parts,
        store: IncidentStore | None,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.parts = parts
        self.settings = parts.settings
        self.cluster = parts.settings.cluster_name
        self.store = store
        self.now = now
        self.approvals = (
            ApprovalRequests(store, settings=parts.settings, now=now) if store is not None else None
        )
        self.monotonic = monotonic
        self._lock = threading.RLock()
        self.report: MetricsReport | None = None
        self._evidence_recorded: set[JobRef] = set()
        self.mirror = ModelMirror(parts.cache, settings=parts.settings.diagnosis)
        self.mirror_keys: tuple[str, ...] = ()  # of the last diagnosis
        self._state: ClusterState | None = None  # of the last diagnosis
        self._facts: ClusterFacts | None = None  # of the last diagnosis
        self._jobs_in: dict[str, dict[JobRef, Job]] = {}  # of `_state`, by namespace, as asked
        self.egress: EgressIndex | None = None  # the last answer of the egress meter
        self._egress_shown: dict[JobRef, tuple[EgressBasis, float | None]] = {}  # as recorded
        # Cilium's drop messages waiting for their job's open incident, and those written lately
        self._pending_drops: dict[JobRef, dict[tuple[str, str], PacketDrop]] = {}
        self._written_drops: dict[tuple[JobRef, str, str], None] = {}
        self.previews = (
            PlanPreviews(parts.api, store, now=now)
            if store is not None and parts.settings.remediation.preview
            else None
        )
        self.diagnoses = 0
        self.diagnosed_last = 0  # findings of the last diagnosis (scoped or whole)
        self.follower_batches = 0  # detector batches left to the leader
        self._failed_work: set[tuple[StoreWork, Hashable]] = set()  # work whose writes failed
        # a cluster-wide batch's one read of the open incidents, by job (None: query per job)
        self._open_now: dict[JobRef, list[IncidentSummary]] | None = None
        # what changed last while this replica followed (most recent last): a new term's first
        # split jobs some zone would fix, none of which has room (most recent last)
        self._waiting_room: dict[JobRef, None] = {}
        # jobs whose pods await their zone-mirroring labels, since when (monotonic seconds)
        self._unsettled_since: dict[JobRef, float] = {}
        self._settle_overdue: set[JobRef] = set()  # ... recorded anyway, past the bound
        self.label_settle_timeout = parts.settings.detection.label_settle_timeout.total_seconds()
        self._followed_jobs: dict[JobRef, None] = {}
        self._followed_namespaces: dict[str, None] = {}
        self.actions = PlaybookActions(
            playbooks=parts.playbooks,
            store=store,
            cache=parts.cache,
            cluster=self.cluster,
            channel=parts.settings.slack.channel,
            approvals=self.approvals,
            previews=self.previews,
            approval_ttl=parts.settings.slack.approval_ttl,
            now=now,
        )

    # -- the protocol --------------------------------------------------------------------------

    def readiness(self) -> dict[str, bool]:
        """`database`: a read round-trip; `database_writes`: a write transaction can start now
        (a write probe; reads alone pass while SQLite's write lock is held elsewhere). Each check
        is bounded by `http.database_timeout`."""
        if self.store is None:
            return {"database": True}
        with deadline(self.settings.http.database_timeout):
            reachable = self.store.ping()
            blocker = (
                write_blocker(self.store.engine, timeout=self.settings.http.database_timeout)
                if reachable
                else "the database is unreachable"
            )
        if blocker is not None:
            log.warning("not ready: the database takes no writes", extra={"reason": blocker})
        return {"database": reachable, "database_writes": blocker is None}

    def incidents(self) -> IncidentQueries | None:
        if self.store is None:
            return None
        return StoreIncidents(self.store, cluster=self.cluster, now=self.now,
                              authority=self.parts.approvers)

    def decisions(self) -> IncidentDecisions | None:
        if self.store is None:
            return None
        return StoreIncidents(self.store, cluster=self.cluster, now=self.now,
                              authority=self.parts.approvers)

    def handle_change(self, change: Change, first_seen: float) -> Change | None:
        """Diagnose and record a detector batch. Raises `UnavailableError` when the store refuses
        its writes: the detector retries the batch (recording again is safe: findings dedupe).

        A finding some of whose pods await their zone-mirroring labels (`awaiting_labels`: bound,
        not started, without the node's zone on a key the job's policies read) is not recorded:
        its verdict is not the one the policies will give once the labels are written. The cache
        is told to treat those pods' label and phase updates as completing the gang again
        (diagnosed at once, no debounce), so the job is recorded on the first verdict that no
        label still to come can change. A batch with free capacity (`Change.capacity`: a node
        added or uncordoned, GPUs freed) also diagnoses the jobs waiting for room."""
        with self._lock:
            loads = self.mirror.frozen_loads
            if not self.parts.is_leader():
                self.mirror.state()  # a follower keeps its parsed mirror warm; the leader records
                self.follower_batches += 1
                self._remember_followed(change)
                _freeze_long_lived(change, collect=self.mirror.frozen_loads == loads)
                return None
            change = self._with_waiting_for_room(change)
            with self._store_work(StoreWork.DETECTOR):
                self.actions.retry_unfired()
                done: set[JobRef] = set()
                if change.everything:
                    self._open_now = self._open_by_job()
                try:
                    if change.everything:  # what changed last while following: recorded first
                        done = self._record_followed(first_seen)
                    findings = self.diagnose(None if change.everything else job_scope(change))
                    scoped = [f for f in findings
                              if in_scope(f.job, change) and f.job not in done]
                    present = {f.job for f in findings}
                    if self._open_now is not None:
                        scoped.sort(key=self._recording_order)
                    self._record_settled(scoped, first_seen=first_seen)
                finally:
                    self._open_now = None
                for key in sorted(change.jobs - present):
                    self.close_job(key, reason="the job has no live pods")
                    self._unsettled_since.pop(key, None)
                    self._settle_overdue.discard(key)
                if change.everything and self.parts.cache.synced:
                    self._reconcile(present)
            self._refresh_gauge_quietly()
            _freeze_long_lived(change, collect=self.mirror.frozen_loads == loads)
            if self._unsettled_since:  # looked at again until settled or past the bound
                return Change(jobs=frozenset(self._unsettled_since), reasons=("zone labels unsettled",))
        return None

    def _record_settled(self, findings: Iterable[Finding], *, first_seen: float | None) -> int:
        """Record the findings no zone-mirroring label still to come can change; the others
        wait for their pods' label or phase updates (`ClusterCache.await_labels`). How many new
        incidents were opened."""
        unsettled: set[JobRef] = set()
        settled: list[JobRef] = []
        opened = 0
        ready: list[Finding] = []
        for finding in findings:
            key = finding.job
            to_record = finding
            if finding.awaiting_labels:
                to_record = self._past_settle_bound(finding)
                if to_record.awaiting_labels:
                    unsettled.add(key)
                    continue
            else:
                self._settle_overdue.discard(key)
            self._unsettled_since.pop(key, None)
            settled.append(key)
            ready.append(to_record)
        outcomes = self._record_all(ready, first_seen=first_seen)
        opened += sum(1 for o in outcomes if o is not None and o.new)
        cache = self.parts.cache
        cache.labels_settled(settled)
        if not unsettled:
            return opened
        cache.await_labels(unsettled)
        # labels written while this batch was diagnosed came before the cache watched for them:
        # look once more, now that it does
        again = Change(jobs=frozenset(unsettled), reasons=("zone labels",))
        for finding in self.diagnose(job_scope(again)):
            key = finding.job
            if key in unsettled and not finding.awaiting_labels:
                self._unsettled_since.pop(key, None)
                outcome = self.record(finding, first_seen=first_seen)
                opened += 1 if (outcome is not None and outcome.new) else 0
                cache.labels_settled([key])
        return opened

    def _past_settle_bound(self, finding: Finding) -> Finding:
        """The finding as it is while its labels may still come; once they have been awaited
        `detection.label_settle_timeout`, the finding to record anyway: the verdict at hand, with
        a reason naming the pods whose labels were still unsettled."""
        if finding.job not in self._settle_overdue:
            now = self.monotonic()
            if finding.job not in self._unsettled_since:
                log.info("finding held until the zone-mirroring labels settle",
                         extra={"job": str(finding.job), "verdict": str(finding.verdict),
                                "pods": list(finding.awaiting_labels[:5])})  # fmt: skip
            since = self._unsettled_since.setdefault(finding.job, now)
            if now - since < self.label_settle_timeout:
                return finding
            self._settle_overdue.add(finding.job)
        pods = ", ".join(finding.awaiting_labels)
        note = (f"the zone-mirroring labels were still unsettled after "
                f"{self.label_settle_timeout:g}s (pods {pods}): recorded with the verdict at hand, "
                f"which may change once they are written")  # fmt: skip
        return replace(finding, awaiting_labels=(), reasons=(*finding.reasons, note))

    def handle_alert(self, alert: Alert, jobs: list[JobRef]) -> None:
        """Record an alert for its jobs (or resolve their alert incidents). The store calls are
        bounded by `http.database_timeout` (a webhook request waits on them); `UnavailableError`
        when the store refuses, so the webhook answers 503 and Alertmanager re-sends."""
        with deadline(self.settings.http.database_timeout):
            with self._store_work(StoreWork.ALERT, key=alert.dedupe_key):
                self.actions.retry_unfired()
                self._record_alert(alert, jobs)
            self._refresh_gauge_quietly()

    def _record_alert(self, alert: Alert, jobs: list[JobRef]) -> None:
        now = self.now()
        for key in jobs:
            if alert.status is AlertStatus.RESOLVED:
                self.resolve(key, {VerdictClass.ALERT}, reason=f"alert {alert.name} resolved")
                continue
            diagnosis = {
                "job": {"kind": key.kind.value, "namespace": key.namespace, "name": key.name},
                "verdict": Verdict.ALERT.value,
                "alert": {
                    "name": alert.name,
                    "labels": dict(alert.labels),
                    "annotations": dict(alert.annotations),
                    "starts_at": alert.starts_at,
                    "fingerprint": alert.fingerprint,
                },
                "metrics": self._evidence(key),
            }
            outcome = self._record_document(diagnosis, detected_at=now, key=key)
            if outcome is not None and outcome.new:
                self.actions.fire(
                    Event(TriggerKind.ALERT, self.actions.subject(key, "alert"), alert.labels),
                    outcome.incident,
                    diagnosis,
                )

    def refresh_metrics(self) -> None:
        """Fetch utilization for all jobs (two queries); drops open incidents; evidence is added
        to open topology incidents that had none."""
        with self._store_work(StoreWork.METRICS):
            self._refresh_metrics()

    def _refresh_metrics(self) -> None:
        source = self.parts.prometheus
        if source is None:
            return
        report = source.fetch(self.now())
        self._refresh_egress()
        with self._lock:
            self.report = report
            if not report.available:
                return
            for key, metrics in sorted(report.jobs.items()):
                self._drop(key, metrics, report)
            window = self.settings.prometheus.drop_duration
            for key in sorted(set(report.jobs) - self._evidence_recorded):
                if steady_reading(report.jobs[key], now=report.at.timestamp(), window=window):
                    self._attach_evidence(key)

    def sweep(self, playbook: Playbook | None) -> dict[str, Any]:
        """Diagnose every job from the cache, refresh metrics, reconcile, purge, digest."""
        with self._store_work(StoreWork.SWEEP):
            return self._sweep(playbook)

    def _sweep(self, playbook: Playbook | None) -> dict[str, Any]:
        started = self.now()
        self._refresh_metrics()
        with self._lock:
            self.actions.retry_unfired()
            findings = self.diagnose()
            present = {f.job for f in findings}
            self._open_now = self._open_by_job()  # one read, then problems in batches
            try:
                ordered = list(findings)
                if self._open_now is not None:
                    ordered.sort(key=self._recording_order)
                opened = self._record_settled(ordered, first_seen=None)
            finally:
                self._open_now = None
            closed = self._reconcile(present)
            purged = 0
            if self.store is not None:
                result = self.store.purge(before=started - self.settings.database.retention)
                purged = int(getattr(result, "incidents", 0) or 0)
            summary: dict[str, Any] = {
                "cluster": self.cluster,
                "at": started.isoformat(),
                "jobs": len(findings),
                "by_verdict": _count(str(f.verdict) for f in findings),
                "incidents_opened": opened,
                "incidents_closed": closed,
                "purged": purged,
                "metrics": self.report.status if self.report is not None else "not configured",
                "findings": [f.to_dict() for f in findings],
            }
            if playbook is not None:
                self.post_digest(playbook, summary)
            self.refresh_gauge()
            log.info(
                "sweep done",
                extra={k: v for k, v in summary.items() if k != "findings"},
            )
            return summary

    @contextmanager
    def _store_work(self, work: StoreWork, *, key: Hashable = None) -> Iterator[None]:
        """Count work whose store writes failed (`UnavailableError`) and work run again after
        such a failure (the same kind of work, or the same alert: `key`)."""
        marker = (work, key)
        if marker in self._failed_work:
            self.parts.metrics.store_write_retries.labels(work=work.value).inc()
        try:
            yield
        except UnavailableError:
            self.parts.metrics.store_write_failures.labels(work=work.value).inc()
            if len(self._failed_work) >= _MAX_FAILED_WORK:
                self._failed_work.clear()  # only the retry count would suffer
            self._failed_work.add(marker)
            raise
        self._failed_work.discard(marker)

    def _refresh_gauge_quietly(self) -> None:
        """The gauge after recorded work: a failed read here must not fail (and so repeat) the
        work that was recorded; the next refresh catches up."""
        try:
            self.refresh_gauge()
        except UnavailableError as exc:
            log.warning("incident gauge not refreshed: %s", exc)

    def refresh_gauge(self) -> None:
        """`zonemedic_incidents{verdict,status}`: the open incidents of this cluster."""
        if self.store is None:
            return
        counts = self.store.open_counts(cluster=self.cluster)
        gauge = self.parts.metrics.incidents
        gauge.clear()
        for (verdict, status), count in counts.items():
            gauge.labels(verdict=verdict, status=status).set(count)

    # -- diagnosis -----------------------------------------------------------------------------

    def diagnose(self, scope: JobScope | None = None) -> tuple[Finding, ...]:
        """Findings of every job, or of the jobs `scope` covers (each as in a full diagnosis)."""
        state, policies, facts = self.mirror.snapshot()
        result = diagnose_cluster(
            state, policies, settings=self.settings.diagnosis, only=scope, facts=facts
        )
        self.mirror_keys, self._state, self._facts = result.mirror_keys, state, facts
        self._jobs_in = {}
        self.diagnoses += 1
        self.diagnosed_last = len(result.findings)
        return result.findings

    def _evidence(self, key: JobRef) -> dict[str, Any]:
        if self.parts.prometheus is None:
            return {"status": "metrics not configured (prometheus.url is null)"}
        return metrics_evidence(self.report, key)

    # -- recording -----------------------------------------------------------------------------

    def _with_waiting_for_room(self, change: Change) -> Change:
        """A change that may have freed capacity also covers the jobs waiting for room."""
        if not change.capacity or not self._waiting_room or change.everything:
            return change
        waiting = frozenset(self._waiting_room)
        return Change(jobs=change.jobs | waiting, namespaces=change.namespaces,
                      reasons=(*change.reasons, f"{len(waiting)} job(s) waiting for room"),
                      gang_complete=change.gang_complete, capacity=True)  # fmt: skip

    def _wait_for_room(self, key: JobRef, finding: Finding | None) -> None:
        """Remember (or forget) the job as waiting for room: a split some zone would fix, none
        of which has room now (re-diagnosed when capacity changes, not at the next resync)."""
        if finding is not None and finding.awaits_room:
            if key not in self._waiting_room and len(self._waiting_room) >= MAX_WAITING_ROOM:
                del self._waiting_room[next(iter(self._waiting_room))]
            self._waiting_room[key] = None
        else:
            self._waiting_room.pop(key, None)

    def record(self, finding: Finding, *, first_seen: float | None) -> Any:
        key = finding.job
        pending = self._prepare(finding, key)
        if pending is None or self.store is None:  # without a store nothing is prepared
            return None
        outcome = self.store.record_finding(pending.record)
        self._log_recorded(key, pending.document, outcome)
        self._recorded(pending, outcome, first_seen=first_seen, written=None)
        return outcome

    def _prepare(self, finding: Finding, key: JobRef) -> _Pending | None:
        """Count the finding and deal with what needs no incident (pending, healthy: resolved);
        else the finding's document and store record, to be recorded."""
        self.parts.metrics.findings.labels(verdict=str(finding.verdict)).inc()
        if finding.verdict is Verdict.PENDING:
            return None
        self._wait_for_room(key, finding)
        if finding.verdict not in SPLIT_VERDICTS:
            self._forget_egress(key)
        if finding.verdict is Verdict.HEALTHY:
            self.resolve(key, set(TOPOLOGY_CLASSES), reason="re-diagnosis found the job healthy")
            return None
        if self.store is None:
            return None
        document = finding.to_dict()
        document["job"]["uid"] = self.parts.cache.job_uid(key)
        document["metrics"] = self._evidence(key)
        if finding.verdict in SPLIT_VERDICTS:
            document["waste"] = self._waste(finding, document["metrics"])
        gpus = sum(finding.gpus.values()) if finding.gpus else None
        record = self._finding_record(document, detected_at=self.now(), gpus=gpus,
                                      samples=self._samples(key))  # fmt: skip
        return _Pending(finding, key, document, gpus, record)

    def _record_all(self, findings: list[Finding], *, first_seen: float | None) -> list[Any]:
        """Record findings in order; the outcomes (None where no incident was touched). In a
        cluster-wide batch or a sweep (`_open_now`: its problems come first) the problems are
        recorded `RECORD_BATCH` at a time, each new incident with its playbooks' follow-up
        (plan preview, approval request, messages) in the store transaction that opens it
        (`IncidentStore.record_findings`); the rest one at a time."""
        if self._open_now is None or self.store is None:
            return [self.record(f, first_seen=first_seen) for f in findings]
        out: list[Any] = []
        chunk: list[_Pending] = []
        for finding in findings:
            key = finding.job
            order = self._recording_order(finding)
            if order == 2:  # healthy or pending: no incident to write
                self._flush_chunk(chunk, out, first_seen=first_seen)
                out.append(self.record(finding, first_seen=first_seen))
                continue
            pending = self._prepare(finding, key)
            if pending is None:
                out.append(None)
                continue
            if self.previews is not None and order == 0:
                pending.preview = self._preview(finding)  # written with its new incident
                pending.previewed = True
            chunk.append(pending)
            if len(chunk) >= RECORD_BATCH:
                self._flush_chunk(chunk, out, first_seen=first_seen)
        self._flush_chunk(chunk, out, first_seen=first_seen)
        return out

    def _flush_chunk(self, chunk: list[_Pending], out: list[Any], *,
                     first_seen: float | None) -> None:  # fmt: skip
        if not chunk:
            return
        assert self.store is not None
        written: dict[int, FollowUp | None] = {}

        def follow(i: int, outcome: FindingOutcome) -> FollowUp | None:
            up = self._follow_up(chunk[i], outcome)
            written[i] = up
            return up

        outcomes = self.store.record_findings([p.record for p in chunk], follow=follow)
        for i, (pending, outcome) in enumerate(zip(chunk, outcomes, strict=True)):
            self._log_recorded(pending.key, pending.document, outcome)
            self._recorded(pending, outcome, first_seen=first_seen,
                           written=written.get(i) if outcome.new else None)  # fmt: skip
            out.append(outcome)
        chunk.clear()

    def _follow_up(self, pending: _Pending, outcome: FindingOutcome) -> FollowUp | None:
        """What to write with the incident `pending` opened (no I/O: the store calls this inside
        its transaction); None when its firing is left to `_recorded` (an automatic approval,
        or a preview not computed yet)."""
        finding = pending.finding
        if not pending.previewed and self.previews is not None and wanted(finding):
            return None  # not expected to be new: the preview is computed afterwards
        verdict = str(outcome.incident.verdict)
        trigger = trigger_for_verdict(verdict)
        if trigger is None:
            if pending.preview is None or self.previews is None:
                return None
            return FollowUp(now=self.now(), action=self.previews.draft(pending.preview))
        event = Event(trigger, self.actions.subject(pending.key, verdict, pending.gpus))
        return self.actions.follow_up(event, outcome.incident, pending.document,
                                      preview=pending.preview)  # fmt: skip

    def _recorded(self, pending: _Pending, outcome: FindingOutcome, *, first_seen: float | None,
                  written: FollowUp | None) -> None:  # fmt: skip
        """What follows a recorded finding: egress gauges, waiting drop messages, the plan
        preview, the detection latency, and the playbooks fired for a new incident (unless its
        follow-up, `written`, was recorded with it) or for one that took another class's
        verdict."""
        finding, key, document = pending.finding, pending.key, pending.document
        if "waste" in document:
            self._show_egress(key, document["waste"], incident=outcome.incident.id,
                              new=outcome.new)  # fmt: skip
        if key in self._pending_drops:
            self._flush_drops([key])
        # the incident took another class's verdict (a split became a policy block, a drop
        # became a split): the playbooks of its new verdict fire on it, its one message updated
        reclassed = not outcome.new and _class_changed(outcome.previous_verdict,
                                                       outcome.incident.verdict)
        preview: Preview | None = None
        if written is not None:
            self.actions.followed(outcome.incident, written)
            if written.action is not None and pending.preview is not None and self.previews:
                self.previews.recorded(outcome.incident.id, pending.preview)
        elif self.previews is not None:
            if outcome.new:
                preview = pending.preview if pending.previewed else self._preview(finding)
            elif self.previews.stale(outcome.incident, finding):
                preview = self._replan(finding)
        if outcome.new and first_seen is not None:
            self.parts.metrics.detection_latency.observe(self.monotonic() - first_seen)
        if document["metrics"].get("status") == "ok":
            self._evidence_recorded.add(key)
        if written is not None:
            return
        trigger = trigger_for_verdict(str(outcome.incident.verdict))
        if (outcome.new or reclassed) and trigger is not None:
            self.actions.fire(
                Event(trigger, self.actions.subject(key, str(outcome.incident.verdict),
                                                    pending.gpus)),
                outcome.incident,
                document,
                preview=preview,
            )
        elif preview is not None and self.previews is not None:
            self.previews.record(outcome.incident.id, preview)

    def _waste(self, finding: Finding, metrics: dict[str, Any]) -> dict[str, Any]:
        now, baseline = metrics.get("utilization_now"), metrics.get("utilization_baseline")
        settings = self.settings.diagnosis
        measured, unmeasured = self._measured(finding.job)
        return estimate_waste(
            verdict=finding.verdict, impact=finding.impact,
            utilization_now=float(now) if isinstance(now, int | float) else None,
            utilization_baseline=float(baseline) if isinstance(baseline, int | float) else None,
            steps_per_day=settings.steps_per_day, price_per_gb=settings.price_per_gb,
            measured=measured, unmeasured=unmeasured,
        ).to_dict()  # fmt: skip

    # -- Cilium's PacketDrop events -------------------------------------------------------------

    def handle_packet_drops(self, drops: list[PacketDrop]) -> Change:
        """Cilium's drop messages: each goes, once, into the timeline (an `evidence` event of
        actor `cilium`) of the open topology incidents of the job whose pod it names (kept until
        one is open, when the job has none yet; only the leader writes, a follower keeps them for
        when it leads); returns the jobs to re-diagnose (a pod of no job: its namespace, where
        generic groups live). A database refusing the writes keeps the messages for later."""
        jobs: set[JobRef] = set()
        namespaces: set[str] = set()
        reasons: list[str] = []
        counter = self.parts.metrics.packet_drops
        with self._lock:
            for drop in drops:
                key = self._job_of_pod(drop.namespace, drop.pod)
                if len(reasons) < 5:
                    reasons.append(f"PacketDrop on {drop.where}")
                if key is None:
                    namespaces.add(drop.namespace)
                    counter.labels(outcome="namespace").inc()
                    continue
                jobs.add(key)
                counter.labels(outcome="job").inc()
                if (key, drop.where, drop.message) not in self._written_drops:
                    self._keep_drop(key, drop)
            if self.parts.is_leader() and self.store is not None:
                try:
                    self._flush_drops(sorted(jobs & set(self._pending_drops)))
                except UnavailableError as exc:
                    log.warning("drop messages kept for later: %s", exc)
        return Change(jobs=frozenset(jobs), namespaces=frozenset(namespaces),
                      reasons=tuple(reasons))  # fmt: skip

    def _job_of_pod(self, namespace: str, pod: str) -> JobRef | None:
        """The job of a pod: the cache's Kubeflow job, else the generic group of the last
        diagnosis that holds it."""
        found = self.parts.cache.job_of_pod(namespace, pod)
        if found is not None:
            return found
        for ref, job in self._jobs_of(namespace).items():
            if ref.kind is JobKind.GROUP and any(p.name == pod for p in job.pods):
                return ref
        return None

    def _keep_drop(self, key: JobRef, drop: PacketDrop) -> None:
        pending = self._pending_drops.get(key)
        if pending is None:
            if len(self._pending_drops) >= MAX_PENDING_DROP_JOBS:
                del self._pending_drops[next(iter(self._pending_drops))]  # the oldest job's
            pending = self._pending_drops[key] = {}
        if len(pending) >= MAX_PENDING_DROPS:
            del pending[next(iter(pending))]
        pending[(drop.where, drop.message)] = drop

    def _flush_drops(self, keys: Iterable[JobRef]) -> None:
        """Write the kept drop messages of these jobs into their open topology incidents."""
        if self.store is None or not self.parts.is_leader():
            return
        for key in keys:
            incidents = [i for i in self._open_incidents(key) if _topology(i.verdict)]
            if not incidents:
                continue  # kept until the re-diagnosis opens one
            for (where, message), drop in list(self._pending_drops.get(key, {}).items()):
                detail = {"packet_drop": message, "pod": where, "count": drop.count,
                          "event": drop.event, "at": drop.at}  # fmt: skip
                for incident in incidents:
                    self.store.add_event_once(incident.id, EventKind.EVIDENCE, now=self.now(),
                                              actor=DROP_ACTOR, detail=detail,
                                              same=("packet_drop", "pod"))  # fmt: skip
                del self._pending_drops[key][(where, message)]
                if len(self._written_drops) >= MAX_WRITTEN_DROPS:
                    self._written_drops.clear()
                self._written_drops[(key, where, message)] = None
            if not self._pending_drops.get(key):
                self._pending_drops.pop(key, None)

    # -- egress ----------------------------------------------------------------------------------

    def _jobs_of(self, namespace: str) -> dict[JobRef, Job]:
        """The jobs of a namespace in the last diagnosis (found once per diagnosis)."""
        if self._state is None:
            return {}
        found = self._jobs_in.get(namespace)
        if found is None:
            pods_in = self._facts.pods_in if self._facts is not None else None
            found = {j.ref: j for j in find_jobs(self._state, self.settings.diagnosis.groups,
                                                 namespaces={namespace}, pods_in=pods_in)}
            self._jobs_in[namespace] = found
        return found

    def _job(self, ref: JobRef) -> Job | None:
        return self._jobs_of(ref.namespace).get(ref)

    def _measured(self, ref: JobRef) -> tuple[MeasuredEgress | None, str | None]:
        """The job's measured cross-zone bytes, or why there is no measurement."""
        if self.parts.prometheus is None:
            return None, "metrics not configured (prometheus.url is null)"
        if self.parts.egress is None:
            return None, "egress.source is none"
        if self.egress is None:
            return None, "not measured yet (the first egress query is pending)"
        report = self.egress.report
        if not report.available:
            return None, report.error or UNAVAILABLE
        if not report.measured:
            if self.parts.egress.settings.query is not None:
                return None, "egress.query answered no series"
            return None, ("no cross-zone byte counter in Prometheus (Beyla's or OBI's "
                          "*_network_inter_zone_bytes_total, or *_network_flow_bytes_total "
                          "with src_zone)")  # fmt: skip
        job = self._job(ref)
        if job is None:
            return None, "the job's pods are not known"
        found = self.egress.job(job_ends(ref.namespace, job.pods))
        if found is None:
            by = ", ".join(sorted(e.label for e in report.exporters))
            return None, f"no cross-zone flow between the job's pods measured (by {by})"
        return found, None

    def _refresh_egress(self) -> None:
        """The egress meter's one query for all jobs; the split jobs it starts (or stops)
        measuring are diagnosed and recorded again at once, so their findings say so. A measured
        figure that moves is recorded with the job's next diagnosis (`detection.resync` at the
        latest): a rate over a window longer than the job's traffic grows until the window is
        full, and each refresh must not re-record it."""
        meter = self.parts.egress
        if meter is None:
            return
        report = meter.fetch(self.now())
        if report is None:
            return
        with self._lock:
            self.egress = EgressIndex(report)
            moved = {key for key, shown in sorted(self._egress_shown.items())
                     if self._measured_now(key) != (shown[0] is EgressBasis.MEASURED)}  # fmt: skip
            refs = frozenset(moved)
            if not refs:
                return
            found = [f for f in self.diagnose(JobScope(jobs=refs)) if f.job in moved]
            self._record_settled(found, first_seen=None)

    def _measured_now(self, key: JobRef) -> bool:
        return self._measured(key)[0] is not None

    def _show_egress(self, key: JobRef, waste: dict[str, Any], *, incident: int, new: bool) -> None:
        """Set the job's gauges, and add a timeline event when the figure moved from the one last
        shown (a change of basis, or beyond `EGRESS_MOVE_SHARE`): a `redetected` event of the
        agent's own (never folded into the detector's), after which its chat message is
        re-rendered; that figure is then the one shown."""
        source = EgressBasis(str(waste.get("egress_source") or EgressBasis.UNKNOWN.value))
        usd = waste.get("egress_usd_per_day")
        usd = float(usd) if isinstance(usd, int | float) else None
        before = self._egress_shown.get(key)
        moved = before is not None and not new and egress_moved(before, (source, usd))
        self._egress_gauges(key, source, usd, waste.get("cross_zone_gb_per_day"), before)
        if before is None or new or moved:  # else small moves add up against the last shown
            self._egress_shown[key] = (source, usd)
        if moved:
            assert self.store is not None
            self.store.add_event(incident, EventKind.REDETECTED, now=self.now(), actor=ACTOR,
                                 detail={"egress": {
                                     "source": source.value, "usd_per_day": usd,
                                     "gb_per_day": waste.get("cross_zone_gb_per_day"),
                                     "basis": waste.get("egress_basis"),
                                 }})  # fmt: skip

    def _egress_gauges(
        self, key: JobRef, source: EgressBasis, usd: float | None, gb: Any,
        before: tuple[EgressBasis, float | None] | None,
    ) -> None:  # fmt: skip
        labels = {"namespace": key.namespace, "kind": key.kind, "job": key.name}
        metrics = self.parts.metrics
        if before is not None and (before[0] is not source or usd is None or
                                   source is EgressBasis.UNKNOWN):
            for gauge in (metrics.job_cross_zone_bytes, metrics.job_egress_cost):
                gauge.remove(key.namespace, key.kind, key.name, before[0].value)
        if usd is None or source is EgressBasis.UNKNOWN:
            return
        metrics.job_egress_cost.labels(**labels, source=source.value).set(usd)
        per_second = float(gb) * 1e9 / 86_400 if isinstance(gb, int | float) else 0.0
        metrics.job_cross_zone_bytes.labels(**labels, source=source.value).set(per_second)

    def _forget_egress(self, key: JobRef) -> None:
        before = self._egress_shown.pop(key, None)
        if before is not None:
            for gauge in (self.parts.metrics.job_cross_zone_bytes,
                          self.parts.metrics.job_egress_cost):  # fmt: skip
                gauge.remove(key.namespace, key.kind, key.name, before[0].value)

    def _preview(self, finding: Finding) -> Preview | None:
        """The plan preview of a finding (None when there is nothing to preview)."""
        assert self.previews is not None
        pods: tuple[str, ...] = ()
        if finding.job.kind is JobKind.GROUP and self._state is not None:
            ref = finding.job
            job = next((j for j in find_jobs(self._state, self.settings.diagnosis.groups,
                                             namespaces={ref.namespace}) if j.ref == ref), None)
            pods = tuple(p.name for p in job.pods) if job is not None else ()
        return self.previews.compute(finding, mirror_keys=self.mirror_keys, pod_names=pods)

    def _replan(self, finding: Finding) -> Preview | None:
        """A new preview for an undecided incident whose verdict or placement changed: the fix
        for what is seen now, or, when there is none (no longer remediable), a refusal saying
        why, so the message never shows a plan for a verdict the incident no longer has."""
        assert self.previews is not None
        if wanted(finding):
            return self._preview(finding)
        return self.previews.refusal(finding)

    def _samples(self, key: JobRef) -> tuple[tuple[float, float], ...]:
        """The job's utilization samples in the last metrics report (the store reads the
        incident's "utilization before" from those taken while it is open)."""
        if self.report is None or not self.report.available:
            return ()
        found = self.report.for_job(key)
        return found.samples if found is not None else ()

    def _finding_record(
        self, document: dict[str, Any], *, detected_at: datetime, gpus: int | None = None,
        samples: tuple[tuple[float, float], ...] = (),
    ) -> FindingRecord:  # fmt: skip
        metrics = document.get("metrics") or {}
        egress = (document.get("waste") or {}).get("egress_usd_per_day")
        return FindingRecord.from_finding(
            document,
            cluster=self.cluster,
            detected_at=detected_at,
            utilization_now=metrics.get("utilization_now"),
            utilization_baseline=metrics.get("utilization_baseline"),
            estimated_cost=float(egress) if isinstance(egress, int | float) else None,
            gpus=gpus,
            utilization_samples=samples,
        )

    def _record_document(
        self,
        document: dict[str, Any],
        *,
        detected_at: datetime,
        key: JobRef,
        gpus: int | None = None,
        samples: tuple[tuple[float, float], ...] = (),
    ) -> Any:
        if self.store is None:
            return None
        outcome = self.store.record_finding(self._finding_record(
            document, detected_at=detected_at, gpus=gpus, samples=samples))  # fmt: skip
        self._log_recorded(key, document, outcome)
        return outcome

    def _log_recorded(self, key: JobRef, document: dict[str, Any], outcome: FindingOutcome) -> None:
        log.info(
            "finding recorded",
            extra={
                "job": str(key),
                "verdict": document.get("verdict"),
                "incident": outcome.incident.id,
                "new": outcome.new,
            },
        )

    def _remember_followed(self, change: Change) -> None:
        """A follower's batch: keep its jobs and namespaces, the latest `_FOLLOWED` of each (a new
        leader records what changed last first: `_record_followed`). A cluster-wide change (the
        start-up's, with everything the sync reported) leaves nothing to put first."""
        if change.everything:
            self._followed_jobs.clear()
            self._followed_namespaces.clear()
            return
        _keep_latest(self._followed_jobs, change.jobs)
        _keep_latest(self._followed_namespaces, change.namespaces)

    def _record_followed(self, first_seen: float) -> set[JobRef]:
        """At a cluster-wide batch (a new term, or the start-up), record the jobs of the changes
        this replica saw last while it followed, before the diagnosis of every job (a split that
        appeared during the hand-over is recorded at once). The jobs recorded."""
        if not self._followed_jobs and not self._followed_namespaces:
            return set()
        recent = Change(jobs=frozenset(self._followed_jobs),
                        namespaces=frozenset(self._followed_namespaces))
        self._followed_jobs.clear()
        self._followed_namespaces.clear()
        found = [f for f in self.diagnose(job_scope(recent)) if in_scope(f.job, recent)]
        if self._open_now is not None:
            found.sort(key=self._recording_order)
        self._record_settled(found, first_seen=first_seen)
        return {f.job for f in found}

    def _open_by_job(self) -> dict[JobRef, list[IncidentSummary]] | None:
        """The cluster's open incidents by job, in one query; None when there are too many for
        one listing (the batch then asks per job)."""
        if self.store is None:
            return None
        limit = 10_000
        listing = self.store.list_incidents(
            IncidentQuery(cluster=self.cluster, open_only=True, limit=limit)
        )
        if len(listing.incidents) + len(listing.problems) >= limit:
            return None
        out: dict[JobRef, list[IncidentSummary]] = {}
        for incident in listing.incidents:
            ref = incident.job_ref
            if ref is not None:
                out.setdefault(ref, []).append(incident)
        return out

    def _recording_order(self, finding: Finding) -> int:
        """0: a problem of a job with no open incident (a new incident), 1: a re-detection,
        2: healthy or pending (a resolve at most)."""
        try:
            verdict_class(finding.verdict)
        except LifecycleError:  # healthy, pending
            return 2
        return 1 if (self._open_now or {}).get(finding.job) else 0

    def _open_incidents(self, key: JobRef) -> list[IncidentSummary]:
        """The job's open incidents: from the cluster-wide batch's one read while it records
        (writes by then are conditional on the status read, so a stale entry changes nothing),
        else one query."""
        if self.store is None:
            return []
        if self._open_now is not None:
            return list(self._open_now.get(key, ()))
        listing = self.store.list_incidents(
            IncidentQuery(
                cluster=self.cluster,
                namespace=key.namespace,
                name=key.name,
                open_only=True,
                limit=50,
            )
        )
        return [i for i in listing.incidents if i.kind == key.kind]

    def resolve(
        self,
        key: JobRef,
        classes: set[VerdictClass],
        *,
        reason: str,
        to: IncidentStatus = IncidentStatus.RESOLVED,
    ) -> int:
        """Close the job's open incidents of these classes that have not started remediation."""
        closed = 0
        for incident in self._open_incidents(key):
            try:
                if verdict_class(incident.verdict) not in classes:
                    continue
                check_transition(incident.status, to)
            except LifecycleError:
                continue
            if incident.status not in _RESOLVABLE:
                continue
            result = self.store.transition(  # type: ignore[union-attr]
                incident.id, incident.status, to, actor=ACTOR, now=self.now(),
                detail={"reason": reason},
            )
            closed += 1 if result.applied else 0
        return closed

    def close_job(self, key: JobRef, *, reason: str) -> int:
        """Supersede the open incidents of a job that is gone (no live pods). A Kubeflow job
        whose object is still there and not finished is not gone (suspended by hand or queued,
        resumed and its pods not created yet, restarting its gang): its incident stays open, and
        the job's next detection folds into it; it closes once the object is deleted or the job
        finished."""
        self._forget_egress(key)
        self._wait_for_room(key, None)
        if self.parts.cache.job_pending_pods(key):
            return 0
        return self.resolve(
            key,
            {*TOPOLOGY_CLASSES, VerdictClass.GPU_UTILIZATION_DROP},
            reason=reason,
            to=IncidentStatus.SUPERSEDED,
        )

    def _reconcile(self, present: set[JobRef]) -> int:
        """Open incidents of jobs no longer found: superseded (the job is gone or finished)."""
        if self.store is None:
            return 0
        listing = self.store.list_incidents(
            IncidentQuery(cluster=self.cluster, open_only=True, limit=10_000)
        )
        closed = 0
        gone = {
            ref for i in listing.incidents if (ref := i.job_ref) is not None and ref not in present
        }
        for key in sorted(gone):
            closed += self.close_job(key, reason="the job has no live pods")
        return closed

    # -- metrics -------------------------------------------------------------------------------

    def _drop(self, key: JobRef, metrics: JobMetrics, report: MetricsReport) -> None:
        if not metrics.drop.dropped:
            self.resolve(key, {VerdictClass.GPU_UTILIZATION_DROP}, reason="utilization recovered")
            return
        document = {
            "job": {"kind": key.kind.value, "namespace": key.namespace, "name": key.name, "uid": self.parts.cache.job_uid(key)},
            "verdict": Verdict.GPU_UTILIZATION_DROP.value,
            "metrics": metrics_evidence(report, key),
        }
        outcome = self._record_document(document, detected_at=report.at, key=key)
        if outcome is not None and outcome.new:
            self.actions.fire(
                Event(TriggerKind.GPU_UTILIZATION_DROP, self.actions.subject(key, "gpu_utilization_drop")),
                outcome.incident,
                document,
            )

    def _attach_evidence(self, key: JobRef) -> None:
        if self.store is None or self.report is None:
            return
        for incident in self._open_incidents(key):
            try:
                topology = verdict_class(incident.verdict) in TOPOLOGY_CLASSES
            except LifecycleError:
                continue
            if topology:
                evidence = metrics_evidence(self.report, key)
                detail: dict[str, Any] = {"metrics": evidence}
                waste = _gpu_hours_again(incident, evidence)
                if waste is not None:
                    detail["waste"] = waste
                self.store.add_event(
                    incident.id,
                    EventKind.REDETECTED,
                    now=self.now(),
                    actor=ACTOR,
                    detail=detail,
                )
                self._evidence_recorded.add(key)

    # -- playbooks -----------------------------------------------------------------------------

    def post_digest(self, playbook: Playbook, summary: dict[str, Any]) -> int:
        """Queue the playbook's digest actions (see `PlaybookActions.post_digest`); how many."""
        return self.actions.post_digest(playbook, summary)


def _class_changed(before: Verdict | None, after: Verdict) -> bool:
    """Whether an incident's verdict moved to another verdict class."""
    if before is None or before is after:
        return False
    try:
        return verdict_class(before) is not verdict_class(after)
    except LifecycleError:
        return False


def _topology(verdict: Verdict) -> bool:
    try:
        return verdict_class(verdict) in TOPOLOGY_CLASSES
    except LifecycleError:
        return False


def egress_moved(
    before: tuple[EgressBasis, float | None], after: tuple[EgressBasis, float | None]
) -> bool:
    """A split job's egress figure changed enough to record again: another basis, a figure
    appearing or vanishing, or a move beyond `EGRESS_MOVE_SHARE` of it (and `EGRESS_MOVE_USD`)."""
    if before[0] is not after[0] or (before[1] is None) != (after[1] is None):
        return True
    if before[1] is None or after[1] is None:
        return False
    return abs(after[1] - before[1]) > max(EGRESS_MOVE_USD, EGRESS_MOVE_SHARE * abs(before[1]))


READING_SAMPLES = 3  # the latest samples that must agree before a reading becomes evidence
READING_SPREAD = 5.0  # percentage points between them


def steady_reading(metrics: JobMetrics, *, now: float, window: timedelta) -> bool:
    """Whether a job's utilization is a reading worth recording as evidence: its latest
    `READING_SAMPLES` samples agree within `READING_SPREAD` points (a split found as its pods are
    bound reads 0% while they start), or its samples cover the whole `window` (utilization that
    never settles is recorded once it has been watched that long). A job with a baseline and no
    samples is recorded at once (there is nothing to wait for)."""
    samples = metrics.samples
    if not samples:
        return True
    recent = [v for _, v in samples[-READING_SAMPLES:]]
    if len(recent) == READING_SAMPLES and max(recent) - min(recent) <= READING_SPREAD:
        return True
    return samples[0][0] <= now - window.total_seconds() * 0.9


def _gpu_hours_again(incident: IncidentSummary, evidence: dict[str, Any]) -> dict[str, Any] | None:
    """The split's idle GPU-hours per day from utilization evidence (None without a figure now):
    the part of the finding's `waste` that evidence changes."""
    now, baseline = evidence.get("utilization_now"), evidence.get("utilization_baseline")
    if incident.verdict not in SPLIT_VERDICTS or not isinstance(now, int | float):
        return None
    hours, basis = idle_gpu_hours_per_day(
        verdict=incident.verdict, gpus=incident.gpus or 0, utilization_now=float(now),
        utilization_baseline=float(baseline) if isinstance(baseline, int | float) else None,
    )  # fmt: skip
    return {"gpu_hours_per_day": hours, "gpu_hours_basis": basis}


def _count(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))


def _keep_latest(kept: dict[Any, None], keys: Iterable[Any]) -> None:
    """Add `keys` to `kept` as its most recent, keeping the latest `_FOLLOWED`."""
    for key in keys:
        kept.pop(key, None)
        kept[key] = None
    while len(kept) > _FOLLOWED:
        del kept[next(iter(kept))]


def _freeze_long_lived(change: Change, *, collect: bool = True) -> None:
    """After a cluster-wide batch, move the cache and its parsed mirror out of the cyclic GC's reach.

    At 150,000 pods they are millions of long-lived objects that every full collection would
    rescan (~1.8 s each, seen as detection-latency spikes). Frozen objects are still freed by
    reference counting when the cache replaces them; only cycle detection skips them. It runs
    after the batch has recorded its findings; cluster-wide batches are rare (start-up, leadership,
    node or cluster-wide policy changes), so their one full collection is paid rarely. Without
    `collect` (the batch's mirror bulk load froze the heap moments ago: the start-up batch) what
    the batch built is frozen as it is, and the next cluster-wide batch collects.
    """
    if change.everything:
        if collect:
            gc.unfreeze()  # what became cyclic garbage since the last freeze is collected once more
            gc.collect()
        gc.freeze()
