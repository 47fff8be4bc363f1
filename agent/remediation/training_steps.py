"""The steps of a training job's remediation (a Kubeflow kind, through its descriptor): suspend, resume, restore.

Who calls it: `agent.remediation.remediator.Remediator`, for a run whose job is a training kind
(`agent.model.workload.WorkloadKind`: where its `suspend` lives, which condition says suspended).
What it does, each step recorded through the run's `Journal` and decided from the recorded plan
plus the live job, so a fresh run resumes at any point:
- `apply`: ONE merge patch carrying `metadata.uid`, `metadata.resourceVersion`, the descriptor's
  `suspend: true` and the new templates, after the checks of the first write (`Recheck.confirm`,
  `Recheck.guards`) and its server-side dry run; a 409 re-plans (`Recheck.plan`, conflict scope)
  and retries up to `max_conflict_retries` times; planned templates on a suspended job mean the
  patch landed unrecorded. Then wait for the suspended condition and no pod of the job left
  (Terminating included) within `suspend_timeout` (else `RollbackError`), and patch
  `suspend: false`.
- `rollback`: the restore patch (original templates, still suspended; ROLLBACK_RESTORED recorded
  once they are on the job, so a fresh run only resumes) and the resume, once the pods of the
  planned templates are gone; a job deleted or recreated by its owner meanwhile leaves nothing
  to restore (`SupersededError`).
- `resume_as_is`: after a failure with the suspend applied, resume the job as it is (a job is
  never left suspended).

What it does not do: write other than through `agent.remediation.writer.ClusterWriter`, wait for
the pods to be bound, or verify (the Remediator does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.errors import ClusterWriteError, WriteConflictError
from agent.model.lifecycle import RemediationActionKind
from agent.model.workload import JobKind, workload
from agent.remediation.job_state import condition_true
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
    SupersededError,
)
from agent.remediation.template import TemplateState
from agent.remediation.writer import ClusterWriter, fenced_patch, resource_version_of, uid_of
from agent.settings import RemediationSettings

A = RemediationActionKind


def _suspended(job: Mapping[str, Any], kind: JobKind) -> bool:
    """The job says it is suspended (where its kind's descriptor keeps `suspend`)."""
    return workload(kind).suspension.suspended(job)


def _resume_patch(kind: JobKind) -> dict[str, Any]:
    return workload(kind).suspension.patch(False)


class TrainingSteps:
    """Suspend, resume and restore a training job for its run (see the module docstring)."""

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

    def target(self, run: Run) -> Target:
        """The plan's one target: the training job, suspended and resumed."""
        assert run.plan is not None
        (target,) = [t for t in run.plan.targets if t.action is TargetAction.SUSPEND_RESUME]
        return target

    def apply(self, run: Run) -> None:
        """The suspend patch with the new templates (a 409 re-plans and retries), the wait for
        the pods to go, the resume; each idempotent from the recorded steps and the live job."""
        retries = self.settings.max_conflict_retries
        for attempt in range(retries + 1):
            plan = run.plan
            assert plan is not None
            target = self.target(run)
            job = self.reader.job(run.ref, api_version=target.api_version)
            suspended_recorded = run.has(Step.SUSPENDED)
            if job is None or uid_of(job) != plan.preconditions.uid:
                raise SupersededError(
                    "the job was deleted or recreated during remediation: nothing to restore"
                    if suspended_recorded
                    else "the job was deleted or recreated since the plan"
                )
            state = target.state_of(job)
            if state is TemplateState.PLANNED and (_suspended(job, run.ref.kind) or suspended_recorded):
                if not suspended_recorded:  # the patch landed; the process died before saying so
                    self.journal.record(run, A.APPLY, Step.SUSPENDED, message="suspend patch found applied")
                break
            if suspended_recorded:
                raise FailedError(
                    "the job's templates were changed by someone else during remediation"
                )
            live = self.recheck.confirm(run, job)
            self.recheck.guards(run, live)
            patch = fenced_patch(plan.job_patch(resource_version=resource_version_of(job), suspend=True), job,
                                 locked=True)  # fmt: skip
            try:
                self.writer.patch_custom(target, patch, fence=run.fence, dry_run=True)
            except WriteConflictError:
                self.journal.record(run, A.DRY_RUN, Step.DRY_RUN, succeeded=False, message=DRY_RUN_CONFLICT)
                if attempt < retries:
                    self.recheck.replan(run, journal=self.journal)
                continue
            except ClusterWriteError as exc:
                self.journal.record(run, A.DRY_RUN, Step.DRY_RUN, succeeded=False, message=exc.message)
                raise FailedError(f"the server-side dry run refused the patch: {exc.message}") from None
            self.journal.record(run, A.DRY_RUN, Step.DRY_RUN, message="dryRun=All accepted the patch")
            self.journal.intend(run, Step.SUSPENDING, target=target, obj=job, write="patch",
                                message="suspend patch with the new templates about to be sent")  # fmt: skip
            try:
                self.writer.patch_custom(target, patch, fence=run.fence)
            except WriteConflictError:
                if attempt < retries:
                    self.recheck.replan(run, journal=self.journal)
                continue
            except ClusterWriteError as exc:
                raise FailedError(f"the API server refused the patch: {exc.message}") from None
            self.journal.record(
                run, A.APPLY, Step.SUSPENDED,
                message=f"suspended with the new templates (resourceVersion {resource_version_of(job)})",
                extra={"resource_version": resource_version_of(job), "attempt": attempt + 1},
            )  # fmt: skip
            break
        else:
            raise FailedError(
                f"the job kept changing: {retries + 1} conflicting write(s) (HTTP 409)"
            )
        self._wait_gone(run, target)
        self._resume(run, target)

    def _wait_gone(self, run: Run, target: Target) -> None:
        """Step 4: Suspended=True and no pod of the job left, Terminating included."""
        if run.has(Step.PODS_GONE) or run.has(Step.RESUMED):
            return
        since = run.step(Step.SUSPENDED)
        suspended_condition = workload(run.ref.kind).conditions.suspended
        while True:
            job = self.reader.job(run.ref, api_version=target.api_version)
            pods = self.reader.kubeflow_pods(run.ref)
            if job is not None and condition_true(job, suspended_condition) and not pods:
                break
            if self.journal.since(since) >= self.settings.suspend_timeout:
                raise RollbackError(
                    f"{len(pods)} pod(s) of the job still present "
                    f"{self.settings.suspend_timeout.total_seconds():g}s after the suspend"
                )
            self.journal.pause(run)
        self.journal.record(run, A.APPLY, Step.PODS_GONE, message="Suspended=True and no pod left")

    def _resume(self, run: Run, target: Target) -> None:
        """Step 5a: `suspend: false` (pods come back from the new templates)."""
        if run.has(Step.RESUMED):
            return
        job = self.reader.job(run.ref, api_version=target.api_version)
        if job is not None and _suspended(job, run.ref.kind):
            resume = fenced_patch(_resume_patch(run.ref.kind), job, locked=False)
            try:
                self.writer.patch_custom(target, resume, fence=run.fence)
            except ClusterWriteError as exc:
                raise RollbackError(f"the resume patch was refused: {exc.message}") from None
        self.journal.record(run, A.APPLY, Step.RESUMED, message="resumed (suspend: false)")

    def rollback(self, run: Run) -> list[str]:
        """Restore the original templates (ROLLBACK_RESTORED recorded once they are on the job)
        and resume; nothing it could not restore (`[]`). A rollback that stopped after the
        restore only resumes."""
        plan = run.plan
        assert plan is not None
        target = self.target(run)
        if not run.has(Step.ROLLBACK_RESTORED):
            self._restore(run, target)
        job = self.reader.job(run.ref, api_version=target.api_version)
        if job is None or uid_of(job) != plan.preconditions.uid:
            raise SupersededError("the job was deleted or recreated meanwhile: nothing to restore")
        if _suspended(job, run.ref.kind):
            deadline = self.clock.now() + self.settings.suspend_timeout
            while self.reader.kubeflow_pods(run.ref) and self.clock.now() < deadline:
                self.journal.pause(run)
            resume = fenced_patch(_resume_patch(run.ref.kind), job, locked=False)
            self.writer.patch_custom(target, resume, fence=run.fence)
        return []

    def _restore(self, run: Run, target: Target) -> None:
        """The restore patch (original templates, suspended), unless the job holds them already
        (a previous attempt died after the patch); ROLLBACK_RESTORED recorded."""
        plan = run.planned()
        for _attempt in range(self.settings.max_conflict_retries + 1):
            job = self.reader.job(run.ref, api_version=target.api_version)
            if job is None or uid_of(job) != plan.preconditions.uid:
                raise SupersededError("the job was deleted or recreated meanwhile: nothing to restore")
            if target.state_of(job) is TemplateState.ORIGINAL:
                self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_RESTORED,
                                    message="the job holds its original templates")  # fmt: skip
                return
            self.journal.intend(run, Step.RESTORING, target=target, obj=job, write="patch",
                                message="restore patch (original templates, suspended) about to be sent")  # fmt: skip
            patch = fenced_patch(plan.job_patch(resource_version=resource_version_of(job), suspend=True, restore=True),
                                 job, locked=True)  # fmt: skip
            try:
                self.writer.patch_custom(target, patch, fence=run.fence)
            except WriteConflictError:
                continue
            except ClusterWriteError as exc:
                raise FailedError(f"the restore patch was refused: {exc.message}") from None
            self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_RESTORED,
                                message="original templates restored (suspended)")  # fmt: skip
            return
        raise FailedError("the job kept changing (HTTP 409) while restoring it")

    def resume_as_is(self, run: Run) -> None:
        """After a failure with the suspend applied: resume the job as it is."""
        if run.plan is None or not run.has(Step.SUSPENDED) or not any(
                t.action is TargetAction.SUSPEND_RESUME for t in run.plan.targets):
            return
        target = self.target(run)
        job = self.reader.job(run.ref, api_version=target.api_version)
        if job is not None and _suspended(job, run.ref.kind) and uid_of(job) == run.plan.preconditions.uid:
            resume = fenced_patch(_resume_patch(run.ref.kind), job, locked=False)
            self.writer.patch_custom(target, resume, fence=run.fence)
