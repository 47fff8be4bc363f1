"""The leader's remediation queue: approved incidents go to the remediator, one at a time.

`RemediationExecutor` takes the next incident the guards clear and hands it to the remediator
(`agent.remediation.remediator.Remediator`, behind the `IncidentRunner` Protocol), which applies it.

Who calls it: the composition root (`agent.runtime.root`) builds it and returns
`RemediationExecutor.tick` as the leader-gated background job `remediation-executor` (every `remediation.pickup_interval`, 1 s by default), so a
decision recorded by any replica, the CLI, Slack or the HTTP API is picked up by the leader within
about a second, and a follower or a CLI never touches the cluster.

One tick, in one database read plus at most one remediation:
1. Read every open incident of this cluster with what a (re)starting agent must do for it
   (`store.incidents_to_resume`).
2. Resume first: an incident in `remediating` or `verifying` is never in flight in this process at
   the start of a tick (a tick runs its remediation to the end and ticks never overlap), so it was
   left by a previous leader, a crash or a lost lease; the first tick of a new leader hands it to
   the remediator, which re-applies or re-verifies from its recorded step (the remediator of a
   replica that lost the lease stops after its recorded step). The guards do not stop a started
   remediation: it must end remediated or restored, never half-way.
3. Else the oldest `approved` incident that the guards clear (`agent.remediation.guard`):
   protected namespaces and Kueue-managed jobs are refused (the incident moves to `refused` with
   the reason: it stays open, the job's one incident, and its message says why and what to do);
   another remediation of the same job in flight, or the hourly cap of the cluster reached, waits.
4. An incident whose remediation raised, or returned still unfinished, is retried after
   `remediation.retry_after`, not at every tick.

What it does not do: write to the cluster (the remediator, `agent.remediation.remediator`, writes
through `agent.remediation.writer`, the only writer), decide anything, or run on a follower (the scheduler gates every background job).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from agent.errors import UnavailableError
from agent.model.incident import IncidentSummary
from agent.model.job import JobRef
from agent.model.lifecycle import EventKind, IncidentStatus, ResumeAction, is_terminal
from agent.model.stored import StoredDiagnosis
from agent.remediation.guard import ClearanceKind, GuardInput, clear
from agent.runtime.parts import Parts
from agent.settings import RemediationSettings
from agent.sources.cache import ClusterCache
from agent.store.budget import remediations_started
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

ACTOR = "zonemedic"
JOB = "remediation-executor"  # the background job's name
S = IncidentStatus
_IN_FLIGHT = frozenset({S.REMEDIATING, S.VERIFYING})
_RESUME = frozenset({ResumeAction.REAPPLY_AND_VERIFY, ResumeAction.VERIFY})


class IncidentRunner(Protocol):
    """Runs one incident's remediation (or resumes it) to a stop; returns the status it left.

    `agent.remediation.remediator.Remediator` is the real one: it moves `approved -> remediating`,
    applies the plan, verifies, rolls back, and records every step on the incident."""

    def run(self, incident_id: int) -> IncidentStatus: ...


def cached_objects(cache: ClusterCache, job: JobRef) -> list[Mapping[str, Any]]:
    """The job's own object (when cached) and its live pods, from the watch cache."""
    obj = cache.job_object(job)
    return [*([obj] if obj is not None else []), *cache.pods_of_job(job)]


class RemediationExecutor:
    def __init__(
        self,
        store: IncidentStore,
        remediator: IncidentRunner,
        *,
        cluster: str,
        settings: RemediationSettings,
        protected_namespaces: Collection[str],
        objects_of: Callable[[JobRef], Sequence[Mapping[str, Any]]],
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.remediator = remediator
        self.cluster = cluster
        self.settings = settings
        self.protected = frozenset(protected_namespaces)
        self.objects_of = objects_of
        self.now = now
        self.monotonic = monotonic
        self._not_before: dict[int, float] = {}  # incident id -> monotonic time of next attempt
        self._told: dict[int, str] = {}  # incident id -> the wait reason already on its timeline
        self.runs = 0

    # -- one tick ------------------------------------------------------------------------------

    def tick(self) -> None:
        """The background job: one look for work."""
        self.step()

    def _through_kueue(self, incident_id: int) -> bool:
        """Whether the incident's finding says its fix re-queues the job through Kueue."""
        advice = StoredDiagnosis.from_stored(self.store.get_incident(incident_id).diagnosis).kueue
        return advice is not None and advice.agent_fixable

    def step(self) -> int | None:
        """One look for work; returns the incident handed to the remediator, if any."""
        pending = [
            (incident, action)
            for incident, action in self.store.incidents_to_resume()
            if incident.cluster == self.cluster
        ]
        ready = [(i, a) for i, a in pending if self._due(i.id)]
        for incident, action in ready:
            if action in _RESUME:
                return self._run(incident, resumed=True)
        busy = {(i.kind, i.namespace, i.name) for i, _ in pending if i.status in _IN_FLIGHT}
        started: int | None = None
        for incident, action in ready:
            if action is not ResumeAction.START_REMEDIATION:
                continue
            if started is None:
                started = remediations_started(
                    self.store, cluster=self.cluster, since=self.now() - timedelta(hours=1)
                )
            job = incident.job_ref
            clearance = clear(
                GuardInput(
                    namespace=incident.namespace,
                    job=f"{incident.kind} {incident.namespace}/{incident.name}",
                    objects=self.objects_of(job) if job is not None else [],
                    busy=(incident.kind, incident.namespace, incident.name) in busy,
                    started_last_hour=started,
                    through_kueue=self._through_kueue(incident.id),
                ),
                protected_namespaces=self.protected,
                max_per_hour=self.settings.max_per_hour,
            )
            if clearance.kind is ClearanceKind.GO:
                return self._run(incident, resumed=False)
            if clearance.kind is ClearanceKind.REFUSE:
                self._refuse(incident, clearance.reason)
                continue
            self._wait(incident, clearance.reason)
        return None

    def _due(self, incident_id: int) -> bool:
        not_before = self._not_before.get(incident_id)
        return not_before is None or self.monotonic() >= not_before

    def _run(self, incident: IncidentSummary, *, resumed: bool) -> int:
        self.runs += 1
        log.info("remediation handed to the remediator",
                 extra={"incident": incident.id, "status": incident.status.value,
                        "resumed": resumed, "job": f"{incident.namespace}/{incident.name}"})
        retry_at = self.monotonic() + self.settings.retry_after.total_seconds()
        try:
            status = self.remediator.run(incident.id)
        except UnavailableError as exc:  # the API, the database or Prometheus away: resume later
            log.warning("remediation paused: %s; resuming in %gs", exc,
                        self.settings.retry_after.total_seconds(), extra={"incident": incident.id})
            self._not_before[incident.id] = retry_at
            return incident.id
        except Exception:  # top level of a background job: log, retry this incident later
            log.exception("remediation failed; retrying later", extra={"incident": incident.id})
            self._not_before[incident.id] = retry_at
            return incident.id
        if is_terminal(status):
            self._not_before.pop(incident.id, None)
            self._told.pop(incident.id, None)
        else:
            self._not_before[incident.id] = retry_at
        log.info("remediation stopped", extra={"incident": incident.id, "status": status.value})
        return incident.id

    def _refuse(self, incident: IncidentSummary, reason: str) -> None:
        result = self.store.transition(
            incident.id, S.APPROVED, S.REFUSED, actor=ACTOR, now=self.now(),
            detail={"reason": reason},
        )
        log.warning("remediation refused", extra={"incident": incident.id, "reason": reason,
                                                  "applied": result.applied})

    def _wait(self, incident: IncidentSummary, reason: str) -> None:
        if self._told.get(incident.id) == reason:
            return
        self._told[incident.id] = reason
        self.store.add_event(incident.id, EventKind.NOTE, now=self.now(), actor=ACTOR,
                             detail={"waiting": reason})
        log.info("remediation waits", extra={"incident": incident.id, "reason": reason})


def live_remediator(parts: Parts, store: IncidentStore) -> IncidentRunner:
    """The real remediator (`agent.remediation.remediator.Remediator`) over the agent's clients: it
    re-diagnoses from the live API, writes through the only cluster writer, reads utilization
    from Prometheus when configured, re-checks the guards (this configuration's protected
    namespaces and hourly cap) before its first write, and writes only in the leadership term it
    started in: once this replica's term ends it stops (after its recorded step, before any
    further write), so the next leader resumes alone."""
    from agent.remediation.fence import WhileLeading
    from agent.remediation.remediator import Remediator
    from agent.runtime.rediagnosis import ApiRediagnosis

    settings = parts.settings
    return Remediator(
        parts.api, store,
        diagnose=ApiRediagnosis(parts.api, settings.diagnosis),
        settings=settings.remediation,
        prometheus=parts.prometheus,
        leadership=parts.leadership or WhileLeading(parts.is_leader),
        protected_namespaces=settings.diagnosis.protected_namespaces,
    )
