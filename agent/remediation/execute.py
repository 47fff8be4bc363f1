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
  the plan (patches, restore patches, diff, utilization before, the gang's size) as JSON.
- Right before the first write, from live objects and the settings now in force: the job is
  still the one planned, in the placement and with the verdict planned (else `superseded`), and
  every guard holds again (protected namespaces, Kueue on every object the plan writes and their
  pods, a Kubeflow job not finished: else `failed`; another remediation of the job in flight or
  the hourly cap reached: the run waits, nothing written, and is retried). Then the server-side
  dry run (`dryRun=All`) of every write the plan makes: patches, the DELETE of each batch Job to
  recreate and the CREATE of its planned and of its original manifest (the server answers the
  CREATE `AlreadyExists` only once every admission check passed, so a webhook's or a quota's
  refusal shows here). A refusal ends `failed` with nothing written.
- Kubeflow jobs: ONE merge patch carrying `metadata.uid`, `metadata.resourceVersion`,
  `runPolicy.suspend: true` and the new templates -- a 409 re-reads, re-plans and retries up to
  `max_conflict_retries` times; wait for `Suspended=True` and no pod of the job left (Terminating
  included), within `suspend_timeout`; patch `suspend: false`, wait until every pod is bound and
  all share the target zone, within `schedule_timeout`.
- Generic groups: the Deployment's template patch (a rollout; `metadata.uid` and
  `resourceVersion` fence it to the Deployment planned), then each batch Job to recreate: DELETE
  (Foreground, `preconditions.uid` and `resourceVersion` of the Job planned, as just read), wait
  until it is gone, CREATE from the plan (annotated `zonemedic.io/recreated-by` with the incident
  and which manifest it is); then the same wait for the pods. A CREATE the server refuses (an
  admission webhook, a quota) recreates the original and ends `rolled_back`.
- `remediating -> verifying`: poll the pure judge (re-diagnosis, the whole gang running,
  utilization) within `verify_window`; VERIFIED records utilization after and ends `resolved`.
- Rollback (pods unschedulable past the timeout, not co-located, pods that never went away, a
  write refused, an object changed by someone else, verification failed): restore the original
  templates from the recorded plan and resume (for a group: restore the Deployment template,
  delete the Jobs zonemedic created and recreate the originals); the incident ends `rolled_back`
  with the reason. A job is never left suspended. A Kubeflow job deleted or recreated (another
  uid) by its owner meanwhile leaves nothing to restore: the incident ends `superseded`.
- Crash safety: the intent of every destructive write (SUSPENDING, ROLLING_OUT, JOB_DELETING,
  RESTORING) is recorded before the write is sent, and every step is decided from the recorded
  plan plus the live objects, so a fresh Remediator resumes at any point, a write that landed but
  was not recorded included: planned templates on a suspended job mean the suspend landed; the
  planned template on the Deployment means it was patched; a planned Job that is missing means it
  was deleted (create it from the plan); a Job annotated as created from the plan means it was
  created; a recorded rollback start resumes the rollback. Once an intent is recorded the
  "nothing was written" checks are never run again.
- Fencing: every write is checked against this run's leadership term right before it is sent
  (`agent.remediation.fence`): a replica that lost the lease, or was paused past it, sends
  nothing more; a write already in flight is fenced by the object's uid and resourceVersion.

Errors: `UnavailableError` (the API or the database away) propagates with the incident left in its
state, to be resumed by a later run. What it does not do: decide approvals, or run a loop of its
own.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, cast

from agent.errors import ClusterWriteError, WriteConflictError
from agent.model.finding import REMEDIABLE_VERDICTS
from agent.model.incident import IncidentDetail, RemediationAction, reading_since
from agent.model.job import JobRef
from agent.model.lifecycle import EventKind, IncidentStatus, RemediationActionKind
from agent.model.workload import BATCH_JOB, DEPLOYMENT, REPLICA_SET, JobKind, workload
from agent.remediation.fence import SOLE_WRITER, Fence, FenceClosedError, Leadership, open_fence
from agent.remediation.guard import ClearanceKind, GuardInput, clear
from agent.remediation.observe import (
    ClusterReader,
    Rediagnose,
    Rediagnosis,
    is_terminating,
    observe_pods,
)
from agent.remediation.plan import (
    LiveObjects,
    Plan,
    Refusal,
    Target,
    TargetAction,
    TemplateState,
    guard_reason,
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
from agent.sources.kubeapi import KubeApi, KubeApiError
from agent.sources.prometheus import PrometheusSource
from agent.store.budget import remediations_started
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

S = IncidentStatus
A = RemediationActionKind
MERGE_PATCH = "application/merge-patch+json"
FIELD_MANAGER = "zonemedic"
# On a batch Job zonemedic created: `incident/<id>/planned` or `incident/<id>/original`.
RECREATED_ANNOTATION = "zonemedic.io/recreated-by"
_IN_FLIGHT = frozenset({S.REMEDIATING, S.VERIFYING})


class Step(StrEnum):
    """The recorded steps (`payload.step` of the actions); `on_step` hears each once recorded.
    The `-ing` steps are intents: recorded before a destructive write is sent."""

    PLANNED = "planned"
    DRY_RUN = "dry_run"
    SUSPENDING = "suspending"  # intent: the suspend patch (templates + suspend) is about to go
    SUSPENDED = "suspended"  # the merge patch (templates + suspend) is on the job
    PODS_GONE = "pods_gone"
    RESUMED = "resumed"  # suspend: false sent (a group: every workload moved)
    ROLLING_OUT = "rolling_out"  # intent: a group's Deployment template patch is about to go
    ROLLED_OUT = "rolled_out"  # a group's Deployment template patched
    JOB_DELETING = "job_deleting"  # intent: a group's batch Job is about to be deleted
    JOB_DELETED = "job_deleted"  # a group's batch Job deleted for recreation
    JOB_CREATED = "job_created"  # ... and created with the patched template
    BOUND = "bound"
    VERIFIED = "verified"
    ROLLBACK_STARTED = "rollback_started"
    RESTORING = "restoring"  # intent: a destructive write of the rollback is about to go
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


class _WaitError(Exception):
    """A guard says not yet (another remediation of the job in flight, the hourly cap): nothing
    was written; the incident stays `remediating` and a later run tries again."""


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


class WriteVerb(StrEnum):
    PATCH = "patch"
    DELETE = "delete"
    CREATE = "create"


@dataclass(frozen=True)
class Write:
    """One write the server answered with success (what a `WriteObserver` is told)."""

    verb: WriteVerb
    kind: str
    namespace: str
    name: str
    dry_run: bool


WriteObserver = Callable[[Write], None]


class ClusterWriter:
    """Every write zonemedic makes to a cluster: merge patches of Kubeflow jobs and Deployments,
    batch Job delete and create. Each takes `dry_run` (server-side, `dryRun=All`) and the run's
    `fence`, checked right before the request is sent (`FenceClosedError`: nothing sent).
    `observer` hears each write the server accepted, right after its answer."""

    def __init__(
        self, api_client: Any, *, timeout: float = 10.0, observer: WriteObserver | None = None
    ) -> None:
        from kubernetes import client

        self._api_client = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self._apps = client.AppsV1Api(api_client)
        self._batch = client.BatchV1Api(api_client)
        self._timeout = timeout
        self._observer = observer

    def _call(self, write: Write, fence: Fence, fn: Callable[[], Any]) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        what = f"{write.verb.value} {write.kind} {write.namespace}/{write.name}"
        fence.check(what)
        try:
            answer = fn()
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
        if self._observer is not None:
            self._observer(write)
        return answer

    def _dry(self, dry_run: bool) -> dict[str, Any]:
        return {"dry_run": "All"} if dry_run else {}

    def patch_custom(
        self, target: Target, patch: Mapping[str, Any], *, fence: Fence, dry_run: bool = False
    ) -> Any:
        return self._call(
            Write(WriteVerb.PATCH, target.kind, target.namespace, target.name, dry_run), fence,
            lambda: self._custom.patch_namespaced_custom_object(
                target.group, target.version, target.namespace, target.plural, target.name,
                dict(patch), field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH,
                _request_timeout=self._timeout, **self._dry(dry_run),
            ),
        )  # fmt: skip

    def patch_deployment(
        self, namespace: str, name: str, patch: Mapping[str, Any], *, fence: Fence,
        dry_run: bool = False,
    ) -> Any:  # fmt: skip
        return self._call(
            Write(WriteVerb.PATCH, DEPLOYMENT.kind, namespace, name, dry_run), fence,
            lambda: self._apps.patch_namespaced_deployment(
                name, namespace, dict(patch), field_manager=FIELD_MANAGER,
                _content_type=MERGE_PATCH, _request_timeout=self._timeout, **self._dry(dry_run),
            ),
        )  # fmt: skip

    def delete_job(
        self, namespace: str, name: str, *, uid: str | None, resource_version: str | None,
        fence: Fence, dry_run: bool = False,
    ) -> None:  # fmt: skip
        """Delete a batch Job with Foreground propagation (its pods go first), only if it is the
        object `uid` at `resource_version` (409 otherwise); gone is fine."""
        from kubernetes import client

        options = client.V1DeleteOptions(
            propagation_policy="Foreground",
            preconditions=client.V1Preconditions(uid=uid, resource_version=resource_version),
            dry_run=["All"] if dry_run else None,
        )
        try:
            self._call(
                Write(WriteVerb.DELETE, BATCH_JOB.kind, namespace, name, dry_run), fence,
                lambda: self._batch.delete_namespaced_job(
                    name, namespace, body=options, _request_timeout=self._timeout,
                    **self._dry(dry_run),
                ),
            )  # fmt: skip
        except ClusterWriteError as exc:
            if exc.status != 404:
                raise

    def create_job(
        self, namespace: str, manifest: Mapping[str, Any], *, fence: Fence, dry_run: bool = False
    ) -> Any:
        name = str((manifest.get("metadata") or {}).get("name"))
        return self._call(
            Write(WriteVerb.CREATE, BATCH_JOB.kind, namespace, name, dry_run), fence,
            lambda: self._batch.create_namespaced_job(
                namespace, cast(Any, dict(manifest)), field_manager=FIELD_MANAGER,
                _request_timeout=self._timeout, **self._dry(dry_run),
            ),
        )  # fmt: skip


# ------------------------------------------------------------------------------------------------
# the executor


def _suspended(job: Mapping[str, Any], kind: JobKind) -> bool:
    """The job says it is suspended (where its kind's descriptor keeps `suspend`)."""
    return workload(kind).suspension.suspended(job)


def _resume_patch(kind: JobKind) -> dict[str, Any]:
    return workload(kind).suspension.patch(False)


def _condition(job: Mapping[str, Any], kind: str | None) -> bool:
    """The condition `kind` is True on the job (no such condition: True, nothing to wait for)."""
    if kind is None:
        return True
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _uid(obj: Mapping[str, Any] | None) -> str | None:
    return None if obj is None else (obj.get("metadata") or {}).get("uid")


def _rv(obj: Mapping[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


def _fenced(patch: Mapping[str, Any], obj: Mapping[str, Any], *, locked: bool) -> dict[str, Any]:
    """`patch` bound to the live object `obj`: its uid (a 409 if the name now holds another
    object) and, when `locked`, the resourceVersion read (a 409 if it changed since)."""
    out = copy.deepcopy(dict(patch))
    meta: dict[str, Any] = {"uid": _uid(obj)}
    if locked:
        meta["resourceVersion"] = _rv(obj)
    out["metadata"] = {**(out.get("metadata") or {}), **meta}
    return out


def _stamp(obj: Mapping[str, Any] | None) -> str | None:
    if obj is None:
        return None
    found = ((obj.get("metadata") or {}).get("annotations") or {}).get(RECREATED_ANNOTATION)
    return str(found) if found is not None else None


@dataclass
class _Run:
    """One incident being driven: its id, job, plan, status, what the store recorded, and the
    leadership term it writes in."""

    incident_id: int
    ref: JobRef
    status: IncidentStatus
    detail: IncidentDetail
    fence: Fence
    plan: Plan | None = None
    before: float | None = None
    baseline: float | None = None

    def step(self, step: Step) -> RemediationAction | None:
        found = [a for a in self.detail.actions if a.payload.get("step") == step.value]
        return found[-1] if found else None

    def has(self, step: Step, *, target: str | None = None) -> bool:
        return any(
            a.payload.get("step") == step.value
            and (target is None or a.payload.get("target") == target)
            for a in self.detail.actions
        )

    def written(self) -> bool:
        """Whether a write may have been sent: an APPLY (an intent included) or a rollback."""
        return any(a.kind in (A.APPLY, A.ROLLBACK) for a in self.detail.actions)

    def stamp(self, state: TemplateState) -> str:
        """The annotation value of a Job this incident creates from the `state` manifest."""
        return f"incident/{self.incident_id}/{state.value}"


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
    there).
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
    ) -> None:
        self.reader = ClusterReader(api)
        self.writer = ClusterWriter(api.api_client, observer=on_write)
        self.store = store
        self.diagnose = diagnose
        self.settings = settings
        self.prometheus = prometheus
        self.clock = clock or Clock()
        self.on_step = on_step
        self.leadership = leadership
        self.protected = frozenset(protected_namespaces)
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
        fence = open_fence(self.leadership)
        if fence is None:
            log.info("incident %s: this replica does not lead, not started", incident_id)
            return status
        ref = summary.job_ref
        if ref is None:
            return self._end_early(incident_id, status, S.FAILED, f"unknown job kind {summary.kind!r}")
        run = _Run(incident_id, ref, status, detail, fence)
        try:
            if status is S.APPROVED and not self._start(run):
                return run.status
            return self._drive(run)
        except (_StoppedError, FenceClosedError) as exc:
            log.info("incident %s: no longer active, stopping at %s (%s)", incident_id,
                     run.status.value, exc or "leadership term ended")  # fmt: skip
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
        self._still_active(run)  # a replica whose term ended records nothing more either
        payload = {"step": step.value, **(extra or {})}
        self.store.record_action(
            run.incident_id, kind, now=self.clock.now(), actor=self.actor, succeeded=succeeded,
            payload=payload, message=message, utilization_before=utilization_before,
            utilization_after=utilization_after,
        )  # fmt: skip
        self._refresh(run)
        if self.on_step is not None:
            self.on_step(step)
        self._still_active(run)

    def _intend(
        self, run: _Run, step: Step, *, target: Target, obj: Mapping[str, Any] | None,
        message: str, write: str,
    ) -> None:  # fmt: skip
        """Record the intent of a destructive write to `obj` (its uid and resourceVersion now)
        before it is sent; an intent identical to the last one recorded is not repeated."""
        extra = {"target": target.name, "kind": target.kind, "write": write,
                 "uid": _uid(obj), "resource_version": None if obj is None else _rv(obj)}  # fmt: skip
        last = run.detail.actions[-1] if run.detail.actions else None
        if last is not None and dict(last.payload) == {"step": step.value, **extra}:
            return
        kind = A.ROLLBACK if step is Step.RESTORING else A.APPLY
        self._record(run, kind, step, succeeded=None, message=message, extra=extra)

    def _still_active(self, run: _Run) -> None:
        if not run.fence.holds():
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
        """End the incident `new`, only while this run's term holds: a replica whose term ended
        (its late write answered after another replica took over) ends nothing; the leader
        decides the incident from what it finds."""
        self._still_active(run)
        run.status = self._end_early(run.incident_id, run.status, new, reason)
        return run.status

    def _wait_note(self, run: _Run, reason: str) -> IncidentStatus:
        """Note on the timeline (once per reason) why the first write waits; stay as it is."""
        notes = [e for e in run.detail.events if e.kind is EventKind.NOTE]
        if not notes or notes[-1].detail.get("waiting") != reason:
            self.store.add_event(run.incident_id, EventKind.NOTE, now=self.clock.now(),
                                 actor=self.actor, detail={"waiting": reason})  # fmt: skip
        log.info("incident %s waits before its first write: %s", run.incident_id, reason)
        return run.status

    # -- approved: check, plan, start ---------------------------------------------------------

    def _live(self, run: _Run, rediagnosis: Rediagnosis, job: Mapping[str, Any] | None) -> LiveObjects:
        finding = rediagnosis.finding
        assert finding is not None
        return self.reader.live_objects(
            run.ref, target_zone=finding.target_zone, job=job, pod_names=rediagnosis.pods,
            finished_names=rediagnosis.finished,
        )  # fmt: skip

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

    def _unmeasured(self, ref: JobRef) -> str:
        """Why the job's utilization is not measured (when `_metrics` says it is not)."""
        if self.prometheus is None:
            return "no metrics configured"
        return ("GPU utilization not measured for a generic group (the agent measures a "
                "Kubeflow job's GPUs by their pods' owner)")  # fmt: skip

    def _utilization(self, run: _Run, *, since: datetime | None = None
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
        before, baseline = self._utilization(run)
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
            before, baseline = self._utilization(run)
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
                try:
                    if run.ref.kind is JobKind.GROUP:
                        self._apply_group(run)
                    else:
                        self._apply_kubeflow(run)
                except _WaitError as exc:
                    return self._wait_note(run, str(exc))
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

    def _check_preconditions(self, run: _Run, job: Mapping[str, Any] | None) -> LiveObjects:
        """Before the first write: the job is the one planned, in the placement and with the
        verdict planned; returns what was read."""
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
        return live

    def _written_objects(self, run: _Run, live: LiveObjects) -> list[Mapping[str, Any]]:
        """Every object the plan writes, as live now, and the pods they own (directly, or through
        a Deployment's ReplicaSets)."""
        plan = run.plan
        assert plan is not None
        if plan.kubeflow:
            return [o for o in (live.job, *live.pods) if o is not None]
        by_kind_name = {(str(w.get("kind")), str((w.get("metadata") or {}).get("name"))): w
                        for w in live.workloads}  # fmt: skip
        owners: dict[str, str] = {}  # uid of a written object or of its ReplicaSet -> target
        out: list[Mapping[str, Any]] = []
        for target in plan.targets:
            obj = by_kind_name.get((target.kind, target.name))
            if obj is None:
                continue
            out.append(obj)
            owners[str(_uid(obj))] = target.name
        for rs in live.workloads:
            if rs.get("kind") == REPLICA_SET.kind:
                refs = (rs.get("metadata") or {}).get("ownerReferences") or []
                if any(r.get("controller") and r.get("uid") in owners for r in refs):
                    out.append(rs)
                    owners[str(_uid(rs))] = "replicaset"
        for pod in [*live.pods, *live.finished_pods]:
            refs = (pod.get("metadata") or {}).get("ownerReferences") or []
            if any(r.get("controller") and r.get("uid") in owners for r in refs):
                out.append(pod)
        return out

    def _check_guards(self, run: _Run, live: LiveObjects) -> None:
        """Right before the first write, every guard again, from the live objects and the
        settings now in force: protected namespace, Kueue on every object written and their
        pods, a finished Kubeflow job (`failed`); another remediation of the job in flight, the
        hourly cap (`_WaitError`: nothing written, a later run tries again)."""
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
                objects=self._written_objects(run, live), busy=busy, started_last_hour=started,
            ),
            protected_namespaces=self.protected, max_per_hour=self.settings.max_per_hour,
        )  # fmt: skip
        if clearance.kind is ClearanceKind.REFUSE:
            raise _FailedError(f"{clearance.reason} (checked again before the first write)")
        if clearance.kind is ClearanceKind.WAIT:
            raise _WaitError(clearance.reason)
        if live.job is not None:
            finished = guard_reason(live.job, run.ref.kind)
            if finished is not None:
                raise _FailedError(f"{finished} (checked again before the first write)")

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
            if state is TemplateState.PLANNED and (_suspended(job, run.ref.kind) or suspended_recorded):
                if not suspended_recorded:  # the patch landed; the process died before saying so
                    self._record(run, A.APPLY, Step.SUSPENDED, message="suspend patch found applied")
                break
            if suspended_recorded:
                raise _FailedError(
                    "the job's templates were changed by someone else during remediation"
                )
            live = self._check_preconditions(run, job)
            self._check_guards(run, live)
            patch = _fenced(plan.job_patch(resource_version=_rv(job), suspend=True), job,
                            locked=True)  # fmt: skip
            try:
                self.writer.patch_custom(target, patch, fence=run.fence, dry_run=True)
            except WriteConflictError:
                if attempt < retries:
                    self._replan(run)
                continue
            except ClusterWriteError as exc:
                self._record(run, A.DRY_RUN, Step.DRY_RUN, succeeded=False, message=exc.message)
                raise _FailedError(f"the server-side dry run refused the patch: {exc.message}") from None
            self._record(run, A.DRY_RUN, Step.DRY_RUN, message="dryRun=All accepted the patch")
            self._intend(run, Step.SUSPENDING, target=target, obj=job, write="patch",
                         message="suspend patch with the new templates about to be sent")  # fmt: skip
            try:
                self.writer.patch_custom(target, patch, fence=run.fence)
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

    def _pause(self, run: _Run) -> None:
        self._still_active(run)
        self.clock.sleep(self.settings.poll_interval.total_seconds())

    def _wait_gone(self, run: _Run, target: Target) -> None:
        """Step 4: Suspended=True and no pod of the job left, Terminating included."""
        if run.has(Step.PODS_GONE) or run.has(Step.RESUMED):
            return
        since = run.step(Step.SUSPENDED)
        suspended_condition = workload(run.ref.kind).conditions.suspended
        while True:
            job = self.reader.job(run.ref, api_version=target.api_version)
            pods = self.reader.kubeflow_pods(run.ref)
            if job is not None and _condition(job, suspended_condition) and not pods:
                break
            if self._since(since) >= self.settings.suspend_timeout:
                raise _RollbackError(
                    f"{len(pods)} pod(s) of the job still present "
                    f"{self.settings.suspend_timeout.total_seconds():g}s after the suspend"
                )
            self._pause(run)
        self._record(run, A.APPLY, Step.PODS_GONE, message="Suspended=True and no pod left")

    def _resume(self, run: _Run, target: Target) -> None:
        """Step 5a: `suspend: false` (pods come back from the new templates)."""
        if run.has(Step.RESUMED):
            return
        job = self.reader.job(run.ref, api_version=target.api_version)
        if job is not None and _suspended(job, run.ref.kind):
            resume = _fenced(_resume_patch(run.ref.kind), job, locked=False)
            try:
                self.writer.patch_custom(target, resume, fence=run.fence)
            except ClusterWriteError as exc:
                raise _RollbackError(f"the resume patch was refused: {exc.message}") from None
        self._record(run, A.APPLY, Step.RESUMED, message="resumed (suspend: false)")

    def _job_pods(self, run: _Run) -> list[dict[str, Any]]:
        if run.ref.kind is JobKind.GROUP:
            return self.reader.pods_named(run.ref.namespace, self.diagnose(run.ref).pods)
        return self.reader.kubeflow_pods(run.ref)

    def _expected(self, run: _Run) -> int:
        assert run.plan is not None
        return run.plan.members

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
            self._pause(run)
        self._record(run, A.APPLY, Step.BOUND, message=verdict.reason)

    def _verify(self, run: _Run) -> IncidentStatus:
        assert run.plan is not None
        judged = run.step(Step.VERIFIED)
        if judged is not None:  # judged already (the process stopped before ending it)
            if judged.succeeded:
                return self._end(run, S.RESOLVED, judged.message or "verified")
            raise _RollbackError(f"verification failed: {judged.message}")
        started = [e for e in run.detail.events if e.kind is EventKind.VERIFYING]
        since = started[-1].at if started else self.clock.now()
        judgement: Judgement
        after: float | None = None
        while True:
            rediagnosis = self.diagnose(run.ref)
            nodes = self.reader.nodes()
            pods = observe_pods(self._job_pods(run), nodes)
            # after: measured since the verification started (the co-located job only)
            after, baseline = self._utilization(run, since=since)
            finding = rediagnosis.finding
            obs = Observation(
                target_zone=run.plan.target_zone, expected_pods=self._expected(run), pods=pods,
                verdict=finding.verdict if finding is not None else None,
                denied_flows=finding.denied_flows_total if finding is not None else 0,
                metrics=self._metrics(run.ref), utilization_before=run.before,
                utilization_baseline=run.baseline if run.baseline is not None else baseline,
                utilization_after=after, unmeasured=self._unmeasured(run.ref),
            )  # fmt: skip
            judgement = judge(obs, self.policy, elapsed=self.clock.now() - since)
            if judgement.done:
                break
            self._pause(run)
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
        if not run.written():
            live = self._check_preconditions(run, None)
            self._check_guards(run, live)
            self._dry_run_group(run, plan)
        for target in plan.targets:
            if target.action is TargetAction.ROLLOUT:
                self._roll_out(run, target, restore=False)
            else:
                self._recreate(run, target, restore=False)
        self._record(run, A.APPLY, Step.RESUMED, message="every workload outside the zone moved")

    def _changed(self, run: _Run, what: str) -> Exception:
        """An object of the plan changed under the remediation: `superseded` while nothing was
        written yet, else a rollback of what was."""
        if not run.written():
            return _SupersededError(f"{what} since the plan")
        return _RollbackError(f"{what} during the remediation")

    def _stamped(self, run: _Run, target: Target, state: TemplateState) -> dict[str, Any]:
        """The Job to create from the plan (`state` PLANNED) or the original manifest, annotated
        with the incident and which of the two it is."""
        manifest = target.manifest if state is TemplateState.PLANNED else target.original
        assert manifest is not None
        out = copy.deepcopy(dict(manifest))
        meta = out.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}),
                               RECREATED_ANNOTATION: run.stamp(state)}  # fmt: skip
        return out

    def _dry_run_group(self, run: _Run, plan: Plan) -> None:
        """Every write the plan makes, server-side dry run: each Deployment patch; each Job's
        DELETE and the CREATE of its planned and of its original manifest (`AlreadyExists` while
        the Job to replace holds the name means every admission check passed)."""
        fence = run.fence
        try:
            for target in plan.targets:
                obj = self._workload(target)
                if obj is None or _uid(obj) != target.uid:
                    raise _SupersededError(
                        f"{target.kind} {target.name} was deleted or recreated since the plan"
                    )
                if target.action is TargetAction.ROLLOUT:
                    patch = _fenced(target.template_patch(), obj, locked=False)
                    self.writer.patch_deployment(target.namespace, target.name, patch,
                                                 fence=fence, dry_run=True)  # fmt: skip
                    continue
                # a 409 on the DELETE: changed since read (a status write), the delete re-reads;
                # on a CREATE: AlreadyExists, admitted; only the name is taken (the Job to replace)
                with contextlib.suppress(WriteConflictError):
                    self.writer.delete_job(target.namespace, target.name, uid=target.uid,
                                           resource_version=_rv(obj), fence=fence, dry_run=True)  # fmt: skip
                for state in (TemplateState.PLANNED, TemplateState.ORIGINAL):
                    with contextlib.suppress(WriteConflictError):
                        self.writer.create_job(target.namespace, self._stamped(run, target, state),
                                               fence=fence, dry_run=True)  # fmt: skip
        except ClusterWriteError as exc:
            self._record(run, A.DRY_RUN, Step.DRY_RUN, succeeded=False, message=exc.message)
            raise _FailedError(f"the server-side dry run refused a change: {exc.message}") from None
        self._record(run, A.DRY_RUN, Step.DRY_RUN, message="dryRun=All accepted every change")

    def _roll_out(self, run: _Run, target: Target, *, restore: bool) -> str | None:
        """Bring the Deployment's template to the planned (or, restoring, the original) one;
        idempotent from the live template. Restoring returns a note when there was nothing it
        could restore."""
        want = TemplateState.ORIGINAL if restore else TemplateState.PLANNED
        where = f"Deployment {target.namespace}/{target.name}"
        fail = _FailedError if restore else _RollbackError
        for _attempt in range(self.settings.max_conflict_retries + 1):
            obj = self._workload(target)
            if obj is None or _uid(obj) != target.uid:
                if restore:
                    return f"{where} was deleted or recreated by its owner: nothing to restore"
                raise self._changed(run, f"{where} was deleted or recreated")
            state = target.state_of(obj)
            if state is want:
                if not restore and not run.has(Step.ROLLED_OUT, target=target.name):
                    self._record(run, A.APPLY, Step.ROLLED_OUT, extra={"target": target.name},
                                 message=f"Deployment {target.name}: planned template found on it")  # fmt: skip
                return None
            if state is TemplateState.OTHER:
                if restore:
                    return f"{where}: its template was changed by someone else; left as it is"
                raise self._changed(run, f"{where}: its template was changed by someone else")
            step = Step.RESTORING if restore else Step.ROLLING_OUT
            self._intend(run, step, target=target, obj=obj, write="patch",
                         message=f"{where}: template patch about to be sent")  # fmt: skip
            patch = _fenced(target.template_patch(restore=restore), obj, locked=True)
            try:
                self.writer.patch_deployment(target.namespace, target.name, patch, fence=run.fence)
            except WriteConflictError:
                continue
            except ClusterWriteError as exc:
                raise fail(f"the patch of {where} was refused: {exc.message}") from None
            if not restore:
                self._record(run, A.APPLY, Step.ROLLED_OUT, extra={"target": target.name},
                             message=f"Deployment {target.name}: template patched (rollout)")  # fmt: skip
            return None
        raise fail(f"{where} kept changing (HTTP 409)")

    def _recreate(self, run: _Run, target: Target, *, restore: bool) -> str | None:
        """Bring the batch Job to one created from the plan (or, restoring, the original Job or
        one created from its manifest); idempotent from the live object: the Job planned (its
        uid) is deleted, one being deleted is waited for, a missing one is created, one carrying
        this incident's annotation is ours. Restoring returns a note when there was nothing it
        could restore."""
        want = TemplateState.ORIGINAL if restore else TemplateState.PLANNED
        where = f"Job {target.namespace}/{target.name}"
        fail = _FailedError if restore else _RollbackError
        deadline = self.clock.now() + self.settings.suspend_timeout
        conflicts = 0
        while True:
            obj = self._workload(target)
            stamp = _stamp(obj)
            gone = obj is None or (is_terminating(obj) and _uid(obj) == target.uid)
            if (gone and not restore and run.has(Step.JOB_DELETING, target=target.name)
                    and not run.has(Step.JOB_DELETED, target=target.name)):  # fmt: skip
                self._record(run, A.APPLY, Step.JOB_DELETED, extra={"target": target.name, "uid": target.uid},
                             message=f"Job {target.name}: found deleted (its deletion landed unrecorded)")  # fmt: skip
            if obj is None:
                try:
                    self.writer.create_job(target.namespace, self._stamped(run, target, want),
                                           fence=run.fence)  # fmt: skip
                except WriteConflictError:
                    conflicts += 1  # created meanwhile: look again
                    if conflicts > self.settings.max_conflict_retries:
                        raise fail(f"{where} kept reappearing (HTTP 409)") from None
                    continue
                except ClusterWriteError as exc:
                    if restore:
                        raise _FailedError(
                            f"recreating {where} from its original manifest (recorded in the "
                            f"plan) was refused: {exc.message}"
                        ) from None
                    raise _RollbackError(f"creating {where} was refused: {exc.message}") from None
                if not restore:
                    self._record(run, A.APPLY, Step.JOB_CREATED, extra={"target": target.name},
                                 message=f"Job {target.name} recreated with the new template")  # fmt: skip
                return None
            if is_terminating(obj):
                if self.clock.now() >= deadline:
                    raise fail(f"{where} still present "
                               f"{self.settings.suspend_timeout.total_seconds():g}s after its deletion")  # fmt: skip
                self._pause(run)
                continue
            if stamp == run.stamp(want) or (restore and _uid(obj) == target.uid):
                if not restore and not run.has(Step.JOB_CREATED, target=target.name):
                    self._record(run, A.APPLY, Step.JOB_CREATED, extra={"target": target.name},
                                 message=f"Job {target.name}: the one created from the plan found")  # fmt: skip
                return None
            ours = stamp == run.stamp(TemplateState.PLANNED) if restore else _uid(obj) == target.uid
            if not ours:
                if restore:
                    return f"{where} was replaced by someone else (uid {_uid(obj)}); left as it is"
                raise self._changed(run, f"{where} was replaced by someone else (uid {_uid(obj)})")
            step = Step.RESTORING if restore else Step.JOB_DELETING
            self._intend(run, step, target=target, obj=obj, write="delete",
                         message=f"{where}: Foreground deletion about to be sent")  # fmt: skip
            try:
                self.writer.delete_job(target.namespace, target.name, uid=_uid(obj),
                                       resource_version=_rv(obj), fence=run.fence)  # fmt: skip
            except WriteConflictError:
                conflicts += 1  # changed since read (or replaced): look again
                if conflicts > self.settings.max_conflict_retries:
                    raise fail(f"{where} kept changing (HTTP 409)") from None
                continue
            except ClusterWriteError as exc:
                raise fail(f"deleting {where} was refused: {exc.message}") from None
            if not restore:
                self._record(run, A.APPLY, Step.JOB_DELETED,
                             extra={"target": target.name, "uid": _uid(obj)},
                             message=f"Job {target.name} deleted (Foreground) for recreation")  # fmt: skip

    # -- rollback -----------------------------------------------------------------------------

    def _never_suspended(self, run: _Run) -> None:
        """After a failure with the suspend applied: resume the job as it is."""
        if run.plan is None or not run.plan.kubeflow or not run.has(Step.SUSPENDED):
            return
        target = self._kubeflow_target(run)
        job = self.reader.job(run.ref, api_version=target.api_version)
        if job is not None and _suspended(job, run.ref.kind) and _uid(job) == run.plan.preconditions.uid:
            resume = _fenced(_resume_patch(run.ref.kind), job, locked=False)
            self.writer.patch_custom(target, resume, fence=run.fence)

    def _rollback(self, run: _Run, reason: str) -> IncidentStatus:
        """Restore the original templates and resume; the incident ends `rolled_back`."""
        done = run.step(Step.ROLLED_BACK)
        if done is not None:  # restored already (the process stopped before ending it)
            return self._end(run, S.ROLLED_BACK, (done.message or reason).removeprefix(
                "original templates restored: "))  # fmt: skip
        if not run.has(Step.ROLLBACK_STARTED):
            self._record(run, A.ROLLBACK, Step.ROLLBACK_STARTED, succeeded=None, message=reason)
        notes: list[str] = []
        try:
            if run.ref.kind is JobKind.GROUP:
                notes = self._rollback_group(run)
            else:
                self._rollback_kubeflow(run)
        except _SupersededError as exc:
            return self._end(run, S.SUPERSEDED, f"{reason}; {exc}")
        except _FailedError as exc:
            self._never_suspended(run)
            return self._end(run, S.FAILED, f"{reason}; rollback failed: {exc}")
        said = "; ".join([reason, *notes])
        self._record(run, A.ROLLBACK, Step.ROLLED_BACK, message=f"original templates restored: {said}")
        return self._end(run, S.ROLLED_BACK, said)

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
                suspended = _suspended(job, run.ref.kind)
                break
            self._intend(run, Step.RESTORING, target=target, obj=job, write="patch",
                         message="restore patch (original templates, suspended) about to be sent")  # fmt: skip
            patch = _fenced(plan.job_patch(resource_version=_rv(job), suspend=True, restore=True),
                            job, locked=True)  # fmt: skip
            try:
                self.writer.patch_custom(target, patch, fence=run.fence)
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
                self._pause(run)
            resume = _fenced(_resume_patch(run.ref.kind), job, locked=False)
            self.writer.patch_custom(target, resume, fence=run.fence)

    def _rollback_group(self, run: _Run) -> list[str]:
        """Restore every target (the last one written first); the notes say what could not be."""
        plan = run.plan
        assert plan is not None
        notes: list[str] = []
        for target in reversed(plan.targets):
            if target.action is TargetAction.ROLLOUT:
                note = self._roll_out(run, target, restore=True)
            else:
                note = self._recreate(run, target, restore=True)
            if note is not None:
                notes.append(note)
        return notes
