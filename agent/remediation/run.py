"""One remediation run as the store records it: its steps, its state, its journal, how it ends.

Who uses it: `agent.remediation.remediator.Remediator` opens a `Run` per incident it drives and
ends it; the steps it hands the run to (`agent.remediation.recheck`, the families'
`agent.remediation.training_steps` and `agent.remediation.group_steps`) record through the same
`Journal` and end a run by raising one of the outcomes below. What it does: names the recorded
steps (`Step`, the `payload.step` of the incident's remediation actions; the `-ing` steps are
intents, recorded before a destructive write is sent), keeps what one run knows (`Run`: the
incident, its job, its plan, what the store recorded, the leadership term it writes in) and
records actions, intents, the plan, timeline notes and the final transition on the incident
(`Journal`). Resumption reads the same records: every step is decided from the recorded plan plus
the live objects, so a fresh run resumes at any point.

What it does not do: read or write the cluster, plan, or decide which step comes next.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from agent.model.incident import IncidentDetail, RemediationAction
from agent.model.job import JobRef
from agent.model.lifecycle import EventKind, IncidentStatus, RemediationActionKind
from agent.remediation.fence import Fence
from agent.remediation.plan import Plan, Target
from agent.remediation.template import TemplateState
from agent.remediation.writer import resource_version_of, uid_of
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

A = RemediationActionKind
# a server-side dry run answered 409: the object changed since it was read; the step reads it
# again and plans anew (recorded, so the timeline says why the fix took several tries)
DRY_RUN_CONFLICT = "the job changed since it was read (HTTP 409 Conflict): read again and planned anew"


class Step(StrEnum):
    """The recorded steps (`payload.step` of the actions); `on_step` hears each once recorded.
    The `-ing` steps are intents: recorded before a destructive write is sent."""

    PLANNED = "planned"
    DRY_RUN = "dry_run"
    SUSPENDING = "suspending"  # intent: the suspend patch (a Kubeflow job's: with the templates) is about to go
    SUSPENDED = "suspended"  # the suspend patch is on the job
    PODS_GONE = "pods_gone"
    PATCHING = "patching"  # intent: a TrainJob's or JobSet's template patch (after the suspend) is about to go
    PATCHED = "patched"  # ... and it is on the object (with the resume, where one request does both)
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
    DEACTIVATING = "deactivating"  # intent: a Kueue Workload's `spec.active: false` is about to go
    DEACTIVATED = "deactivated"  # Kueue evicts the Workload and suspends the job
    ANNOTATING = "annotating"  # intent: a Kueue job's template annotations are about to go
    ANNOTATED = "annotated"  # the job's templates carry the zone-level request
    # intent: a Kueue JobSet's (or TrainJob's) suspended child Job keeping Kueue's old marks is
    # about to be deleted (its JobSet creates it again from the annotated template)
    RENEWING = "renewing"
    RENEWED = "renewed"  # no child Job keeps Kueue's old marks
    REQUEUING = "requeuing"  # intent: the deactivated Workload is about to be deleted
    ADMITTED = "admitted"  # Kueue admitted the rebuilt Workload in one allowed zone
    # the rollback's steps, each recorded once done so a fresh run resumes the rollback at the
    # first one not recorded (every family: `agent.remediation.kueue_rollback`, the training,
    # JobSet and group steps)
    ROLLBACK_REACTIVATED = "rollback_reactivated"  # Kueue: only the deactivation was written: undone
    ROLLBACK_DEACTIVATED = "rollback_deactivated"  # Kueue: the job's current Workload inactive (its uid)
    ROLLBACK_PODS_GONE = "rollback_pods_gone"  # suspended (again), no pod left
    ROLLBACK_RESTORED = "rollback_restored"  # the job's own templates back (a group: per target)
    ROLLBACK_RENEWED = "rollback_renewed"  # no child Job keeps a value of the plan
    ROLLBACK_REQUEUED = "rollback_requeued"  # Kueue: that Workload deleted, rebuilt as before
    ROLLED_BACK = "rolled_back"


@dataclass(frozen=True)
class Clock:
    """Time as the executor sees it (tests and benchmarks pass their own)."""

    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    sleep: Callable[[float], None] = field(default=time.sleep)


# -- how a run ends early (raised by any step, handled by the Remediator) ----------------------


class FailedError(Exception):
    """End the incident `failed` with this reason."""


class RefusedError(FailedError):
    """End the incident `refused` with this reason: a guard or the plan refused the approved fix
    before anything was written (protected namespace, Kueue-managed, finished, no room); the
    problem is still there and the incident stays open as the job's one incident."""


class SupersededError(Exception):
    """End the incident `superseded` with this reason: the incident no longer applies to the job
    (gone, recreated, healed or moved since the plan, before anything was written to it; or
    deleted or recreated by its owner after a write, leaving nothing to restore)."""


class RollbackError(Exception):
    """Restore the original templates and end `rolled_back` with this reason."""


class StoppedError(Exception):
    """This process is no longer allowed to act (leadership lost): stop, record nothing more."""


class WaitError(Exception):
    """A guard says not yet (another remediation of the job in flight, the hourly cap): nothing
    was written; the incident stays `remediating` and a later run tries again."""


@dataclass
class Run:
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

    def planned(self) -> Plan:
        """The plan being applied (loaded or recorded before any step that applies it)."""
        assert self.plan is not None, "the plan is loaded before it is applied"
        return self.plan


def changed(run: Run, what: str) -> Exception:
    """An object of the plan changed under the remediation: `superseded` while nothing was
    written yet, else a rollback of what was."""
    if not run.written():
        return SupersededError(f"{what} since the plan")
    return RollbackError(f"{what} during the remediation")


class Journal:
    """What a run records on its incident, and its pace: every record first checks that the
    run's leadership term still holds (`StoppedError` otherwise), then re-reads the incident and
    tells `on_step`. `poll_interval`: the wait between two looks at the cluster."""

    def __init__(
        self,
        store: IncidentStore,
        *,
        clock: Clock,
        actor: str,
        poll_interval: timedelta,
        on_step: Callable[[Step], None] | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.actor = actor
        self.poll_interval = poll_interval
        self.on_step = on_step

    def refresh(self, run: Run) -> None:
        run.detail = self.store.get_incident(run.incident_id)

    def record(
        self,
        run: Run,
        kind: RemediationActionKind,
        step: Step,
        *,
        message: str | None = None,
        succeeded: bool | None = True,
        extra: Mapping[str, Any] | None = None,
        utilization_before: float | None = None,
        utilization_after: float | None = None,
    ) -> None:
        self.still_active(run)  # a replica whose term ended records nothing more either
        payload = {"step": step.value, **(extra or {})}
        self.store.record_action(
            run.incident_id, kind, now=self.clock.now(), actor=self.actor, succeeded=succeeded,
            payload=payload, message=message, utilization_before=utilization_before,
            utilization_after=utilization_after,
        )  # fmt: skip
        self.refresh(run)
        if self.on_step is not None:
            self.on_step(step)
        self.still_active(run)

    def intend(
        self, run: Run, step: Step, *, target: Target, obj: Mapping[str, Any] | None,
        message: str, write: str,
    ) -> None:  # fmt: skip
        """Record the intent of a destructive write to `obj` (its uid and resourceVersion now)
        before it is sent; an intent identical to the last one recorded is not repeated."""
        extra = {"target": target.name, "kind": target.kind, "write": write,
                 "uid": uid_of(obj), "resource_version": None if obj is None else resource_version_of(obj)}  # fmt: skip
        last = run.detail.actions[-1] if run.detail.actions else None
        if last is not None and dict(last.payload) == {"step": step.value, **extra}:
            return
        kind = A.ROLLBACK if step is Step.RESTORING else A.APPLY
        self.record(run, kind, step, succeeded=None, message=message, extra=extra)

    def record_plan(
        self, run: Run, plan: Plan, *, before: float | None, baseline: float | None
    ) -> None:
        """Record the plan the run applies (with the utilization before and its baseline) and
        make it the run's."""
        summary = run.detail.incident
        before = summary.utilization_before if summary.utilization_before is not None else before
        self.record(
            run, A.PLAN, Step.PLANNED,
            message=f"co-locate {plan.pods} pod(s) in {plan.target_zone}",
            extra={"plan": plan.to_dict(), "utilization_before": before,
                   "utilization_baseline": baseline},
            utilization_before=before,
        )  # fmt: skip
        run.plan, run.before, run.baseline = plan, before, baseline

    def still_active(self, run: Run) -> None:
        if not run.fence.holds():
            raise StoppedError

    def end_early(
        self, incident_id: int, expected: IncidentStatus, new: IncidentStatus, reason: str
    ) -> IncidentStatus:
        result = self.store.transition(
            incident_id, expected, new, actor=self.actor, now=self.clock.now(),
            detail={"reason": reason},
        )  # fmt: skip
        if result.applied:
            log.info("incident %s %s: %s", incident_id, new.value, reason)
        return result.status

    def end(self, run: Run, new: IncidentStatus, reason: str) -> IncidentStatus:
        """End the incident `new`, only while this run's term holds: a replica whose term ended
        (its late write answered after another replica took over) ends nothing; the leader
        decides the incident from what it finds."""
        self.still_active(run)
        run.status = self.end_early(run.incident_id, run.status, new, reason)
        return run.status

    def wait_note(self, run: Run, reason: str) -> IncidentStatus:
        """Note on the timeline (once per reason) why the first write waits; stay as it is."""
        notes = [e for e in run.detail.events if e.kind is EventKind.NOTE]
        if not notes or notes[-1].detail.get("waiting") != reason:
            self.store.add_event(run.incident_id, EventKind.NOTE, now=self.clock.now(),
                                 actor=self.actor, detail={"waiting": reason})  # fmt: skip
        log.info("incident %s waits before its first write: %s", run.incident_id, reason)
        return run.status

    def since(self, action: RemediationAction | None) -> timedelta:
        """How long ago `action` was recorded (none: no time at all)."""
        if action is None:
            return timedelta(0)
        return self.clock.now() - action.at

    def pause(self, run: Run) -> None:
        """Wait one poll interval, stopping first when the run's term ended."""
        self.still_active(run)
        self.clock.sleep(self.poll_interval.total_seconds())
