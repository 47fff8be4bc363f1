"""Cilium's PacketDrop Events in the incidents' timelines.

Called by the pipeline (`agent.runtime.pipeline.AgentPipeline.handle_packet_drops`, under its lock)
for each batch of drops the PacketDrop informer reads, and by the recorder
(`agent.runtime.recording`) once a finding of a job with messages waiting is recorded. The pod an
Event names is mapped to its job (the cache's Kubeflow job, else the generic group of the last
diagnosis); the message goes once into the timeline of the job's open topology incidents
(`evidence`, actor `cilium`), kept (bounded) until one is open; only the leader writes, a follower
keeps them for when it leads. The jobs are returned to be re-diagnosed at once.

What it does not do: read the Events (`agent.sources.packetdrops`) or diagnose.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime

from agent.errors import UnavailableError
from agent.model.job import JobRef
from agent.model.lifecycle import TOPOLOGY_CLASSES, EventKind, LifecycleError, verdict_class
from agent.model.verdict import Verdict
from agent.runtime.diagnoser import Diagnoser
from agent.runtime.metrics import AgentMetrics
from agent.runtime.open_incidents import OpenIncidents
from agent.sources.cache import ClusterCache
from agent.sources.change import Change
from agent.sources.packetdrops import PacketDrop
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

DROP_ACTOR = "cilium"  # the timeline actor of Cilium's PacketDrop messages
MAX_PENDING_DROP_JOBS = 10_000  # jobs whose drop messages wait for an open incident
MAX_PENDING_DROPS = 50  # messages one job keeps waiting
MAX_WRITTEN_DROPS = 50_000  # (job, pod, message) written lately, not asked of the store again


def _topology(verdict: Verdict) -> bool:
    try:
        return verdict_class(verdict) in TOPOLOGY_CLASSES
    except LifecycleError:
        return False


class DropMessages:
    """Drop messages waiting for their job's open incident, and those written lately."""

    def __init__(
        self, *, store: IncidentStore | None, cache: ClusterCache, diagnoser: Diagnoser,
        open_incidents: OpenIncidents, metrics: AgentMetrics, is_leader: Callable[[], bool],
        now: Callable[[], datetime],
    ) -> None:  # fmt: skip
        self.store = store
        self.cache = cache
        self.diagnoser = diagnoser
        self.open = open_incidents
        self.metrics = metrics
        self.is_leader = is_leader
        self.now = now
        self.pending: dict[JobRef, dict[tuple[str, str], PacketDrop]] = {}
        self._written: dict[tuple[JobRef, str, str], None] = {}

    def handle(self, drops: list[PacketDrop]) -> Change:
        """Keep each message for its job and write those of jobs with an open topology incident;
        the jobs to re-diagnose (a pod of no job: its namespace, where generic groups live). A
        database refusing the writes keeps the messages for later."""
        jobs: set[JobRef] = set()
        namespaces: set[str] = set()
        reasons: list[str] = []
        counter = self.metrics.packet_drops
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
            if (key, drop.where, drop.message) not in self._written:
                self._keep(key, drop)
        if self.is_leader() and self.store is not None:
            try:
                self.flush(sorted(jobs & set(self.pending)))
            except UnavailableError as exc:
                log.warning("drop messages kept for later: %s", exc)
        return Change(jobs=frozenset(jobs), namespaces=frozenset(namespaces),
                      reasons=tuple(reasons))  # fmt: skip

    def _job_of_pod(self, namespace: str, pod: str) -> JobRef | None:
        """The job of a pod: the cache's Kubeflow job, else the generic group of the last
        diagnosis that holds it."""
        found = self.cache.job_of_pod(namespace, pod)
        if found is not None:
            return found
        return self.diagnoser.group_of_pod(namespace, pod)

    def _keep(self, key: JobRef, drop: PacketDrop) -> None:
        pending = self.pending.get(key)
        if pending is None:
            if len(self.pending) >= MAX_PENDING_DROP_JOBS:
                del self.pending[next(iter(self.pending))]  # the oldest job's
            pending = self.pending[key] = {}
        if len(pending) >= MAX_PENDING_DROPS:
            del pending[next(iter(pending))]
        pending[(drop.where, drop.message)] = drop

    def flush(self, keys: Iterable[JobRef]) -> None:
        """Write the kept drop messages of these jobs into their open topology incidents."""
        if self.store is None or not self.is_leader():
            return
        for key in keys:
            incidents = [i for i in self.open.of(key) if _topology(i.verdict)]
            if not incidents:
                continue  # kept until the re-diagnosis opens one
            for (where, message), drop in list(self.pending.get(key, {}).items()):
                detail = {"packet_drop": message, "pod": where, "count": drop.count,
                          "event": drop.event, "at": drop.at}  # fmt: skip
                for incident in incidents:
                    self.store.add_event_once(incident.id, EventKind.EVIDENCE, now=self.now(),
                                              actor=DROP_ACTOR, detail=detail,
                                              same=("packet_drop", "pod"))  # fmt: skip
                del self.pending[key][(where, message)]
                if len(self._written) >= MAX_WRITTEN_DROPS:
                    self._written.clear()
                self._written[(key, where, message)] = None
            if not self.pending.get(key):
                self.pending.pop(key, None)
