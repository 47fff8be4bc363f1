"""The pipeline: detect, diagnose, record. The glue from detection to the core and the store.

Built by the composition root (`agent.runtime.root.build_pipeline`), which builds its pieces once
and hands them in as `PipelinePieces`, with the few shared parts it reads (keyword-only, typed); called by the running agent (`agent.runtime.app.Agent`): `handle_change` for the
detector's debounced batches, `handle_alert` for Alertmanager alerts, `handle_packet_drops` for
Cilium's PacketDrop Events, `sweep` for scheduled and one-shot sweeps, `refresh_metrics` for the
periodic utilization refresh (leader only). It pipes; each noun has a module of its own:

- the diagnosis of the watch cache and what the last one saw: `agent.runtime.diagnoser`;
- which jobs a batch looks at again (the changes a follower saw, the splits waiting for room):
  `agent.runtime.revisit`;
- the label-settle wait (`detection.label_settle_timeout`): `agent.runtime.settle`;
- recording findings, one at a time or a cluster-wide batch's problems `RECORD_BATCH` at a time,
  with the plan preview and the playbooks' follow-up: `agent.runtime.recording`;
- a job's open incidents, read once per cluster-wide batch, and their closing:
  `agent.runtime.open_incidents`;
- utilization evidence: `agent.runtime.evidence`; a split's waste and its egress gauges:
  `agent.runtime.waste`; utilization drops and alerts as incidents: `agent.runtime.signals`;
- Cilium's drop messages in the timelines: `agent.runtime.drops`;
- the store-write failure and retry counts, the open-incidents gauge: `agent.runtime.store_work`.

- A detector batch diagnoses only the jobs it affects (its jobs, and every job of its
  namespaces: a scoped diagnosis); a cluster-wide change (node, cluster-wide policy, namespace
  labels, start-up, leadership acquired) diagnoses everything and then reconciles like a sweep
  (open incidents of jobs no longer found are superseded), once the caches are synced. A
  cluster-wide batch (and a sweep) reads the cluster's open incidents once and records the
  problems that open a new incident first, then re-detections, then the healthy jobs.
- Only the leader records detector batches (with leader election off every replica is the
  leader), so a re-detection lands once in a timeline; a follower keeps its parsed mirror warm,
  remembers what changed (its first cluster-wide batch as the leader records those jobs first)
  and diagnoses its scoped batches to keep the splits it saw (`agent.runtime.unrecorded`). The
  composition root submits a cluster-wide change when this replica acquires the lease, so a new
  leader catches up on what it did not record as a follower; after that catch-up, the splits it
  saw whose jobs were deleted or healed meanwhile and that the leader never recorded (no replica
  recorded for a while) are recorded, closed at once as superseded with the reason.
- A job that is gone (no live pods, and no Kubeflow object still there unfinished: a suspended or
  restarting job keeps its incident) supersedes its incidents.
- The database refusing writes: the work raises `UnavailableError` instead of dropping anything.
  The detector retries the batch (recording again is safe: findings dedupe by fingerprint; a
  batch that failed half-way re-detects what it had recorded); the webhook answers 503, its
  store calls bounded by `http.database_timeout`, and Alertmanager re-sends; firings not queued
  are queued before the next work. Readiness (`agent.runtime.incidents.database_readiness`)
  probes that a write transaction can start, not only that the database answers a read.

One diagnosis at a time (a lock shared by the detector and sweeps). What it does not do: build
its pieces (the root does), decide approvals or touch the cluster (remediation does), or serve
HTTP reads (the root builds the incidents API over the same store: `agent.runtime.incidents`).
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent.diagnosis.diagnose import JobScope
from agent.model.cluster import ClusterState
from agent.model.finding import Finding
from agent.model.job import JobRef
from agent.model.lifecycle import TOPOLOGY_CLASSES, IncidentStatus, VerdictClass
from agent.playbook.model import Playbook
from agent.policy import PolicySet
from agent.runtime.diagnoser import Diagnoser
from agent.runtime.drops import DropMessages
from agent.runtime.evidence import UtilizationReadings
from agent.runtime.open_incidents import OpenIncidents
from agent.runtime.plan_previews import PlanPreviews
from agent.runtime.playbooks import PlaybookActions
from agent.runtime.recording import Recorder
from agent.runtime.revisit import FollowedChanges, WaitingRoom, in_scope, job_scope
from agent.runtime.settle import SettleWait
from agent.runtime.signals import Signals
from agent.runtime.store_work import IncidentGauge, StoreWork, StoreWorkLedger
from agent.runtime.unrecorded import FollowedProblems, record_missed
from agent.runtime.waste import SplitWaste
from agent.settings import Settings
from agent.sources.alertmanager import Alert
from agent.sources.cache import ClusterCache
from agent.sources.change import Change
from agent.sources.packetdrops import PacketDrop
from agent.sources.prometheus import PrometheusSource
from agent.store.repository import IncidentStore
from agent.store.resilience import deadline
from agent.topology.facts import ClusterFacts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PipelinePieces:
    """The pipeline's collaborators, each built once by the composition root
    (`agent.runtime.root.pipeline_pieces`) and handed in: the pipeline builds none of them."""

    diagnoser: Diagnoser
    open: OpenIncidents
    evidence: UtilizationReadings
    waste: SplitWaste
    drops: DropMessages
    room: WaitingRoom
    followed: FollowedChanges
    problems: FollowedProblems
    previews: PlanPreviews | None
    actions: PlaybookActions
    recorder: Recorder
    settle: SettleWait
    signals: Signals
    work: StoreWorkLedger
    gauge: IncidentGauge


class AgentPipeline:
    """Detect, diagnose, record: the pieces of `agent.runtime`, piped for each kind of work.

    What it is handed, and nothing more: `settings` (the cluster's name, the diagnosis, the
    database's retention and timeout, the drop window), `cache` (whether it is synced, a job's
    pending pods), `prometheus` (None: no utilization refresh), `is_leader` (whether this replica
    records now), `store` (None: nothing is recorded) and its `pieces`."""

    def __init__(
        self,
        *,
        settings: Settings,
        cache: ClusterCache,
        prometheus: PrometheusSource | None,
        is_leader: Callable[[], bool],
        store: IncidentStore | None,
        pieces: PipelinePieces,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings
        self.cluster = settings.cluster_name
        self.cache = cache
        self.prometheus = prometheus
        self.is_leader = is_leader
        self.store = store
        self.now = now
        self._lock = threading.RLock()
        self.diagnoser = pieces.diagnoser
        self.open = pieces.open
        self.evidence = pieces.evidence
        self.waste = pieces.waste
        self.drops = pieces.drops
        self.room = pieces.room
        self.followed = pieces.followed
        self.problems = pieces.problems
        self.previews = pieces.previews
        self.actions = pieces.actions
        self.recorder = pieces.recorder
        self.settle = pieces.settle
        self.signals = pieces.signals
        self.work = pieces.work
        self.gauge = pieces.gauge

    # -- the protocol --------------------------------------------------------------------------

    def handle_change(self, change: Change, first_seen: float) -> Change | None:
        """Diagnose and record a detector batch; what to look at again (jobs whose zone labels
        are unsettled: `agent.runtime.settle`). Raises `UnavailableError` when the store refuses
        its writes: the detector retries the batch (recording again is safe: findings dedupe). A
        batch with free capacity (`Change.capacity`: a node added or uncordoned, GPUs freed)
        also diagnoses the jobs waiting for room."""
        with self._lock:
            mirror = self.diagnoser.mirror
            loads = mirror.frozen_loads
            if not self.is_leader():
                self._follow(change)
                _freeze_long_lived(change, collect=mirror.frozen_loads == loads)
                return None
            change = self.room.widen(change)
            with self.work.run(StoreWork.DETECTOR):
                self.actions.retry_unfired()
                found = self._record_change(change, first_seen)
                present = set(found)
                for key in sorted(change.jobs - present):
                    self.close_job(key, reason="the job has no live pods")
                    self.settle.gone(key)
                if change.everything and self.cache.synced:
                    self._reconcile(present)
                    record_missed(self.problems, store=self.store, cluster=self.cluster,
                                  found=found, evidence=self.evidence)  # fmt: skip
            self.gauge.refresh_quietly()
            _freeze_long_lived(change, collect=mirror.frozen_loads == loads)
            return self.settle.again()

    def _follow(self, change: Change) -> None:
        """A follower's batch: remember what changed (`FollowedChanges`) and, for a scoped batch,
        diagnose its jobs (as the leader would) to keep the splits seen (`FollowedProblems`: a new
        term records those the leader did not); a cluster-wide batch only keeps the parsed mirror
        warm (a whole diagnosis on every replica is not paid). Nothing is recorded."""
        self.followed.remember(change)
        if change.everything:
            self.diagnoser.mirror.state()
            return
        self.problems.note(f for f in self.diagnose(job_scope(change)) if in_scope(f.job, change))

    def _record_change(self, change: Change, first_seen: float) -> dict[JobRef, Finding]:
        """Diagnose and record the batch's jobs (a cluster-wide one: what changed last while
        following first, under one read of the open incidents); the findings, by job."""
        with self.open.batch() if change.everything else nullcontext():
            done = self._record_followed(first_seen) if change.everything else set()
            findings = self.diagnose(None if change.everything else job_scope(change))
            scoped = [f for f in findings if in_scope(f.job, change) and f.job not in done]
            if self.open.held is not None:
                scoped.sort(key=self.open.recording_order)
            self._record_settled(scoped, first_seen=first_seen)
        return {f.job: f for f in findings}

    def _record_followed(self, first_seen: float) -> set[JobRef]:
        """At a cluster-wide batch (a new term, or the start-up), record the jobs of the changes
        this replica saw last while it followed, before the diagnosis of every job (a split that
        appeared during the hand-over is recorded at once). The jobs recorded."""
        recent = self.followed.take()
        if recent is None:
            return set()
        found = [f for f in self.diagnose(job_scope(recent)) if in_scope(f.job, recent)]
        if self.open.held is not None:
            found.sort(key=self.open.recording_order)
        self._record_settled(found, first_seen=first_seen)
        return {f.job for f in found}

    def _record_settled(self, findings: Iterable[Finding], *, first_seen: float | None) -> int:
        return self.settle.record(findings, first_seen=first_seen,
                                  diagnose=self.diagnose)  # fmt: skip

    def handle_alert(self, alert: Alert, jobs: list[JobRef]) -> None:
        """Record an alert for its jobs (or resolve their alert incidents). The store calls are
        bounded by `http.database_timeout` (a webhook request waits on them); `UnavailableError`
        when the store refuses, so the webhook answers 503 and Alertmanager re-sends."""
        with deadline(self.settings.http.database_timeout):
            with self.work.run(StoreWork.ALERT, key=alert.dedupe_key):
                self.actions.retry_unfired()
                self.signals.alert(alert, jobs)
            self.gauge.refresh_quietly()

    def refresh_metrics(self) -> None:
        """Fetch utilization for all jobs (two queries) and the egress meter's one answer; drops
        open incidents; evidence is added to open topology incidents that had none."""
        with self.work.run(StoreWork.METRICS):
            self._refresh_metrics()

    def _refresh_metrics(self) -> None:
        source = self.prometheus
        if source is None:
            return
        report = source.fetch(self.now())
        self._refresh_egress()
        with self._lock:
            self.evidence.report = report
            if not report.available:
                return
            for key, metrics in sorted(report.jobs.items()):
                self.signals.drop(key, metrics, report)
            for key in self.evidence.unrecorded_steady(self.settings.prometheus.drop_duration):
                self.evidence.attach(key)

    def _refresh_egress(self) -> None:
        """The egress meter's one query; the split jobs it starts (or stops) measuring are
        diagnosed and recorded again at once (`agent.runtime.waste`)."""
        index = self.waste.fetch()
        if index is None:
            return
        with self._lock:
            moved = self.waste.take(index)
            if not moved:
                return
            found = [f for f in self.diagnose(JobScope(jobs=moved)) if f.job in moved]
            self._record_settled(found, first_seen=None)

    def sweep(self, playbook: Playbook | None) -> dict[str, Any]:
        """Diagnose every job from the cache, refresh metrics, reconcile, purge, digest."""
        with self.work.run(StoreWork.SWEEP):
            return self._sweep(playbook)

    def _sweep(self, playbook: Playbook | None) -> dict[str, Any]:
        started = self.now()
        self._refresh_metrics()
        with self._lock:
            self.actions.retry_unfired()
            findings = self.diagnose()
            present = {f.job for f in findings}
            with self.open.batch():  # one read, then problems in batches
                ordered = list(findings)
                if self.open.held is not None:
                    ordered.sort(key=self.open.recording_order)
                opened = self._record_settled(ordered, first_seen=None)
            closed = self._reconcile(present)
            purged = 0
            if self.store is not None:
                result = self.store.purge(before=started - self.settings.database.retention)
                purged = int(getattr(result, "incidents", 0) or 0)
            report = self.evidence.report
            summary: dict[str, Any] = {
                "cluster": self.cluster,
                "at": started.isoformat(),
                "jobs": len(findings),
                "by_verdict": _count(str(f.verdict) for f in findings),
                "incidents_opened": opened,
                "incidents_closed": closed,
                "purged": purged,
                "metrics": report.status if report is not None else "not configured",
                "findings": [f.to_dict() for f in findings],
            }
            if playbook is not None:
                self.post_digest(playbook, summary)
            self.gauge.refresh()
            log.info("sweep done", extra={k: v for k, v in summary.items() if k != "findings"})
            return summary

    def handle_packet_drops(self, drops: list[PacketDrop]) -> Change:
        """Cilium's drop messages into their jobs' timelines (`agent.runtime.drops`); the jobs
        to re-diagnose."""
        with self._lock:
            return self.drops.handle(drops)

    def parsed_view(self) -> tuple[ClusterState, PolicySet, ClusterFacts]:
        """The parsed cluster, policies and facts the next diagnosis reads (brought up to date
        under the lock), for explanations (`agent.runtime.explainer`)."""
        with self._lock:
            return self.diagnoser.mirror.snapshot()

    def held_view(self) -> tuple[ClusterState, PolicySet, ClusterFacts, int]:
        """`parsed_view` and the mirror's generation of that state (`ModelMirror.generation`),
        for what-if answers that keep the jobs found per generation (`agent.runtime.whatif`)."""
        with self._lock:
            mirror = self.diagnoser.mirror
            state, policies, facts = mirror.snapshot()
            return state, policies, facts, mirror.generation

    def diagnose(self, scope: JobScope | None = None) -> tuple[Finding, ...]:
        """Findings of every job, or of the jobs `scope` covers (each as in a full diagnosis)."""
        return self.diagnoser.diagnose(scope, settings=self.settings.diagnosis)

    def close_job(self, key: JobRef, *, reason: str) -> int:
        """Supersede the open incidents of a job that is gone (no live pods). A Kubeflow job
        whose object is still there and not finished is not gone (suspended by hand or queued,
        resumed and its pods not created yet, restarting its gang): its incident stays open, and
        the job's next detection folds into it; it closes once the object is deleted or the job
        finished."""
        self.waste.forget(key)
        self.room.note(key, None)
        if self.cache.job_pending_pods(key):
            return 0
        return self.open.resolve(
            key,
            {*TOPOLOGY_CLASSES, VerdictClass.GPU_UTILIZATION_DROP},
            reason=reason,
            to=IncidentStatus.SUPERSEDED,
        )

    def _reconcile(self, present: set[JobRef]) -> int:
        """Open incidents of jobs no longer found: superseded (the job is gone or finished)."""
        return sum(self.close_job(key, reason="the job has no live pods")
                   for key in self.open.gone(present))  # fmt: skip

    def post_digest(self, playbook: Playbook, summary: dict[str, Any]) -> int:
        """Queue the playbook's digest actions (see `PlaybookActions.post_digest`); how many."""
        return self.actions.post_digest(playbook, summary)


def _count(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))


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
