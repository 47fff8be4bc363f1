"""The rollback of a Kueue-managed job's remediation, journaled step by step like the forward path.

Who calls it: `agent.remediation.kueue_steps.KueueSteps` (its `rollback` and `resume_as_is`), for
a run whose plan re-places the job through Kueue (a Kubeflow job, a JobSet, a TrainJob). What it
does: undoes what was written, one step after another, each step's completion recorded (an
action of kind ROLLBACK) before the next starts, and each destructive write's intent (RESTORING)
recorded before it is sent. A fresh run resumes at the first step not recorded, and each step is
decided from the cluster's actual state (a write that landed unrecorded is read back, never sent
again), so a rollback killed at any of its writes, again and again, still ends:
- nothing written (no DEACTIVATING intent): nothing to undo;
- only the Workload deactivated (the templates still the job's own, no ANNOTATING intent, the
  planned Workload still there): reactivate it (ROLLBACK_REACTIVATED);
- else, in order: the job's current Workload deactivated, waiting for Kueue to rebuild one when
  none exists (ROLLBACK_DEACTIVATED, naming that Workload and its uid); Kueue suspends the job
  and the pods go, within `suspend_timeout` (ROLLBACK_PODS_GONE; past it, recorded as not
  succeeded and the rollback goes on, as before); the templates' annotations back to the job's
  own (ROLLBACK_RESTORED; the patch locked on the job's resourceVersion, a 409 re-reads); a
  JobSet's or TrainJob's child Jobs keeping the plan's Kueue marks renewed (ROLLBACK_RENEWED);
  the Workload deactivated by the rollback deleted, bound to its recorded uid, so Kueue rebuilds
  it from the job's own annotations and re-queues it (ROLLBACK_REQUEUED). A Workload of another
  uid under that name, or none, means the delete landed: it is never sent twice.
- `resume_as_is` (after a failed rollback or a failed apply): the Workload the rollback
  deactivated and did not delete is reactivated, else the planned Workload deactivated and not
  requeued is (a job is never left held).
A job deleted or recreated meanwhile leaves nothing to restore (`SupersededError`); a write
refused ends the rollback `failed` (`FailedError`).

What it does not do: record the rollback's start or end (`agent.remediation.remediator`), write
other than through `agent.remediation.writer.ClusterWriter`, or wait for Kueue to admit the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.errors import ClusterWriteError, WriteConflictError
from agent.model.lifecycle import RemediationActionKind
from agent.remediation.kueue_job import (
    KueueJob,
    active,
    annotation_patch,
    as_target,
    template_state,
)
from agent.remediation.plan import Target
from agent.remediation.run import FailedError, Journal, Run, Step
from agent.remediation.template import TemplateState
from agent.remediation.writer import uid_of
from agent.settings import RemediationSettings

A = RemediationActionKind

# the steps of the requeueing rollback, in order (any of them recorded: that rollback is the one)
REQUEUE_STEPS = (Step.ROLLBACK_DEACTIVATED, Step.ROLLBACK_PODS_GONE, Step.ROLLBACK_RESTORED,
                 Step.ROLLBACK_RENEWED, Step.ROLLBACK_REQUEUED)  # fmt: skip


class KueueRollback:
    """Undo a Kueue job's remediation, one recorded step at a time (see the module docstring)."""

    def __init__(self, *, kueue: KueueJob, journal: Journal, settings: RemediationSettings) -> None:
        self.kueue = kueue
        self.reader = kueue.reader
        self.writer = kueue.writer
        self.journal = journal
        self.settings = settings

    def rollback(self, run: Run) -> list[str]:
        """Undo what was written; nothing it could not restore (`[]`)."""
        if not run.has(Step.DEACTIVATING):
            return []
        requeue, annotate = self.kueue.targets(run)
        job = self.kueue.job(run, annotate, written=True)
        if self._only_deactivated(run, requeue, annotate, job):
            self._reactivate(run, requeue)
            return []
        self._deactivate(run, requeue)
        self._wait_gone(run, annotate)
        self._restore(run, annotate)
        if annotate.override is not None and not run.has(Step.ROLLBACK_RENEWED):
            self.kueue.renew(run, annotate, restore=True)
            self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_RENEWED,
                                message="no child Job keeps the plan's Kueue marks")  # fmt: skip
        self._requeue(run, requeue)
        return []

    def _only_deactivated(self, run: Run, requeue: Target, annotate: Target,
                          job: Mapping[str, Any]) -> bool:  # fmt: skip
        """Whether only the planned Workload's deactivation was written (decided once: a step
        of either rollback recorded keeps it)."""
        if run.has(Step.ROLLBACK_REACTIVATED):
            return True
        if any(run.has(step) for step in REQUEUE_STEPS) or run.has(Step.ANNOTATING):
            return False
        original = self.kueue.workload(requeue)
        return (template_state(annotate, job) is TemplateState.ORIGINAL and original is not None
                and uid_of(original) == requeue.uid)  # fmt: skip

    def _reactivate(self, run: Run, requeue: Target) -> None:
        if run.has(Step.ROLLBACK_REACTIVATED):
            return
        original = self.kueue.workload(requeue)
        if original is not None and uid_of(original) == requeue.uid:
            self._set_active(run, requeue, original, value=True)
        self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_REACTIVATED,
                            message=f"Workload {requeue.name} reactivated: nothing else was written")  # fmt: skip

    def _set_active(self, run: Run, target: Target, wl: Mapping[str, Any], *, value: bool) -> None:
        try:
            self.kueue.set_active(run, target, wl, value=value)
        except ClusterWriteError as exc:
            raise FailedError(f"the Workload spec.active patch was refused: {exc.message}") from None

    def _deactivate(self, run: Run, requeue: Target) -> None:
        """The job's current Workload inactive (Kueue rebuilds one first when none exists)."""
        if run.has(Step.ROLLBACK_DEACTIVATED):
            return
        self.kueue.waiter.until(run, lambda: self.reader.kueue_workload(run.ref) is not None,
                                budget=self.settings.suspend_timeout, fail=FailedError,
                                what="Kueue did not rebuild the job's Workload")  # fmt: skip
        current = self.reader.kueue_workload(run.ref)
        assert current is not None
        target = as_target(current, requeue)
        if active(current):
            self._set_active(run, target, current, value=False)
        self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_DEACTIVATED,
                            message=f"Workload {target.name} inactive: Kueue evicts it and suspends the job",
                            extra={"workload": target.name, "uid": target.uid})  # fmt: skip

    def _wait_gone(self, run: Run, annotate: Target) -> None:
        """Kueue suspended the job, no pod left, the Workload holding no quota; past
        `suspend_timeout` since the deactivation, recorded as not so and the rollback goes on."""
        if run.has(Step.ROLLBACK_PODS_GONE):
            return
        since = run.step(Step.ROLLBACK_DEACTIVATED)
        while not self.kueue.gone(run, annotate, self.reader.kueue_workload(run.ref)):
            if self.journal.since(since) >= self.settings.suspend_timeout:
                self.journal.record(
                    run, A.ROLLBACK, Step.ROLLBACK_PODS_GONE, succeeded=False,
                    message=f"the job's pods still present {self.settings.suspend_timeout.total_seconds():g}s "
                            "after its Workload was deactivated: restoring its annotations anyway")  # fmt: skip
                return
            self.journal.pause(run)
        self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_PODS_GONE,
                            message="Kueue suspended the job; no pod left")  # fmt: skip

    def _restore(self, run: Run, annotate: Target) -> None:
        """The templates' annotations back to the job's own (a TrainJob: zonemedic's entry out)."""
        if run.has(Step.ROLLBACK_RESTORED):
            return
        for _attempt in range(self.settings.max_conflict_retries + 1):
            job = self.kueue.job(run, annotate, written=True)
            if template_state(annotate, job) is TemplateState.ORIGINAL:
                self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_RESTORED,
                                    message="the job's templates hold its own annotations")  # fmt: skip
                return
            self.journal.intend(run, Step.RESTORING, target=annotate, obj=job, write="patch",
                                message="restore patch (the job's own annotations) about to be sent")  # fmt: skip
            try:
                self.writer.patch_custom(annotate, annotation_patch(annotate, job, restore=True),
                                         fence=run.fence)  # fmt: skip
            except WriteConflictError:
                continue
            except ClusterWriteError as exc:
                raise FailedError(f"the restore patch was refused: {exc.message}") from None
            self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_RESTORED,
                                message="the plan's annotations taken back out of the templates")  # fmt: skip
            return
        raise FailedError("the job kept changing (HTTP 409) while restoring it")

    def _requeue(self, run: Run, requeue: Target) -> None:
        """The Workload the rollback deactivated deleted (bound to its uid): Kueue rebuilds it
        from the job's own annotations. Found gone or replaced: the delete landed."""
        if run.has(Step.ROLLBACK_REQUEUED):
            return
        target, wl = self._deactivated(run, requeue)
        if wl is not None and uid_of(wl) == target.uid:
            self.journal.intend(run, Step.RESTORING, target=target, obj=wl, write="delete",
                                message="Workload delete (Kueue rebuilds it) about to be sent")  # fmt: skip
            try:
                self.writer.delete_custom(target, fence=run.fence)
            except ClusterWriteError as exc:
                raise FailedError(f"the Workload delete was refused: {exc.message}") from None
        self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_REQUEUED,
                            message=f"Workload {target.name} deleted: Kueue rebuilds it from the "
                                    "job's own annotations and re-queues the job")  # fmt: skip

    def _deactivated(self, run: Run, requeue: Target) -> tuple[Target, dict[str, Any] | None]:
        """The Workload the rollback recorded deactivating (as a target bound to the uid
        recorded) and what that name holds now."""
        recorded = run.step(Step.ROLLBACK_DEACTIVATED)
        assert recorded is not None, "the deactivation is recorded before the requeue"
        named = Target(action=requeue.action, api_version=requeue.api_version, kind=requeue.kind,
                       plural=requeue.plural, namespace=requeue.namespace,
                       name=str(recorded.payload.get("workload")), uid=recorded.payload.get("uid"),
                       resource_version=None, changes=())  # fmt: skip
        return named, self.kueue.workload(named)

    def resume_as_is(self, run: Run) -> None:
        """After a failure: reactivate the Workload the rollback deactivated and did not delete,
        else the planned one deactivated and not requeued."""
        if run.plan is None or not run.plan.kueue or not run.has(Step.DEACTIVATING):
            return
        if run.has(Step.ROLLBACK_REQUEUED):
            return
        requeue, _ = self.kueue.targets(run)
        if run.has(Step.ROLLBACK_DEACTIVATED):
            target, wl = self._deactivated(run, requeue)
        elif run.has(Step.RESUMED):
            return
        else:
            target, wl = requeue, self.kueue.workload(requeue)
        if wl is not None and uid_of(wl) == target.uid:
            self.kueue.set_active(run, target, wl, value=True)
