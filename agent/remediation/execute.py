"""Applying an approved remediation: the ONLY module that writes to the cluster.

Who calls it: the leader's executor loop (one `Remediator.run(incident_id)` per incident in
`approved`, `remediating` or `verifying`), tests and the benchmark. It reads through
`agent.remediation.observe`, plans with `agent.remediation.plan` and judges with
`agent.remediation.verify`; every write goes through `ClusterWriter` (official `kubernetes` client,
JSON merge patches with `application/merge-patch+json` set explicitly, `ApiException` wrapped into
`ClusterWriteError`/`WriteConflictError`, network and 5xx failures into `KubeApiError`).

The story of one incident (each step is a store action plus its timeline event):
- `approved`: re-diagnose and re-read the job; `superseded` when the job is gone or was recreated
  (uid), its verdict is no longer a split, or its placement differs from the incident's; `failed`
  with the plan's refusal (no room, Kueue-managed, finished...) -- in all three cases nothing was
  written. Else `approved -> remediating` (one winner among replicas) and the PLAN action records
  the plan (patches, restore patches, diff, utilization before) as JSON.
- Kubeflow jobs: (1) re-read the job and check uid, placement and verdict again (a job changed
  since the plan ends `remediating -> superseded`, nothing written); (2) server-side
  dry run of the patch; (3) ONE merge patch carrying `metadata.resourceVersion`,
  `runPolicy.suspend: true` and the new templates -- a 409 re-reads, re-plans and retries up to
  `max_conflict_retries` times; (4) wait for `Suspended=True` and no pod of the job left
  (Terminating included), within `suspend_timeout`; (5) patch `suspend: false`, wait until every
  pod is bound and all share the target zone, within `schedule_timeout`.
- Generic groups: the Deployment's template patch (a rollout), delete + recreate of each batch Job
  outside the zone (Foreground deletion, then create), then the same wait for the pods.
- `remediating -> verifying`: poll the pure judge (re-diagnosis, utilization) within
  `verify_window`; VERIFIED records utilization after and ends `resolved`.
- Rollback (pods unschedulable past the timeout, not co-located, pods that never went away,
  verification failed): restore the original templates from the recorded plan and resume (for a
  group: restore the Deployment template, recreate the Jobs from their original manifests); the
  incident ends `rolled_back` with the reason. A job is never left suspended. A Kubeflow job
  deleted or recreated (another uid) by its owner meanwhile leaves nothing to restore: the incident
  ends `superseded` with the reason.
- Crash safety: every decision is made from the store's record plus the live objects, so a fresh
  Remediator resumes at any step: the planned templates already on a suspended job mean the
  suspend landed; planned templates on a running job after a recorded suspend mean the restart
  happened (it is never done twice); a recorded rollback start resumes the rollback.

Errors: `UnavailableError` (the API or the database away) propagates with the incident left in its
state, to be resumed by a later run. What it does not do: decide approvals, guard rates or
namespaces (the decision side does), or run a loop of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, cast

from agent.errors import ClusterWriteError, WriteConflictError
from agent.model.cluster import JobKind
from agent.model.finding import REMEDIABLE_VERDICTS
from agent.model.incident import IncidentDetail, RemediationAction
from agent.model.job import JobRef
from agent.model.lifecycle import EventKind, IncidentStatus, RemediationActionKind
from agent.remediation.observe import (
    ClusterReader,
    Rediagnose,
    Rediagnosis,
    observe_pods,
)
from agent.remediation.plan import (
    LiveObjects,
    Plan,
    Refusal,
    Target,
    TargetAction,
    TemplateState,
    placement,
    plan_remediation,
)
from agent.remediation.verify import (
    Judgement,
    Observation,
    Outcome,
    VerifyPolicy,
    judge,
    judge_placement,
)
from agent.settings import RemediationSettings
from agent.sources.jobkey import JobKey
from agent.sources.kubeapi import KubeApi, KubeApiError
from agent.sources.prometheus import PrometheusSource
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

S = IncidentStatus
A = RemediationActionKind
MERGE_PATCH = "application/merge-patch+json"
FIELD_MANAGER = "zonemedic"


class Step(StrEnum):
    """The recorded steps (`payload.step` of the actions); `on_step` hears each once recorded."""

    PLANNED = "planned"
    DRY_RUN = "dry_run"
    SUSPENDED = "suspended"  # the merge patch (templates + suspend) is on the job
    PODS_GONE = "pods_gone"
    RESUMED = "resumed"  # suspend: false sent (a group: every workload moved)
    ROLLED_OUT = "rolled_out"  # a group's Deployment template patched
    JOB_DELETED = "job_deleted"  # a group's batch Job deleted for recreation
    JOB_CREATED = "job_created"  # ... and created with the patched template
    BOUND = "bound"
    VERIFIED = "verified"
    ROLLBACK_STARTED = "rollback_started"
    ROLLED_BACK = "rolled_back"


@dataclass(frozen=True)
class Clock:
    """Time as the executor sees it (tests and benchmarks pass their own)."""

    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    sleep: Callable[[float], None] = field(default=time.sleep)


class _FailedError(Exception):
    """End the incident `failed` with this reason."""


class _SupersededError(Exception):
    """End the incident `superseded` with this reason: the incident no longer applies to the job
    (gone, recreated, healed or moved since the plan, before anything was written to it; or
    deleted or recreated by its owner after a write, leaving nothing to restore)."""


class _RollbackError(Exception):
    """Restore the original templates and end `rolled_back` with this reason."""


class _StoppedError(Exception):
    """This process is no longer allowed to act (leadership lost): stop, record nothing more."""


# ------------------------------------------------------------------------------------------------
# the writer


def _server_message(exc: Any) -> str:
    import orjson

    body = getattr(exc, "body", None)
    if body:
        try:
            data = orjson.loads(body)
        except (orjson.JSONDecodeError, TypeError):
            data = None
        if isinstance(data, dict) and data.get("message"):
            return str(data["message"])
    return str(getattr(exc, "reason", "") or exc)


class ClusterWriter:
    """Every write zonemedic makes to a cluster: merge patches of Kubeflow jobs and Deployments,
    batch Job delete and create. Each takes `dry_run` (server-side, `dryRun=All`)."""

    def __init__(self, api_client: Any, *, timeout: float = 10.0) -> None:
        from kubernetes import client

        self._api_client = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self._apps = client.AppsV1Api(api_client)
        self._batch = client.BatchV1Api(api_client)
        self._timeout = timeout

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn()
        except ApiException as exc:
            status = int(exc.status or 0)
            message = _server_message(exc)
            if status == 409:
                raise WriteConflictError(status, message) from exc
            if 400 <= status < 500:
                raise ClusterWriteError(status, message) from exc
            raise KubeApiError(status, f"{what}: {message}") from exc
        except (HTTPError, OSError) as exc:
            raise KubeApiError(0, f"{what}: {type(exc).__name__}: {exc}") from exc

    def _dry(self, dry_run: bool) -> dict[str, Any]:
        return {"dry_run": "All"} if dry_run else {}

    def patch_custom(self, target: Target, patch: Mapping[str, Any], *, dry_run: bool = False) -> Any:
        return self._call(
            f"patch {target.kind} {target.namespace}/{target.name}",
            lambda: self._custom.patch_namespaced_custom_object(
                target.group, target.version, target.namespace, target.plural, target.name,
                dict(patch), field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH,
                _request_timeout=self._timeout, **self._dry(dry_run),
            ),
        )  # fmt: skip

    def patch_deployment(
        self, namespace: str, name: str, patch: Mapping[str, Any], *, dry_run: bool = False
    ) -> Any:
        return self._call(
            f"patch Deployment {namespace}/{name}",
            lambda: self._apps.patch_namespaced_deployment(
                name, namespace, dict(patch), field_manager=FIELD_MANAGER,
                _content_type=MERGE_PATCH, _request_timeout=self._timeout, **self._dry(dry_run),
            ),
        )  # fmt: skip

    def delete_job(self, namespace: str, name: str, *, dry_run: bool = False) -> None:
        """Delete a batch Job with Foreground propagation (its pods go first); gone is fine."""
        try:
            self._call(
                f"delete Job {namespace}/{name}",
                lambda: self._batch.delete_namespaced_job(
                    name, namespace, propagation_policy="Foreground",
                    _request_timeout=self._timeout, **self._dry(dry_run),
                ),
            )  # fmt: skip
        except ClusterWriteError as exc:
            if exc.status != 404:
                raise

    def create_job(
        self, namespace: str, manifest: Mapping[str, Any], *, dry_run: bool = False
    ) -> Any:
        return self._call(
            f"create Job {namespace}/{(manifest.get('metadata') or {}).get('name')}",
            lambda: self._batch.create_namespaced_job(
                namespace, cast(Any, dict(manifest)), field_manager=FIELD_MANAGER,
                _request_timeout=self._timeout, **self._dry(dry_run),
            ),
        )  # fmt: skip


# ------------------------------------------------------------------------------------------------
# the executor


def _kind(value: str) -> JobKind | None:
    try:
        return JobKind(value)
    except ValueError:
        return None


def _suspended(job: Mapping[str, Any]) -> bool:
    return bool(((job.get("spec") or {}).get("runPolicy") or {}).get("suspend"))


def _condition(job: Mapping[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _uid(obj: Mapping[str, Any] | None) -> str | None:
    return None if obj is None else (obj.get("metadata") or {}).get("uid")


def _rv(obj: Mapping[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


@dataclass
class _Run:
    """One incident being driven: its id, job, plan, status and what the store recorded."""

    incident_id: int
    ref: JobRef
    status: IncidentStatus
    detail: IncidentDetail
    plan: Plan | None = None
    before: float | None = None
    baseline: float | None = None

    def steps(self) -> list[RemediationAction]:
        return [a for a in self.detail.actions if a.payload.get("step")]

    def step(self, step: Step) -> RemediationAction | None:
        found = [a for a in self.detail.actions if a.payload.get("step") == step.value]
        return found[-1] if found else None

    def has(self, step: Step, *, target: str | None = None) -> bool:
        return any(
            a.payload.get("step") == step.value
            and (target is None or a.payload.get("target") == target)
            for a in self.detail.actions
        )


class Remediator:
    """Drives approved incidents to a terminal state (see the module docstring).

    `api`: the agent's `KubeApi` (reads; its `api_client` writes). `diagnose`: re-diagnoses one
    job from fresh cluster state. `prometheus`: optional, for utilization before/after.
    `on_step`: called after each step is recorded (tests kill the process there). `active`:
    asked after each recorded step and at each poll; once it answers False (the lease was lost)
    `run` returns the incident's current status at once and the next leader resumes it.
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
        active: Callable[[], bool] | None = None,
        actor: str = "zonemedic",
    ) -> None:
        self.reader = ClusterReader(api)
        self.writer = ClusterWriter(api.api_client)
        self.store = store
        self.diagnose = diagnose
        self.settings = settings
        self.prometheus = prometheus
        self.clock = clock or Clock()
        self.on_step = on_step
        self.active = active
        self.actor = actor
        self.policy = VerifyPolicy(
            schedule_timeout=settings.schedule_timeout,
            verify_window=settings.verify_window,
            recovery_fraction=settings.recovery_fraction,
        )

    # -- the entry point ----------------------------------------------------------------------

    def run(self, incident_id: int) -> IncidentStatus:
        """Drive one incident from `approved`, `remediating` or `verifying` to a terminal state
        (other statuses are returned as they are) and return where it ended."""
        detail = self.store.get_incident(incident_id)
        summary = detail.incident
        status = summary.status
        if status not in (S.APPROVED, S.REMEDIATING, S.VERIFYING):
            return status
        kind = _kind(summary.kind)
        if kind is None:
            return self._end_early(incident_id, status, S.FAILED, f"unknown job kind {summary.kind!r}")
        run = _Run(incident_id, JobRef(kind, summary.namespace, summary.name), status, detail)
        try:
            if status is S.APPROVED and not self._start(run):
                return run.status
            return self._drive(run)
        except _StoppedError:
            log.info("incident %s: no longer active, stopping at %s", incident_id, run.status.value)
            return run.status

    # -- store helpers ------------------------------------------------------------------------

    def _refresh(self, run: _Run) -> None:
        run.detail = self.store.get_incident(run.incident_id)

    def _record(
        self,
        run: _Run,
        kind: RemediationActionKind,
        step: Step,
        *,
        message: str | None = None,
        succeeded: bool | None = True,
        extra: Mapping[str, Any] | None = None,
        utilization_before: float | None = None,
        utilization_after: float | None = None,
    ) -> None:
        payload = {"step": step.value, **(extra or {})}
        self.store.record_action(
            run.incident_id, kind, now=self.clock.now(), actor=self.actor, succeeded=succeeded,
            payload=payload, message=message, utilization_before=utilization_before,
            utilization_after=utilization_after,
        )  # fmt: skip
        self._refresh(run)
        if self.on_step is not None:
            self.on_step(step)
        self._still_active()

    def _still_active(self) -> None:
        if self.active is not None and not self.active():
            raise _StoppedError

    def _end_early(
        self, incident_id: int, expected: IncidentStatus, new: IncidentStatus, reason: str
    ) -> IncidentStatus:
        result = self.store.transition(
            incident_id, expected, new, actor=self.actor, now=self.clock.now(),
            detail={"reason": reason},
        )  # fmt: skip
        if result.applied:
            log.info("incident %s %s: %s", incident_id, new.value, reason)
        return result.status

    def _end(self, run: _Run, new: IncidentStatus, reason: str) -> IncidentStatus:
        run.status = self._end_early(run.incident_id, run.status, new, reason)
        return run.status

    # -- approved: check, plan, start ---------------------------------------------------------

    def _live(self, run: _Run, rediagnosis: Rediagnosis, job: Mapping[str, Any] | None) -> LiveObjects:
        finding = rediagnosis.finding
        assert finding is not None
        return self.reader.live_objects(
            run.ref, target_zone=finding.target_zone, job=job, pod_names=rediagnosis.pods
        )

    def _superseded_reason(
        self, run: _Run, rediagnosis: Rediagnosis, job: Mapping[str, Any] | None
    ) -> str | None:
        summary = run.detail.incident
        finding = rediagnosis.finding
        if finding is None:
            return "the job has no live pods any more"
        if run.ref.kind is not JobKind.GROUP:
            if job is None:
                return f"{run.ref.kind} {run.ref.namespace}/{run.ref.name} is gone"
            if summary.uid and _uid(job) != summary.uid:
                return f"the job was recreated (uid {_uid(job)}, the incident is about {summary.uid})"
        if finding.verdict not in REMEDIABLE_VERDICTS:
            return f"the job is now {finding.verdict.value}"
        recorded = run.detail.diagnosis.get("zones")
        if isinstance(recorded, Mapping) and dict(recorded) != dict(finding.zones):
            return f"placement changed: was {dict(recorded)}, now {dict(finding.zones)}"
        return None

    def _metrics(self, ref: JobRef) -> bool:
        """Whether utilization is measured for this job: Prometheus configured and a Kubeflow
        kind (the per-job query groups GPUs by their pods' Kubeflow owner)."""
        return self.prometheus is not None and ref.kind is not JobKind.GROUP

    def _utilization(self, ref: JobRef) -> tuple[float | None, float | None]:
        if self.prometheus is None or not self._metrics(ref):
            return None, None
        report = self.prometheus.fetch(self.clock.now())
        found = report.for_job(JobKey(ref.kind.value, ref.namespace, ref.name))
        return (found.now, found.baseline) if found is not None else (None, None)

    def _job(self, ref: JobRef) -> dict[str, Any] | None:
        return None if ref.kind is JobKind.GROUP else self.reader.job(ref)

    def _start(self, run: _Run) -> bool:
        """`approved -> remediating` with the plan recorded; False when this run stops here
        (superseded, refused, or another executor won the transition and drives it)."""
        rediagnosis = self.diagnose(run.ref)
        job = self._job(run.ref)
        reason = self._superseded_reason(run, rediagnosis, job)
        if reason is not None:
            self._end(run, S.SUPERSEDED, reason)
            return False
        assert rediagnosis.finding is not None
        result = plan_remediation(
            rediagnosis.finding, self._live(run, rediagnosis, job), mirror_keys=rediagnosis.mirror_keys
        )
        if isinstance(result, Refusal):
            self._end(run, S.FAILED, result.reason)
            return False
        before, baseline = self._utilization(run.ref)
        won = self.store.transition(
            run.incident_id, S.APPROVED, S.REMEDIATING, actor=self.actor, now=self.clock.now(),
            detail={"target_zone": result.target_zone, "pods": result.pods},
        )  # fmt: skip
        run.status = won.status
        if not won.applied:
            return False
        self._record_plan(run, result, before=before, baseline=baseline)
        return True

    def _record_plan(
        self, run: _Run, plan: Plan, *, before: float | None, baseline: float | None
    ) -> None:
        summary = run.detail.incident
        before = summary.utilization_before if summary.utilization_before is not None else before
        self._record(
            run, A.PLAN, Step.PLANNED,
            message=f"co-locate {plan.pods} pod(s) in {plan.target_zone}",
            extra={"plan": plan.to_dict(), "utilization_before": before,
                   "utilization_baseline": baseline},
            utilization_before=before,
        )  # fmt: skip
        run.plan, run.before, run.baseline = plan, before, baseline

    def _load_plan(self, run: _Run) -> None:
        planned = run.step(Step.PLANNED)
        if planned is None:
            # died between `approved -> remediating` and recording the plan: nothing written yet
            rediagnosis = self.diagnose(run.ref)
            job = self._job(run.ref)
            reason = self._superseded_reason(run, rediagnosis, job)
            if reason is not None:
                raise _SupersededError(reason)
            assert rediagnosis.finding is not None
            result = plan_remediation(
                rediagnosis.finding, self._live(run, rediagnosis, job),
                mirror_keys=rediagnosis.mirror_keys,
            )  # fmt: skip
            if isinstance(result, Refusal):
                raise _FailedError(result.reason)
            before, baseline = self._utilization(run.ref)
            self._record_plan(run, result, before=before, baseline=baseline)
            return
        run.plan = Plan.from_dict(planned.payload["plan"])
        run.before = planned.payload.get("utilization_before")
        run.baseline = planned.payload.get("utilization_baseline")

    # -- remediating / verifying --------------------------------------------------------------

    def _drive(self, run: _Run) -> IncidentStatus:
        try:
            self._load_plan(run)
            started = run.step(Step.ROLLBACK_STARTED)
            if started is not None:
                return self._rollback(run, started.message or "rollback")
            if run.status is S.REMEDIATING:
                if run.ref.kind is JobKind.GROUP:
                    self._apply_group(run)
                else:
                    self._apply_kubeflow(run)
                self._wait_bound(run)
                won = self.store.transition(
                    run.incident_id, S.REMEDIATING, S.VERIFYING, actor=self.actor,
                    now=self.clock.now(),
                )  # fmt: skip
                run.status = won.status
                if not won.applied:
                    return run.status
                self._refresh(run)
            return self._verify(run)
        except _SupersededError as exc:
            return self._end(run, S.SUPERSEDED, str(exc))
        except _FailedError as exc:
            self._never_suspended(run)
            return self._end(run, S.FAILED, str(exc))
        except _RollbackError as exc:
            return self._rollback(run, str(exc))

    def _check_preconditions(self, run: _Run, job: Mapping[str, Any] | None) -> None:
        """Step 1: the job is the one planned, in the placement and with the verdict planned."""
        plan = run.plan
        assert plan is not None
        if plan.kubeflow and (job is None or _uid(job) != plan.preconditions.uid):
            raise _SupersededError("the job was deleted or recreated since the plan")
        rediagnosis = self.diagnose(run.ref)
        finding = rediagnosis.finding
        if finding is None or finding.verdict not in REMEDIABLE_VERDICTS:
            now = "gone" if finding is None else finding.verdict.value
            raise _SupersededError(f"the job is {now} since the plan")
        live = self._live(run, rediagnosis, job)
        where = placement(live.pods, live.nodes)
        if where != dict(plan.preconditions.placement):
            raise _SupersededError(
                f"placement changed since the plan ({dict(plan.preconditions.placement)} -> {where})"
            )

    def _replan(self, run: _Run) -> None:
        """After a 409: plan again from fresh objects and record the new plan."""
        rediagnosis = self.diagnose(run.ref)
        job = self._job(run.ref)
        if rediagnosis.finding is None:
            raise _SupersededError("the job has no live pods any more")
        result = plan_remediation(
            rediagnosis.finding, self._live(run, rediagnosis, job), mirror_keys=rediagnosis.mirror_keys
        )
        if isinstance(result, Refusal):
            raise _FailedError(result.reason)
        self._record_plan(run, result, before=run.before, baseline=run.baseline)

    def _kubeflow_target(self, run: _Run) -> Target:
        assert run.plan is not None
        (target,) = [t for t in run.plan.targets if t.action is TargetAction.SUSPEND_RESUME]
        return target

    def _apply_kubeflow(self, run: _Run) -> None:
        retries = self.settings.max_conflict_retries
        for attempt in range(retries + 1):
            plan = run.plan
            assert plan is not None
            target = self._kubeflow_target(run)
            job = self.reader.job(run.ref, api_version=target.api_version)
            suspended_recorded = run.has(Step.SUSPENDED)
            if job is None or _uid(job) != plan.preconditions.uid:
                raise _SupersededError(
                    "the job was deleted or recreated during remediation: nothing to restore"
                    if suspended_recorded
                    else "the job was deleted or recreated since the plan"
                )
            state = target.state_of(job)
            if state is TemplateState.PLANNED and (_suspended(job) or suspended_recorded):
                if not suspended_recorded:  # the patch landed; the process died before saying so
                    self._record(run, A.APPLY, Step.SUSPENDED, message="suspend patch found applied")
                break
            if suspended_recorded:
                raise _FailedError(
                    "the job's templates were changed by someone else during remediation"
                )
            self._check_preconditions(run, job)
            patch = plan.job_patch(resource_version=_rv(job), suspend=True)
            try:
                self.writer.patch_custom(target, patch, dry_run=True)
            except WriteConflictError:
                if attempt < retries:
                    self._replan(run)
                continue
            except ClusterWriteError as exc:
                self._record(run, A.DRY_RUN, Step.DRY_RUN, succeeded=False, message=exc.message)
                raise _FailedError(f"the server-side dry run refused the patch: {exc.message}") from None
            self._record(run, A.DRY_RUN, Step.DRY_RUN, message="dryRun=All accepted the patch")
            try:
                self.writer.patch_custom(target, patch)
            except WriteConflictError:
                if attempt < retries:
                    self._replan(run)
                continue
            except ClusterWriteError as exc:
                raise _FailedError(f"the API server refused the patch: {exc.message}") from None
            self._record(
                run, A.APPLY, Step.SUSPENDED,
                message=f"suspended with the new templates (resourceVersion {_rv(job)})",
                extra={"resource_version": _rv(job), "attempt": attempt + 1},
            )  # fmt: skip
            break
        else:
            raise _FailedError(
                f"the job kept changing: {retries + 1} conflicting write(s) (HTTP 409)"
            )
        self._wait_gone(run, target)
        self._resume(run, target)

    def _since(self, action: RemediationAction | None) -> timedelta:
        if action is None:
            return timedelta(0)
        return self.clock.now() - action.at

    def _pause(self) -> None:
        self._still_active()
        self.clock.sleep(self.settings.poll_interval.total_seconds())

    def _wait_gone(self, run: _Run, target: Target) -> None:
        """Step 4: Suspended=True and no pod of the job left, Terminating included."""
        if run.has(Step.PODS_GONE) or run.has(Step.RESUMED):
            return
        since = run.step(Step.SUSPENDED)
        while True:
            job = self.reader.job(run.ref, api_version=target.api_version)
            pods = self.reader.kubeflow_pods(run.ref)
            if job is not None and _condition(job, "Suspended") and not pods:
                break
            if self._since(since) >= self.settings.suspend_timeout:
                raise _RollbackError(
                    f"{len(pods)} pod(s) of the job still present "
                    f"{self.settings.suspend_timeout.total_seconds():g}s after the suspend"
                )
            self._pause()
        self._record(run, A.APPLY, Step.PODS_GONE, message="Suspended=True and no pod left")

    def _resume(self, run: _Run, target: Target) -> None:
        """Step 5a: `suspend: false` (pods come back from the new templates)."""
        if run.has(Step.RESUMED):
            return
        job = self.reader.job(run.ref, api_version=target.api_version)
        if job is not None and _suspended(job):
            try:
                self.writer.patch_custom(target, {"spec": {"runPolicy": {"suspend": False}}})
            except ClusterWriteError as exc:
                raise _RollbackError(f"the resume patch was refused: {exc.message}") from None
        self._record(run, A.APPLY, Step.RESUMED, message="resumed (suspend: false)")

    def _job_pods(self, run: _Run) -> list[dict[str, Any]]:
        if run.ref.kind is JobKind.GROUP:
            return self.reader.pods_named(run.ref.namespace, self.diagnose(run.ref).pods)
        return self.reader.kubeflow_pods(run.ref)

    def _expected(self, run: _Run) -> int:
        assert run.plan is not None
        if run.ref.kind is JobKind.GROUP:
            return len(run.plan.preconditions.placement)
        return run.plan.pods

    def _wait_bound(self, run: _Run) -> None:
        """Step 5b: every pod bound, all in the target zone, within `schedule_timeout`."""
        if run.has(Step.BOUND):
            return
        assert run.plan is not None
        resumed = run.step(Step.RESUMED)
        while True:
            nodes = self.reader.nodes()
            pods = observe_pods(self._job_pods(run), nodes)
            obs = Observation(target_zone=run.plan.target_zone, expected_pods=self._expected(run),
                              pods=pods)  # fmt: skip
            verdict = judge_placement(obs, self.policy, elapsed=self._since(resumed))
            if verdict.outcome is Outcome.VERIFIED:
                break
            if verdict.outcome is Outcome.FAILED:
                raise _RollbackError(verdict.reason)
            self._pause()
        self._record(run, A.APPLY, Step.BOUND, message=verdict.reason)

    def _verify(self, run: _Run) -> IncidentStatus:
        assert run.plan is not None
        started = [e for e in run.detail.events if e.kind is EventKind.VERIFYING]
        since = started[-1].at if started else self.clock.now()
        judgement: Judgement
        after: float | None = None
        while True:
            rediagnosis = self.diagnose(run.ref)
            nodes = self.reader.nodes()
            pods = observe_pods(self._job_pods(run), nodes)
            after, baseline = self._utilization(run.ref)
            finding = rediagnosis.finding
            obs = Observation(
                target_zone=run.plan.target_zone, expected_pods=self._expected(run), pods=pods,
                verdict=finding.verdict if finding is not None else None,
                denied_flows=finding.denied_flows_total if finding is not None else 0,
                metrics=self._metrics(run.ref), utilization_before=run.before,
                utilization_baseline=run.baseline if run.baseline is not None else baseline,
                utilization_after=after,
            )  # fmt: skip
            judgement = judge(obs, self.policy, elapsed=self.clock.now() - since)
            if judgement.done:
                break
            self._pause()
        figures = {"utilization_before": run.before, "utilization_after": after}
        if judgement.outcome is Outcome.VERIFIED:
            self._record(run, A.VERIFY, Step.VERIFIED, message=judgement.reason, extra=figures,
                         utilization_after=after)  # fmt: skip
            return self._end(run, S.RESOLVED, judgement.reason)
        self._record(run, A.VERIFY, Step.VERIFIED, succeeded=False, message=judgement.reason,
                     extra=figures, utilization_after=after)  # fmt: skip
        raise _RollbackError(f"verification failed: {judgement.reason}")

    # -- generic groups -----------------------------------------------------------------------

    def _workload(self, target: Target) -> dict[str, Any] | None:
        return self.reader.object(api_version=target.api_version, plural=target.plural,
                                  namespace=target.namespace, name=target.name)  # fmt: skip

    def _apply_group(self, run: _Run) -> None:
        if run.has(Step.RESUMED):
            return
        plan = run.plan
        assert plan is not None
        if not any(a.kind is A.APPLY for a in run.detail.actions):
            self._check_preconditions(run, None)
            self._dry_run_group(run, plan)
        for target in plan.targets:
            if target.action is TargetAction.ROLLOUT:
                self._roll_out(run, target, restore=False)
            else:
                self._recreate(run, target, restore=False)
        self._record(run, A.APPLY, Step.RESUMED, message="every workload outside the zone moved")

    def _dry_run_group(self, run: _Run, plan: Plan) -> None:
        try:
            for target in plan.targets:
                if target.action is TargetAction.ROLLOUT:
                    self.writer.patch_deployment(target.namespace, target.name,
                                                 target.template_patch(), dry_run=True)  # fmt: skip
                else:
                    self.writer.delete_job(target.namespace, target.name, dry_run=True)
        except ClusterWriteError as exc:
            self._record(run, A.DRY_RUN, Step.DRY_RUN, succeeded=False, message=exc.message)
            raise _FailedError(f"the server-side dry run refused a change: {exc.message}") from None
        self._record(run, A.DRY_RUN, Step.DRY_RUN, message="dryRun=All accepted every change")

    def _roll_out(self, run: _Run, target: Target, *, restore: bool) -> None:
        want = TemplateState.ORIGINAL if restore else TemplateState.PLANNED
        for _attempt in range(self.settings.max_conflict_retries + 1):
            obj = self._workload(target)
            if obj is None:
                raise _FailedError(f"Deployment {target.namespace}/{target.name} is gone")
            if target.state_of(obj) is want:
                return
            patch = target.template_patch(restore=restore)
            patch["metadata"] = {"resourceVersion": _rv(obj)}
            try:
                self.writer.patch_deployment(target.namespace, target.name, patch)
            except WriteConflictError:
                continue
            except ClusterWriteError as exc:
                raise _FailedError(f"the Deployment patch was refused: {exc.message}") from None
            if not restore:
                self._record(run, A.APPLY, Step.ROLLED_OUT, extra={"target": target.name},
                             message=f"Deployment {target.name}: template patched (rollout)")  # fmt: skip
            return
        raise _FailedError(f"Deployment {target.name} kept changing (HTTP 409)")

    def _recreate(self, run: _Run, target: Target, *, restore: bool) -> None:
        want = TemplateState.ORIGINAL if restore else TemplateState.PLANNED
        manifest = target.original if restore else target.manifest
        assert manifest is not None
        obj = self._workload(target)
        if obj is not None and target.state_of(obj) is want:
            return
        if obj is not None:
            self.writer.delete_job(target.namespace, target.name)
            if not restore:
                self._record(run, A.APPLY, Step.JOB_DELETED, extra={"target": target.name},
                             message=f"Job {target.name} deleted (Foreground) for recreation")  # fmt: skip
            deadline = self.clock.now() + self.settings.suspend_timeout
            while self._workload(target) is not None:
                if self.clock.now() >= deadline:
                    raise _RollbackError(f"Job {target.name} still present after its deletion")
                self._pause()
        try:
            self.writer.create_job(target.namespace, manifest)
        except WriteConflictError:
            pass  # created meanwhile (a previous attempt's answer was lost): state is checked later
        except ClusterWriteError as exc:
            raise _FailedError(f"creating Job {target.name} was refused: {exc.message}") from None
        if not restore:
            self._record(run, A.APPLY, Step.JOB_CREATED, extra={"target": target.name},
                         message=f"Job {target.name} recreated with the new template")  # fmt: skip

    # -- rollback -----------------------------------------------------------------------------

    def _never_suspended(self, run: _Run) -> None:
        """After a failure with the suspend applied: resume the job as it is."""
        if run.plan is None or not run.plan.kubeflow or not run.has(Step.SUSPENDED):
            return
        target = self._kubeflow_target(run)
        job = self.reader.job(run.ref, api_version=target.api_version)
        if job is not None and _suspended(job) and _uid(job) == run.plan.preconditions.uid:
            self.writer.patch_custom(target, {"spec": {"runPolicy": {"suspend": False}}})

    def _rollback(self, run: _Run, reason: str) -> IncidentStatus:
        """Restore the original templates and resume; the incident ends `rolled_back`."""
        if not run.has(Step.ROLLBACK_STARTED):
            self._record(run, A.ROLLBACK, Step.ROLLBACK_STARTED, succeeded=None, message=reason)
        try:
            if run.ref.kind is JobKind.GROUP:
                self._rollback_group(run)
            else:
                self._rollback_kubeflow(run)
        except _SupersededError as exc:
            return self._end(run, S.SUPERSEDED, f"{reason}; {exc}")
        except _FailedError as exc:
            self._never_suspended(run)
            return self._end(run, S.FAILED, f"{reason}; rollback failed: {exc}")
        self._record(run, A.ROLLBACK, Step.ROLLED_BACK, message=f"original templates restored: {reason}")
        return self._end(run, S.ROLLED_BACK, reason)

    def _rollback_kubeflow(self, run: _Run) -> None:
        plan = run.plan
        assert plan is not None
        target = self._kubeflow_target(run)
        for _attempt in range(self.settings.max_conflict_retries + 1):
            job = self.reader.job(run.ref, api_version=target.api_version)
            if job is None or _uid(job) != plan.preconditions.uid:
                raise _SupersededError("the job was deleted or recreated meanwhile: nothing to restore")
            if target.state_of(job) is TemplateState.ORIGINAL:
                # restored already (a previous attempt died after the patch): resume if needed
                suspended = _suspended(job)
                break
            patch = plan.job_patch(resource_version=_rv(job), suspend=True, restore=True)
            try:
                self.writer.patch_custom(target, patch)
            except WriteConflictError:
                continue
            except ClusterWriteError as exc:
                raise _FailedError(f"the restore patch was refused: {exc.message}") from None
            suspended = True
            break
        else:
            raise _FailedError("the job kept changing (HTTP 409) while restoring it")
        if suspended:
            deadline = self.clock.now() + self.settings.suspend_timeout
            while self.reader.kubeflow_pods(run.ref) and self.clock.now() < deadline:
                self._pause()
            self.writer.patch_custom(target, {"spec": {"runPolicy": {"suspend": False}}})

    def _rollback_group(self, run: _Run) -> None:
        plan = run.plan
        assert plan is not None
        for target in plan.targets:
            if target.action is TargetAction.ROLLOUT:
                self._roll_out(run, target, restore=True)
            else:
                self._recreate(run, target, restore=True)

