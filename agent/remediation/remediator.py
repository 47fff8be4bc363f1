"""Applying an approved remediation: the run of one incident from `approved` to a terminal state.

Who calls it: the leader's remediation queue (`agent.runtime.remediation_queue`: one
`Remediator.run(incident_id)` per incident in `approved`, `remediating` or `verifying`), tests and
the benchmark. What it does:
drives the run (`agent.remediation.run`: its steps and their records) from the recorded steps,
in this order, each step a store action plus its timeline event:
- `approved`: re-diagnose and re-read the job, and plan it again (`agent.remediation.recheck`);
  `superseded` when the job is gone or was recreated (uid), its verdict is no longer a split, or
  its placement differs from the incident's; `refused` with the plan's refusal (no room,
  Kueue-managed, finished...: the incident stays open, the job's one incident) -- in all three
  cases nothing was written. Else
  `approved -> remediating` (one winner among replicas) and the PLAN action records the plan
  (patches, restore patches, diff, utilization before, the gang's size) as JSON.
- `remediating`: the job's family applies the plan -- a Kubeflow training job
  (`agent.remediation.training_steps`: suspend with the new templates, wait for its pods to go,
  resume), a TrainJob or JobSet (`agent.remediation.jobset_steps`: suspend, wait for its pods to
  go, its own runtime patch or the JobSet's templates, resume), a job Kueue manages -- Kubeflow,
  TrainJob or JobSet (`agent.remediation.kueue_steps`: its Workload deactivated, its templates
  annotated for Kueue's zone-level placement, a TrainJob's through its own runtime patch, the
  Workload deleted so Kueue re-queues the job, admitted in one allowed zone) or a generic group (`agent.remediation.group_steps`: Deployment rollouts, batch Jobs
  recreated) -- after re-checking, right before the first write, that the job is still the one
  planned and every guard holds again (`refused`, `superseded`, or the run waits with nothing
  written: another remediation of the job in flight, the hourly cap), and a server-side dry run
  of every write (a refusal ends `failed` with nothing written). Then every pod bound, all in the
  target zone, within `schedule_timeout`.
- `remediating -> verifying`: poll the pure judge (`agent.remediation.verify`: re-diagnosis, the
  whole gang running, utilization) within `verify_window`; VERIFIED records utilization after and
  ends `resolved`.
- Rollback (pods unschedulable past the timeout, not co-located, pods that never went away, a
  write refused, an object changed by someone else, verification failed): the family restores
  the original templates from the recorded plan and resumes; the incident ends `rolled_back` with
  the reason. A job is never left suspended. A training job deleted or recreated (another uid) by
  its owner meanwhile, or a group whose every workload its owner deleted, leaves nothing to
  restore: the incident ends `superseded`.
- Crash safety: the intent of every destructive write (SUSPENDING, ROLLING_OUT, JOB_DELETING,
  RESTORING) is recorded before the write is sent, and every step is decided from the recorded
  plan plus the live objects, so a fresh Remediator resumes at any point, a write that landed but
  was not recorded included; a recorded rollback start resumes the rollback at the first of its
  steps not recorded (ROLLBACK_*, each recorded before the next; a Kueue job's:
  `agent.remediation.kueue_rollback`). Once an intent is recorded the "nothing was written" checks
  are never run again.
- Fencing: every write is checked against this run's leadership term right before it is sent
  (`agent.remediation.fence`): a replica that lost the lease, or was paused past it, sends
  nothing more; a write already in flight is fenced by the object's uid and resourceVersion.

Every write goes through `agent.remediation.writer.ClusterWriter`, the only module that writes to
the cluster; the reads go through `agent.remediation.observe`. Errors: `UnavailableError` (the API
or the database away) propagates with the incident left in its state, to be resumed by a later
run. What it does not do: decide approvals, pick which incident runs next, or run a loop of its
own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

from agent.model.incident import reading_since
from agent.model.job import JobRef
from agent.model.lifecycle import EventKind, IncidentStatus, RemediationActionKind
from agent.model.workload import JobKind
from agent.remediation.fence import SOLE_WRITER, FenceClosedError, Leadership, open_fence
from agent.remediation.group_steps import GroupSteps
from agent.remediation.jobset_steps import JobSetSteps
from agent.remediation.kueue_steps import KueueSteps
from agent.remediation.observe import ClusterReader, Rediagnose, observe_pods
from agent.remediation.plan import Plan
from agent.remediation.recheck import Recheck, Scope
from agent.remediation.run import (
    Clock,
    FailedError,
    Journal,
    RefusedError,
    RollbackError,
    Run,
    Step,
    StoppedError,
    SupersededError,
    WaitError,
)
from agent.remediation.training_steps import TrainingSteps
from agent.remediation.verify import (
    Judgement,
    Observation,
    Outcome,
    VerifyPolicy,
    judge,
    judge_placement,
)
from agent.remediation.writer import ClusterWriter, WriteObserver
from agent.settings import RemediationSettings
from agent.sources.kubeapi import KubeApi
from agent.sources.prometheus import PrometheusSource
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

S = IncidentStatus
A = RemediationActionKind


class Verification:
    """The last steps of a run: every pod bound in the target zone, then the judge's verdict
    over `verify_window`; and the job's utilization (before, after) when Prometheus measures it."""

    def __init__(
        self,
        *,
        reader: ClusterReader,
        diagnose: Rediagnose,
        journal: Journal,
        policy: VerifyPolicy,
        clock: Clock,
        prometheus: PrometheusSource | None,
    ) -> None:
        self.reader = reader
        self.diagnose = diagnose
        self.journal = journal
        self.policy = policy
        self.clock = clock
        self.prometheus = prometheus

    def _metrics(self, ref: JobRef) -> bool:
        """Whether utilization is measured for this job: Prometheus configured and a Kubeflow
        kind (the per-job query groups GPUs by their pods' Kubeflow owner)."""
        return self.prometheus is not None and ref.kind is not JobKind.GROUP

    def _unmeasured(self, ref: JobRef) -> str:
        """Why the job's utilization is not measured (when `_metrics` says it is not)."""
        if self.prometheus is None:
            return "no metrics configured"
        return ("GPU utilization not measured for a generic group (the agent measures a "
                "Kubeflow job's GPUs by their pods' owner)")  # fmt: skip

    def utilization(
        self, run: Run, *, since: datetime | None = None
    ) -> tuple[float | None, float | None]:
        """The job's utilization, the latest sample taken since `since` (default: since its
        incident opened, so while split: never one from before, when the job may have been
        healthy or fixed), and its baseline."""
        ref = run.ref
        if self.prometheus is None or not self._metrics(ref):
            return None, None
        report = self.prometheus.fetch(self.clock.now())
        found = report.for_job(ref)
        if found is None:
            return None, None
        start = since if since is not None else run.detail.incident.opened_at
        return reading_since(found.samples, start), found.baseline

    def _job_pods(self, run: Run) -> list[dict[str, Any]]:
        if run.ref.kind is JobKind.GROUP:
            return self.reader.pods_named(run.ref.namespace, self.diagnose(run.ref).pods)
        return self.reader.kubeflow_pods(run.ref)

    def _expected(self, run: Run) -> int:
        return run.planned().members

    def _zone(self, run: Run) -> str:
        """Where the pods must land: the zone Kueue admitted a Kueue plan's job in (one the
        policies allow), else the plan's target zone."""
        admitted = run.step(Step.ADMITTED)
        zone = admitted.payload.get("zone") if admitted is not None else None
        return str(zone) if zone else run.planned().target_zone

    def wait_bound(self, run: Run) -> None:
        """Step 5b: every pod bound, all in the target zone, within `schedule_timeout`."""
        if run.has(Step.BOUND):
            return
        assert run.plan is not None
        resumed = run.step(Step.RESUMED)
        while True:
            nodes = self.reader.nodes()
            pods = observe_pods(self._job_pods(run), nodes)
            obs = Observation(target_zone=self._zone(run), expected_pods=self._expected(run),
                              pods=pods)  # fmt: skip
            verdict = judge_placement(obs, self.policy, elapsed=self.journal.since(resumed))
            if verdict.outcome is Outcome.VERIFIED:
                break
            if verdict.outcome is Outcome.FAILED:
                raise RollbackError(verdict.reason)
            self.journal.pause(run)
        self.journal.record(run, A.APPLY, Step.BOUND, message=verdict.reason)

    def verify(self, run: Run) -> IncidentStatus:
        """`verifying`: poll the judge within `verify_window`; `resolved`, or `RollbackError`."""
        assert run.plan is not None
        judged = run.step(Step.VERIFIED)
        if judged is not None:  # judged already (the process stopped before ending it)
            if judged.succeeded:
                return self.journal.end(run, S.RESOLVED, judged.message or "verified")
            raise RollbackError(f"verification failed: {judged.message}")
        started = [e for e in run.detail.events if e.kind is EventKind.VERIFYING]
        since = started[-1].at if started else self.clock.now()
        judgement: Judgement
        after: float | None = None
        while True:
            rediagnosis = self.diagnose(run.ref)
            nodes = self.reader.nodes()
            pods = observe_pods(self._job_pods(run), nodes)
            # after: measured since the verification started (the co-located job only)
            after, baseline = self.utilization(run, since=since)
            finding = rediagnosis.finding
            obs = Observation(
                target_zone=self._zone(run), expected_pods=self._expected(run), pods=pods,
                verdict=finding.verdict if finding is not None else None,
                denied_flows=finding.denied_flows_total if finding is not None else 0,
                metrics=self._metrics(run.ref), utilization_before=run.before,
                utilization_baseline=run.baseline if run.baseline is not None else baseline,
                utilization_after=after, unmeasured=self._unmeasured(run.ref),
            )  # fmt: skip
            judgement = judge(obs, self.policy, elapsed=self.clock.now() - since)
            if judgement.done:
                break
            self.journal.pause(run)
        figures = {"utilization_before": run.before, "utilization_after": after}
        if judgement.outcome is Outcome.VERIFIED:
            self.journal.record(run, A.VERIFY, Step.VERIFIED, message=judgement.reason,
                                extra=figures, utilization_after=after)  # fmt: skip
            return self.journal.end(run, S.RESOLVED, judgement.reason)
        self.journal.record(run, A.VERIFY, Step.VERIFIED, succeeded=False,
                            message=judgement.reason, extra=figures, utilization_after=after)  # fmt: skip
        raise RollbackError(f"verification failed: {judgement.reason}")

class Remediator:
    """Drives approved incidents to a terminal state (see the module docstring).

    `api`: the agent's `KubeApi` (reads; its `api_client` writes). `diagnose`: re-diagnoses one
    job from fresh cluster state. `prometheus`: optional, for utilization before/after.
    `leadership`: this replica's leadership terms; a run starts only while it leads, writes only
    in the term it started in, and once that term ends (checked before every write, after each
    recorded step and at each poll) `run` returns the incident's current status at once and the
    next leader resumes it. `protected_namespaces`: the guard settings now in force (with
    `settings.max_per_hour`), re-checked before the first write. `on_step`: called after each
    step is recorded; `on_write`: after each write the server accepted (tests kill the process
    there). `writer`: the cluster writer (default: one over `api.api_client` telling `on_write`).
    """

    def __init__(
        self,
        api: KubeApi,
        store: IncidentStore,
        *,
        diagnose: Rediagnose,
        settings: RemediationSettings,
        prometheus: PrometheusSource | None = None,
        clock: Clock | None = None,
        on_step: Callable[[Step], None] | None = None,
        on_write: WriteObserver | None = None,
        leadership: Leadership = SOLE_WRITER,
        protected_namespaces: Collection[str] = (),
        actor: str = "zonemedic",
        writer: ClusterWriter | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock or Clock()
        self.leadership = leadership
        self.actor = actor
        reader = ClusterReader(api)
        writer = writer or ClusterWriter(api.api_client, observer=on_write)
        self.journal = Journal(store, clock=self.clock, actor=actor,
                               poll_interval=settings.poll_interval, on_step=on_step)  # fmt: skip
        self.recheck = Recheck(reader, diagnose, store=store, clock=self.clock,
                               protected_namespaces=protected_namespaces,
                               max_per_hour=settings.max_per_hour, actor=actor)  # fmt: skip
        self.training = TrainingSteps(reader=reader, writer=writer, journal=self.journal,
                                      recheck=self.recheck, settings=settings, clock=self.clock)  # fmt: skip
        self.groups = GroupSteps(reader=reader, writer=writer, journal=self.journal,
                                 recheck=self.recheck, settings=settings, clock=self.clock)  # fmt: skip
        self.kueue = KueueSteps(reader=reader, writer=writer, journal=self.journal,
                                recheck=self.recheck, settings=settings, clock=self.clock)  # fmt: skip
        self.jobsets = JobSetSteps(reader=reader, writer=writer, journal=self.journal,
                                   recheck=self.recheck, settings=settings, clock=self.clock)  # fmt: skip
        policy = VerifyPolicy(
            schedule_timeout=settings.schedule_timeout,
            verify_window=settings.verify_window,
            recovery_fraction=settings.recovery_fraction,
        )
        self.verification = Verification(reader=reader, diagnose=diagnose, journal=self.journal,
                                         policy=policy, clock=self.clock, prometheus=prometheus)  # fmt: skip

    def _family(self, run: Run) -> TrainingSteps | GroupSteps | JobSetSteps | KueueSteps:
        """The steps of the run's workload family (its plan says how its job moves: a Kueue
        plan re-queues it through Kueue)."""
        if run.ref.kind is JobKind.GROUP:
            return self.groups
        if run.plan is not None and run.plan.kueue:
            return self.kueue
        return self.jobsets if JobSetSteps.owns(run) else self.training

    def _resume_as_is(self, run: Run) -> None:
        """After a failure: resume a training job left suspended, as it is; reactivate a Kueue
        job's Workload left deactivated."""
        self.training.resume_as_is(run)
        self.jobsets.resume_as_is(run)
        self.kueue.resume_as_is(run)

    def run(self, incident_id: int) -> IncidentStatus:
        """Drive one incident from `approved`, `remediating` or `verifying` to a terminal state
        (other statuses are returned as they are) and return where it ended."""
        detail = self.store.get_incident(incident_id)
        summary = detail.incident
        status = summary.status
        if status not in (S.APPROVED, S.REMEDIATING, S.VERIFYING):
            return status
        fence = open_fence(self.leadership)
        if fence is None:
            log.info("incident %s: this replica does not lead, not started", incident_id)
            return status
        ref = summary.job_ref
        if ref is None:
            return self.journal.end_early(incident_id, status, S.FAILED,
                                          f"unknown job kind {summary.kind!r}")  # fmt: skip
        run = Run(incident_id, ref, status, detail, fence)
        try:
            if status is S.APPROVED and not self._start(run):
                return run.status
            return self._drive(run)
        except (StoppedError, FenceClosedError) as exc:
            log.info("incident %s: no longer active, stopping at %s (%s)", incident_id,
                     run.status.value, exc or "leadership term ended")  # fmt: skip
            return run.status

    def _start(self, run: Run) -> bool:
        """`approved -> remediating` with the plan recorded; False when this run stops here
        (superseded, refused, or another executor won the transition and drives it)."""
        try:
            plan = self.recheck.plan(run, scope=Scope.INCIDENT)
        except SupersededError as exc:
            self.journal.end(run, S.SUPERSEDED, str(exc))
            return False
        except RefusedError as exc:
            self.journal.end(run, S.REFUSED, str(exc))
            return False
        except FailedError as exc:
            self.journal.end(run, S.FAILED, str(exc))
            return False
        before, baseline = self.verification.utilization(run)
        won = self.store.transition(
            run.incident_id, S.APPROVED, S.REMEDIATING, actor=self.actor, now=self.clock.now(),
            detail={"target_zone": plan.target_zone, "pods": plan.pods},
        )  # fmt: skip
        run.status = won.status
        if not won.applied:
            return False
        self.journal.record_plan(run, plan, before=before, baseline=baseline)
        return True

    def _load_plan(self, run: Run) -> None:
        """The recorded plan, or (died between `approved -> remediating` and recording it:
        nothing written yet) a new one, recorded."""
        planned = run.step(Step.PLANNED)
        if planned is None:
            plan = self.recheck.plan(run, scope=Scope.INCIDENT)
            before, baseline = self.verification.utilization(run)
            self.journal.record_plan(run, plan, before=before, baseline=baseline)
            return
        run.plan = Plan.from_dict(planned.payload["plan"])
        run.before = planned.payload.get("utilization_before")
        run.baseline = planned.payload.get("utilization_baseline")

    def _drive(self, run: Run) -> IncidentStatus:
        """`remediating` (apply, then every pod bound) and `verifying`, or the rollback a
        recorded rollback start resumes; ends the run as a step's outcome says."""
        try:
            self._load_plan(run)
            started = run.step(Step.ROLLBACK_STARTED)
            if started is not None:
                return self._rollback(run, started.message or "rollback")
            if run.status is S.REMEDIATING:
                try:
                    self._family(run).apply(run)
                except WaitError as exc:
                    return self.journal.wait_note(run, str(exc))
                self.verification.wait_bound(run)
                won = self.store.transition(
                    run.incident_id, S.REMEDIATING, S.VERIFYING, actor=self.actor,
                    now=self.clock.now(),
                )  # fmt: skip
                run.status = won.status
                if not won.applied:
                    return run.status
                self.journal.refresh(run)
            return self.verification.verify(run)
        except SupersededError as exc:
            return self.journal.end(run, S.SUPERSEDED, str(exc))
        except RefusedError as exc:  # before the first write: nothing written, nothing to resume
            return self.journal.end(run, S.REFUSED, str(exc))
        except FailedError as exc:
            self._resume_as_is(run)
            return self.journal.end(run, S.FAILED, str(exc))
        except RollbackError as exc:
            return self._rollback(run, str(exc))

    def _rollback(self, run: Run, reason: str) -> IncidentStatus:
        """Restore the original templates and resume; the incident ends `rolled_back`."""
        done = run.step(Step.ROLLED_BACK)
        if done is not None:  # restored already (the process stopped before ending it)
            return self.journal.end(run, S.ROLLED_BACK, (done.message or reason).removeprefix(
                "original templates restored: "))  # fmt: skip
        if not run.has(Step.ROLLBACK_STARTED):
            self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_STARTED, succeeded=None,
                                message=reason)  # fmt: skip
        try:
            notes = self._family(run).rollback(run)
        except SupersededError as exc:
            return self.journal.end(run, S.SUPERSEDED, f"{reason}; {exc}")
        except FailedError as exc:
            self._resume_as_is(run)
            return self.journal.end(run, S.FAILED, f"{reason}; rollback failed: {exc}")
        said = "; ".join([reason, *notes])
        self.journal.record(run, A.ROLLBACK, Step.ROLLED_BACK,
                            message=f"original templates restored: {said}")  # fmt: skip
        return self.journal.end(run, S.ROLLED_BACK, said)
