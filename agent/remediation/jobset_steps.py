"""The steps of a TrainJob's or a JobSet's remediation: suspend, wait, patch, resume; and their undoing.

Who calls it: `agent.remediation.remediator.Remediator`, for a run whose plan moves its job by
SUSPEND_PATCH_RESUME (`agent.remediation.jobset_plan`). What it does, each step recorded through
the run's `Journal` and decided from the recorded plan plus the live objects, so a fresh run
resumes at any point (each write's intent recorded before it is sent, each write bound to the
object planned by its uid, and a list-replacing patch to the resourceVersion it was built from):
- `apply`:
  1. before the first write, the checks of `Recheck.confirm` and `Recheck.guards`, and the
     server-side dry run of the suspend patch; then the suspend (`spec.suspend: true`, intent
     SUSPENDING, SUSPENDED once answered; a suspended job after the intent means it landed);
  2. wait until the job says Suspended, no pod of it is left (Terminating included; finished
     initializers do not count) and no replicated job of the JobSet is active (the Trainer's
     webhook refuses a runtime-patch change before), within `suspend_timeout` (else rollback);
  3. the patch (`agent.remediation.jobset_patch.forward_patch`, intent PATCHING, PATCHED once
     answered): with `suspend: false` in the same request where the plan says the release
     allows it (Trainer v2.3+, a JobSet), else with `suspend: true` kept; zonemedic's changes
     read back on the live object mean it landed; a refusal rolls back;
  4. the resume (`suspend: false`), unless the patch carried it.
- `rollback`, each step's completion recorded before the next (ROLLBACK_PODS_GONE,
  ROLLBACK_RESTORED, ROLLBACK_RENEWED) so a fresh run resumes at the first not recorded:
  suspend again when resumed (intent RESTORING, write `suspend`) and wait for the
  pods to go; the restore patch (intent RESTORING, write `restore`: zonemedic's entry out of
  `runtimePatches`, its `podTemplateOverrides` entries out, or the JobSet templates' original
  values); once the JobSet's templates read original again, every child Job that keeps what
  the JobSet's resume merge cannot take back (`jobset_patch.stale_children`: a nodeSelector key
  the original did not have, an added toleration) is deleted (intent RESTORING, write
  `delete`) for the JobSet controller to recreate it from the restored template; then resume.
  A job deleted or recreated by its owner meanwhile leaves nothing to restore (`SupersededError`).
- `resume_as_is`: after a failure with the suspend applied, resume the job as it is (a job is
  never left suspended).

What it does not do: write other than through `agent.remediation.writer.ClusterWriter`, wait for
the pods to be bound, or verify (the Remediator does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agent.errors import ClusterWriteError, WriteConflictError
from agent.model.lifecycle import RemediationActionKind
from agent.model.workload import JobKind, workload
from agent.remediation import jobset_patch
from agent.remediation.job_state import JobWaiter, condition_true, planned_job
from agent.remediation.observe import ClusterReader
from agent.remediation.plan import Target, TargetAction
from agent.remediation.recheck import Recheck
from agent.remediation.run import (
    DRY_RUN_CONFLICT,
    Clock,
    FailedError,
    Journal,
    RollbackError,
    Run,
    Step,
)
from agent.remediation.template import TemplateState
from agent.remediation.writer import ClusterWriter, fenced_patch, resource_version_of, uid_of
from agent.settings import RemediationSettings

A = RemediationActionKind
Obj = dict[str, Any]


def _live(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class JobSetSteps:
    """Suspend, patch, resume and restore a TrainJob or a JobSet (see the module docstring)."""

    def __init__(
        self,
        *,
        reader: ClusterReader,
        writer: ClusterWriter,
        journal: Journal,
        recheck: Recheck,
        settings: RemediationSettings,
        clock: Clock,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.journal = journal
        self.recheck = recheck
        self.settings = settings
        self.clock = clock
        self.waiter = JobWaiter(reader=reader, writer=writer, journal=journal, clock=clock)

    @staticmethod
    def owns(run: Run) -> bool:
        """Whether the run's plan is one these steps apply (a SUSPEND_PATCH_RESUME target)."""
        return run.plan is not None and any(
            t.action is TargetAction.SUSPEND_PATCH_RESUME for t in run.plan.targets)

    def target(self, run: Run) -> Target:
        (target,) = [t for t in run.planned().targets if t.action is TargetAction.SUSPEND_PATCH_RESUME]
        return target

    # -- reading ---------------------------------------------------------------------------------

    def _job(self, run: Run, target: Target, *, during: bool) -> Obj:
        """The job as planned (same uid), else `SupersededError`."""
        return planned_job(self.reader, run, api_version=target.api_version, during=during)

    def _suspended(self, run: Run, job: Mapping[str, Any]) -> bool:
        return workload(run.ref.kind).suspension.suspended(job)

    def _jobset(self, run: Run, job: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The JobSet holding the pod templates: the job itself, or a TrainJob's JobSet."""
        if run.ref.kind is JobKind.JOBSET:
            return job
        return self.reader.materialised(run.ref)

    def _quiet(self, run: Run, target: Target) -> tuple[bool, int]:
        """(suspended with no pod left and no replicated job active, live pods left)."""
        job = self._job(run, target, during=True)
        pods = [p for p in self.reader.kubeflow_pods(run.ref) if _live(p)]
        condition = workload(run.ref.kind).conditions.suspended
        quiet = (self._suspended(run, job) and condition_true(job, condition) and not pods
                 and jobset_patch.active_jobs(self._jobset(run, job)) == 0)  # fmt: skip
        return quiet, len(pods)

    def _send(self, target: Target, patch: Mapping[str, Any], run: Run) -> None:
        self.writer.patch_custom(target, patch, fence=run.fence)

    def _suspend_patch(self, run: Run, job: Mapping[str, Any], value: bool, *, locked: bool) -> Obj:
        return fenced_patch(workload(run.ref.kind).suspension.patch(value), job, locked=locked)

    # -- apply -----------------------------------------------------------------------------------

    def apply(self, run: Run) -> None:
        self._suspend(run)
        target = self.target(run)  # the plan a 409 before the suspend may have made again
        self._wait_quiet(run, target)
        self._patch(run, target)
        self._resume(run, target)

    def _suspend(self, run: Run) -> None:
        """Step 1: the checks of the first write, its dry run, the suspend patch."""
        if run.has(Step.SUSPENDED):
            return
        retries = self.settings.max_conflict_retries
        for attempt in range(retries + 1):
            target = self.target(run)
            job = self._job(run, target, during=run.has(Step.SUSPENDING))
            if run.has(Step.SUSPENDING) and self._suspended(run, job):
                self.journal.record(run, A.APPLY, Step.SUSPENDED, message="suspend patch found applied")
                return
            patch = self._suspend_patch(run, job, True, locked=True)
            if not run.has(Step.SUSPENDING):  # nothing written yet
                live = self.recheck.confirm(run, job)
                self.recheck.guards(run, live)
                try:
                    self.writer.patch_custom(target, patch, fence=run.fence, dry_run=True)
                except WriteConflictError:
                    self.journal.record(run, A.DRY_RUN, Step.DRY_RUN, succeeded=False, message=DRY_RUN_CONFLICT)
                    if attempt < retries:
                        self.recheck.replan(run, journal=self.journal)
                    continue
                except ClusterWriteError as exc:
                    self.journal.record(run, A.DRY_RUN, Step.DRY_RUN, succeeded=False, message=exc.message)
                    raise FailedError(f"the server-side dry run refused the suspend: {exc.message}") from None
                self.journal.record(run, A.DRY_RUN, Step.DRY_RUN, message="dryRun=All accepted the suspend")
            self.journal.intend(run, Step.SUSPENDING, target=target, obj=job, write="patch",
                                message="suspend patch about to be sent")  # fmt: skip
            try:
                self._send(target, patch, run)
            except WriteConflictError:
                continue
            except ClusterWriteError as exc:
                raise FailedError(f"the API server refused the suspend: {exc.message}") from None
            self.journal.record(run, A.APPLY, Step.SUSPENDED,
                                message=f"suspended (resourceVersion {resource_version_of(job)})",
                                extra={"resource_version": resource_version_of(job),
                                       "attempt": attempt + 1})  # fmt: skip
            return
        raise FailedError(f"the job kept changing: {retries + 1} conflicting write(s) (HTTP 409)")

    def _wait_quiet(self, run: Run, target: Target) -> None:
        """Step 2: suspended, no pod left, no replicated job active."""
        if run.has(Step.PODS_GONE) or run.has(Step.PATCHED) or run.has(Step.RESUMED):
            return
        since = run.step(Step.SUSPENDED)
        while True:
            quiet, left = self._quiet(run, target)
            if quiet:
                break
            if self.journal.since(since) >= self.settings.suspend_timeout:
                raise RollbackError(f"{left} pod(s) of the job still present "
                                    f"{self.settings.suspend_timeout.total_seconds():g}s after the suspend")  # fmt: skip
            self.journal.pause(run)
        self.journal.record(run, A.APPLY, Step.PODS_GONE,
                            message="Suspended=True, no pod left, no replicated job active")  # fmt: skip

    def _patch(self, run: Run, target: Target) -> None:
        """Step 3: zonemedic's changes (with the resume where one request may do both)."""
        if run.has(Step.PATCHED):
            return
        together = bool((target.override or {}).get("resume_with_patch"))
        for _attempt in range(self.settings.max_conflict_retries + 1):
            job = self._job(run, target, during=True)
            state = jobset_patch.override_state(target, job)
            if state is TemplateState.PLANNED:  # landed; the process died before saying so
                self._patched(run, resumed=together and not self._suspended(run, job),
                              message="patch found applied")  # fmt: skip
                return
            if state is TemplateState.OTHER:
                raise RollbackError("the job's overrides were changed by someone else during remediation")
            patch = fenced_patch(jobset_patch.forward_patch(target, job, suspend=not together), job,
                                 locked=True)  # fmt: skip
            self.journal.intend(run, Step.PATCHING, target=target, obj=job, write="patch",
                                message=("patch with the resume about to be sent" if together
                                         else "patch (still suspended) about to be sent"))  # fmt: skip
            try:
                self._send(target, patch, run)
            except WriteConflictError:
                continue
            except ClusterWriteError as exc:
                raise RollbackError(f"the API server refused the patch: {exc.message}") from None
            self._patched(run, resumed=together, message=(
                f"patched {jobset_patch.field_of(target)}" + (" and resumed in one request" if together else "")))
            return
        raise RollbackError("the job kept changing (HTTP 409) while patching it")

    def _patched(self, run: Run, *, resumed: bool, message: str) -> None:
        self.journal.record(run, A.APPLY, Step.PATCHED, message=message)
        if resumed:
            self.journal.record(run, A.APPLY, Step.RESUMED, message="resumed with the patch")

    def _resume(self, run: Run, target: Target) -> None:
        """Step 4: `suspend: false`, unless the patch carried it."""
        if run.has(Step.RESUMED):
            return
        job = self._job(run, target, during=True)
        if self._suspended(run, job):
            try:
                self._send(target, self._suspend_patch(run, job, False, locked=False), run)
            except ClusterWriteError as exc:
                raise RollbackError(f"the resume patch was refused: {exc.message}") from None
        self.journal.record(run, A.APPLY, Step.RESUMED, message="resumed (suspend: false)")

    # -- rollback --------------------------------------------------------------------------------

    def _until(self, run: Run, done: Callable[[], bool], *, what: str) -> None:
        self.waiter.until(run, done, budget=self.settings.suspend_timeout, fail=FailedError,
                          what=what)  # fmt: skip

    def _restored(self, run: Run, target: Target, job: Mapping[str, Any]) -> bool:
        """Nothing of zonemedic's left: its overrides out, the JobSet's templates original, no
        child Job keeping a planned value."""
        if jobset_patch.override_state(target, job) is not TemplateState.ORIGINAL:
            return False
        jobset = self._jobset(run, job)
        if jobset is None or jobset_patch.templates_state(target, jobset) is not TemplateState.ORIGINAL:
            return False
        return not jobset_patch.stale_children(target, self.waiter.children(run))

    def rollback(self, run: Run) -> list[str]:
        """Take zonemedic's changes back out and resume; nothing it could not restore (`[]`), or
        the child Jobs it recreated. A job found restored already is only resumed (a rollback
        that died after its resume landed restarts nothing again)."""
        target = self.target(run)
        if not run.has(Step.ROLLBACK_RENEWED):
            if not self._restored(run, target, self._job(run, target, during=True)):
                self._quiet_again(run, target)
                if not run.has(Step.ROLLBACK_RESTORED):
                    self._restore(run, target)

                def restored() -> bool:
                    jobset = self._jobset(run, self._job(run, target, during=True))
                    return jobset is not None and (
                        jobset_patch.templates_state(target, jobset) is TemplateState.ORIGINAL)

                self._until(run, restored, what="the JobSet's templates did not read original again")
                self._recreate_stale(run, target)
            self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_RENEWED,
                                message="nothing of zonemedic's left: no child Job keeps a planned value")  # fmt: skip
        job = self._job(run, target, during=True)
        if self._suspended(run, job):
            self._send(target, self._suspend_patch(run, job, False, locked=False), run)
        recreated = sorted({str(a.payload.get("target")) for a in run.detail.actions
                            if a.payload.get("step") == Step.RESTORING.value
                            and a.payload.get("write") == "delete"})  # fmt: skip
        if not recreated:
            return []
        return [f"child Job(s) {', '.join(recreated)} recreated from the restored templates (the "
                "JobSet's resume merge keeps a nodeSelector key or toleration it does not have)"]

    def _quiet_again(self, run: Run, target: Target) -> None:
        """Suspend again when resumed (intent first) and wait for the pods to go; ROLLBACK_PODS_GONE."""
        if run.has(Step.ROLLBACK_PODS_GONE):
            return
        job = self._job(run, target, during=True)
        if not self._suspended(run, job):
            self.journal.intend(run, Step.RESTORING, target=target, obj=job, write="suspend",
                                message="suspend before the restore about to be sent")  # fmt: skip
            self._send(target, self._suspend_patch(run, job, True, locked=False), run)
        self._until(run, lambda: self._quiet(run, target)[0], what="the job's pods did not go")
        self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_PODS_GONE,
                            message="suspended again, no pod left, no replicated job active")  # fmt: skip

    def _restore(self, run: Run, target: Target) -> None:
        """The restore patch (still suspended), unless zonemedic's overrides are out already;
        ROLLBACK_RESTORED recorded."""
        for _attempt in range(self.settings.max_conflict_retries + 1):
            job = self._job(run, target, during=True)
            if jobset_patch.override_state(target, job) is TemplateState.ORIGINAL:
                self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_RESTORED,
                                    message="zonemedic's overrides out of the job")  # fmt: skip
                return
            self.journal.intend(run, Step.RESTORING, target=target, obj=job, write="restore",
                                message="restore patch (still suspended) about to be sent")  # fmt: skip
            patch = fenced_patch(jobset_patch.restore_patch(target, job, suspend=True), job, locked=True)
            try:
                self._send(target, patch, run)
            except WriteConflictError:
                continue
            except ClusterWriteError as exc:
                raise FailedError(f"the restore patch was refused: {exc.message}") from None
            self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_RESTORED,
                                message="restore patch sent (still suspended)")  # fmt: skip
            return
        raise FailedError("the job kept changing (HTTP 409) while restoring it")

    def _recreate_stale(self, run: Run, target: Target) -> None:
        """Delete the child Jobs keeping a planned value; wait until none is left (the JobSet
        controller creates them again from the restored templates)."""
        self.waiter.renew_children(
            run, lambda jobs: jobset_patch.stale_children(target, jobs), step=Step.RESTORING,
            budget=self.settings.suspend_timeout, fail=FailedError, why="keeping a planned value",
        )  # fmt: skip

    def resume_as_is(self, run: Run) -> None:
        """After a failure with the suspend applied: resume the job as it is."""
        if not self.owns(run) or not run.has(Step.SUSPENDING):
            return
        target = self.target(run)
        job = self.reader.job(run.ref, api_version=target.api_version)
        if job is not None and self._suspended(run, job) and uid_of(job) == run.planned().preconditions.uid:
            self._send(target, self._suspend_patch(run, job, False, locked=False), run)
