"""Looking at the job again before acting on it: re-diagnose, superseded?, re-read, re-plan, re-guard.

Who calls it: `agent.remediation.remediator.Remediator` when an approved incident is planned (and
when a run that died before recording its plan plans it again), and the families' steps
(`agent.remediation.training_steps`, `agent.remediation.group_steps`) right before the first
write and after a write conflict. The one place where a run compares the job as it is now with
the incident and the plan:
- `plan`: re-diagnose the job, re-read it, say whether the incident still applies to it
  (`SupersededError`: gone, recreated (uid), no longer a split, or placed otherwise than the
  incident says; after a conflict only whether it still has live pods, the next attempt checks
  the rest against the plan), bind an incident recorded without its job's uid to the live job
  when that job was created by the incident's first evidence (`SupersededError` when it was
  created later: another job of that name), re-read what the plan needs and plan again
  (`RefusedError` with the planner's refusal; after a conflict, `FailedError`);
- `confirm`: before the first write, the job is still the one planned, in the placement and with
  the verdict planned (`SupersededError` otherwise);
- `guards`: before the first write, every guard again from the live objects and the settings now
  in force (`RefusedError`: protected namespace, Kueue on any object written or their pods, a
  finished training job: nothing was written, the incident stays open `refused`; `WaitError`:
  another remediation of the job in flight, the hourly cap).

What it does not do: write to the cluster, or record on the incident other than the job uid it
binds; `replan` records the re-plan after a conflict, the caller the incident's plan).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any

from agent.model.finding import REMEDIABLE_VERDICTS
from agent.model.instance import binds, creation_time, first_evidence
from agent.model.job import JobRef
from agent.model.lifecycle import EventKind, IncidentStatus
from agent.model.workload import REPLICA_SET, JobKind
from agent.remediation.guard import ClearanceKind, GuardInput, clear
from agent.remediation.observe import ClusterReader, Rediagnose, Rediagnosis
from agent.remediation.plan import LiveObjects, Plan, Refusal, placement
from agent.remediation.planner import plan_remediation
from agent.remediation.run import (
    Clock,
    FailedError,
    Journal,
    RefusedError,
    Run,
    SupersededError,
    WaitError,
)
from agent.remediation.training_plan import guard_reason
from agent.remediation.writer import uid_of
from agent.store.budget import remediations_started
from agent.store.repository import IncidentStore

S = IncidentStatus
_IN_FLIGHT = frozenset({S.REMEDIATING, S.VERIFYING})


class Scope(StrEnum):
    """What `Recheck.plan` compares the job with before it plans again."""

    INCIDENT = "incident"  # the incident: still there, same uid, a remediable split, same placement
    CONFLICT = "conflict"  # after a 409: only that it still has live pods (the retry checks the rest)


@dataclass(frozen=True)
class Reading:
    """The job as just re-diagnosed and re-read (`job`: a training job's object, None for a
    generic group or when it is gone)."""

    rediagnosis: Rediagnosis
    job: dict[str, Any] | None


class Recheck:
    """Re-diagnosis, supersession, re-reading, re-planning and the guards again, for one run.

    `reader`: the cluster reads; `diagnose`: a fresh diagnosis of one job; `store`: the
    incidents (for the hourly cap and the remediations in flight); `protected_namespaces` and
    `max_per_hour`: the guard settings now in force; `actor`: who binds an incident to its job."""

    def __init__(
        self,
        reader: ClusterReader,
        diagnose: Rediagnose,
        *,
        store: IncidentStore,
        clock: Clock,
        protected_namespaces: Collection[str],
        max_per_hour: int,
        actor: str = "zonemedic",
    ) -> None:
        self.actor = actor
        self.reader = reader
        self.diagnose = diagnose
        self.store = store
        self.clock = clock
        self.protected = frozenset(protected_namespaces)
        self.max_per_hour = max_per_hour

    # -- re-diagnose, superseded?, re-read, re-plan ----------------------------------------------

    def read(self, ref: JobRef) -> Reading:
        """Re-diagnose the job, then re-read its object (a training job's)."""
        rediagnosis = self.diagnose(ref)
        job = None if ref.kind is JobKind.GROUP else self.reader.job(ref)
        return Reading(rediagnosis, job)

    def superseded(self, run: Run, reading: Reading) -> str | None:
        """Why the incident no longer applies to the job as just read, or None."""
        summary = run.detail.incident
        finding = reading.rediagnosis.finding
        job = reading.job
        if finding is None:
            return "the job has no live pods any more"
        if run.ref.kind is not JobKind.GROUP:
            if job is None:
                return f"{run.ref.kind} {run.ref.namespace}/{run.ref.name} is gone"
            if summary.uid and uid_of(job) != summary.uid:
                return f"the job was recreated (uid {uid_of(job)}, the incident is about {summary.uid})"
        if finding.verdict not in REMEDIABLE_VERDICTS:
            return f"the job is now {finding.verdict.value}"
        recorded = run.detail.stored.zones
        if recorded is not None and dict(recorded) != dict(finding.zones):
            return f"placement changed: was {dict(recorded)}, now {dict(finding.zones)}"
        return None

    def bind(self, run: Run, reading: Reading) -> str | None:
        """An incident recorded without its job's uid is bound to the live job when that job
        was created by the incident's first evidence (`agent.model.instance.binds`), the uid
        recorded; else why it does not apply: a job of that name created later (deleted and
        recreated since) is another job, never remediated on this incident's approval."""
        summary, job = run.detail.incident, reading.job
        if run.ref.kind is JobKind.GROUP or summary.uid or job is None:
            return None
        uid = uid_of(job)
        created = creation_time(job)
        evidence = first_evidence(summary.opened_at, run.detail.onset_at)
        if uid is None or not binds(created, evidence):
            when = "at an unknown time" if created is None else f"at {created:%Y-%m-%dT%H:%M:%SZ}"
            return (f"{run.ref.kind} {run.ref.namespace}/{run.ref.name} (uid {uid}) was created "
                    f"{when}, after the incident's first evidence at "
                    f"{evidence:%Y-%m-%dT%H:%M:%SZ}: another job of that name (the incident never "
                    "knew its job's uid)")
        bound = self.store.bind_job_uid(run.incident_id, uid, now=self.clock.now(),
                                        actor=self.actor)  # fmt: skip
        if bound != uid:
            return f"the job was recreated (uid {uid}, the incident is about {bound})"
        return None

    def live(
        self, run: Run, rediagnosis: Rediagnosis, job: Mapping[str, Any] | None
    ) -> LiveObjects:
        """What the plan reads, read now for the re-diagnosed job."""
        finding = rediagnosis.finding
        assert finding is not None
        live = self.reader.live_objects(
            run.ref, target_zone=finding.target_zone, job=job, pod_names=rediagnosis.pods,
            finished_names=rediagnosis.finished,
        )  # fmt: skip
        if finding.kueue is None:
            return live
        return replace(live, queued=self.reader.kueue_workload(run.ref), kueue=rediagnosis.kueue)

    def plan(self, run: Run, *, scope: Scope) -> Plan:
        """Re-diagnose, check the incident still applies (`scope`), re-read and plan again;
        `SupersededError`, or the planner's refusal, when there is no plan: `RefusedError` while
        the run has written nothing (the incident's plan, or a re-plan after a 409 that came
        before the first write), `FailedError` once a write may have been sent."""
        reading = self.read(run.ref)
        if scope is Scope.INCIDENT:
            reason = self.superseded(run, reading) or self.bind(run, reading)
        else:
            reason = None if reading.rediagnosis.finding is not None else "the job has no live pods any more"
        if reason is not None:
            raise SupersededError(reason)
        rediagnosis = reading.rediagnosis
        assert rediagnosis.finding is not None
        result = plan_remediation(
            rediagnosis.finding, self.live(run, rediagnosis, reading.job),
            mirror_keys=rediagnosis.mirror_keys,
        )  # fmt: skip
        if isinstance(result, Refusal):
            refused = scope is Scope.INCIDENT or not run.written()
            raise (RefusedError if refused else FailedError)(result.reason)
        return result

    def replan(self, run: Run, *, journal: Journal) -> Plan:
        """After a write conflict (409): plan again from fresh objects (`Scope.CONFLICT`) and
        record the new plan as the run's, with the utilization the run measured before."""
        plan = self.plan(run, scope=Scope.CONFLICT)
        journal.record_plan(run, plan, before=run.before, baseline=run.baseline)
        return plan

    # -- right before the first write ----------------------------------------------------------

    def confirm(self, run: Run, job: Mapping[str, Any] | None) -> LiveObjects:
        """Before the first write: the job is the one planned, in the placement and with the
        verdict planned; returns what was read."""
        plan = run.planned()
        if plan.kubeflow and (job is None or uid_of(job) != plan.preconditions.uid):
            raise SupersededError("the job was deleted or recreated since the plan")
        rediagnosis = self.diagnose(run.ref)
        finding = rediagnosis.finding
        if finding is None or finding.verdict not in REMEDIABLE_VERDICTS:
            now = "gone" if finding is None else finding.verdict.value
            raise SupersededError(f"the job is {now} since the plan")
        live = self.live(run, rediagnosis, job)
        where = placement(live.pods, live.nodes)
        if where != dict(plan.preconditions.placement):
            raise SupersededError(
                f"placement changed since the plan ({dict(plan.preconditions.placement)} -> {where})"
            )
        return live

    def guards(self, run: Run, live: LiveObjects) -> None:
        """Right before the first write, every guard again, from the live objects and the
        settings now in force: protected namespace, Kueue on every object written and their
        pods, a finished Kubeflow job (`RefusedError`: nothing written); another remediation of
        the job in flight, the hourly cap (`WaitError`: nothing written, a later run tries again)."""
        summary = run.detail.incident
        since = self.clock.now() - timedelta(hours=1)
        started = remediations_started(self.store, cluster=summary.cluster, since=since)
        if any(e.kind is EventKind.REMEDIATION_STARTED and e.at >= since for e in run.detail.events):
            started -= 1  # this one's own start
        busy = any(
            i.id != run.incident_id and i.status in _IN_FLIGHT and i.cluster == summary.cluster
            and (i.kind, i.namespace, i.name) == (summary.kind, summary.namespace, summary.name)
            for i, _ in self.store.incidents_to_resume()
        )  # fmt: skip
        clearance = clear(
            GuardInput(
                namespace=run.ref.namespace, job=f"{run.ref.kind} {run.ref.namespace}/{run.ref.name}",
                objects=written_objects(run.planned(), live), busy=busy, started_last_hour=started,
                through_kueue=run.planned().kueue,
            ),
            protected_namespaces=self.protected, max_per_hour=self.max_per_hour,
        )  # fmt: skip
        if clearance.kind is ClearanceKind.REFUSE:
            raise RefusedError(f"{clearance.reason} (checked again before the first write)")
        if clearance.kind is ClearanceKind.WAIT:
            raise WaitError(clearance.reason)
        if live.job is not None:
            finished = guard_reason(live.job, run.ref.kind, through_kueue=run.planned().kueue)
            if finished is not None:
                raise RefusedError(f"{finished} (checked again before the first write)")


def written_objects(plan: Plan, live: LiveObjects) -> list[Mapping[str, Any]]:
    """Every object the plan writes, as live now, and the pods they own (directly, or through
    a Deployment's ReplicaSets, or a TrainJob's JobSet)."""
    if plan.kubeflow:
        return [o for o in (live.job, live.materialised, *live.pods) if o is not None]
    by_kind_name = {(str(w.get("kind")), str((w.get("metadata") or {}).get("name"))): w
                    for w in live.workloads}  # fmt: skip
    owners: dict[str, str] = {}  # uid of a written object or of its ReplicaSet -> target
    out: list[Mapping[str, Any]] = []
    for target in plan.targets:
        obj = by_kind_name.get((target.kind, target.name))
        if obj is None:
            continue
        out.append(obj)
        owners[str(uid_of(obj))] = target.name
    for rs in live.workloads:
        if rs.get("kind") == REPLICA_SET.kind:
            refs = (rs.get("metadata") or {}).get("ownerReferences") or []
            if any(r.get("controller") and r.get("uid") in owners for r in refs):
                out.append(rs)
                owners[str(uid_of(rs))] = "replicaset"
    for pod in [*live.pods, *live.finished_pods]:
        refs = (pod.get("metadata") or {}).get("ownerReferences") or []
        if any(r.get("controller") and r.get("uid") in owners for r in refs):
            out.append(pod)
    return out
