"""A Kueue-managed job and its Workload as the Kueue steps see them, forward and back.

Who calls it: `agent.remediation.kueue_steps` (the forward steps) and
`agent.remediation.kueue_rollback` (their undoing). What it holds:
- pure helpers on the objects the API returns: whether a Workload is active (`active`), the
  `spec.active` patch, whether the job's templates hold the plan's annotations
  (`template_state`), the locked merge patch writing or taking them back (`annotation_patch`),
  a (rebuilt) Workload as a target (`as_target`);
- `KueueJob`: the reads both share (the plan's targets, the job as planned, the JobSet holding
  the pod templates, a Workload by name, whether the job is quiet: suspended, no pod left, no
  replicated job active, the Workload holding no quota), a Workload's `spec.active` write (its
  intent first), and the renewal of a JobSet's child Jobs keeping Kueue marks its templates do
  not have (`JobWaiter.renew_children`).
What it does not do: decide which step comes next, or record a step's completion (the steps do).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agent.model.workload import JobKind, workload
from agent.remediation import jobset_patch
from agent.remediation.job_state import JobWaiter, condition_true, planned_job
from agent.remediation.observe import ClusterReader
from agent.remediation.plan import Target, TargetAction
from agent.remediation.run import FailedError, Journal, RollbackError, Run, Step
from agent.remediation.template import TemplateState
from agent.remediation.writer import ClusterWriter, fenced_patch
from agent.settings import RemediationSettings


def active(wl: Mapping[str, Any]) -> bool:
    return (wl.get("spec") or {}).get("active", True) is not False


def active_patch(value: bool) -> dict[str, Any]:
    return {"spec": {"active": value}}


def reserved(wl: Mapping[str, Any] | None) -> bool:
    """Kueue still holds quota for the Workload (it has not taken its admission back yet)."""
    return wl is not None and condition_true(wl, "QuotaReserved")


def template_state(annotate: Target, job: Mapping[str, Any]) -> TemplateState:
    """Whether the job holds the planned annotations: its replica specs, or (a JobSet, a
    TrainJob) what `jobset_patch` writes."""
    if annotate.override is None:
        return annotate.state_of(job)
    return jobset_patch.override_state(annotate, job)


def annotation_patch(annotate: Target, job: Mapping[str, Any], *, restore: bool) -> dict[str, Any]:
    """The locked merge patch writing (or taking back) the plan's annotations, `suspend` left out."""
    if annotate.override is None:
        patch = annotate.template_patch(restore=restore)
    elif restore:
        patch = jobset_patch.restore_patch(annotate, job, suspend=None)
    else:
        patch = jobset_patch.forward_patch(annotate, job, suspend=None)
    return fenced_patch(patch, job, locked=True)


def as_target(wl: Mapping[str, Any], like: Target) -> Target:
    """The Workload `wl` (perhaps a rebuilt one) as a target of the same kind as `like`."""
    meta = wl.get("metadata") or {}
    return Target(action=TargetAction.REQUEUE, api_version=like.api_version, kind=like.kind,
                  plural=like.plural, namespace=like.namespace, name=str(meta.get("name")),
                  uid=meta.get("uid"), resource_version=meta.get("resourceVersion"), changes=())  # fmt: skip


class KueueJob:
    """The reads and shared writes of a Kueue job's steps (see the module docstring)."""

    def __init__(self, *, reader: ClusterReader, writer: ClusterWriter, journal: Journal,
                 waiter: JobWaiter, settings: RemediationSettings) -> None:  # fmt: skip
        self.reader = reader
        self.writer = writer
        self.journal = journal
        self.waiter = waiter
        self.settings = settings

    def targets(self, run: Run) -> tuple[Target, Target]:
        """The plan's Workload (REQUEUE) and job (ANNOTATE) targets."""
        plan = run.planned()
        (requeue,) = [t for t in plan.targets if t.action is TargetAction.REQUEUE]
        (annotate,) = [t for t in plan.targets if t.action is TargetAction.ANNOTATE]
        return requeue, annotate

    def job(self, run: Run, annotate: Target, *, written: bool) -> dict[str, Any]:
        return planned_job(self.reader, run, api_version=annotate.api_version, during=written)

    def jobset(self, run: Run) -> Mapping[str, Any] | None:
        """The JobSet holding the pod templates: the job itself, or a TrainJob's JobSet."""
        if run.ref.kind is JobKind.JOBSET:
            return self.reader.job(run.ref)
        return self.reader.materialised(run.ref)

    def workload(self, target: Target) -> dict[str, Any] | None:
        return self.reader.object(api_version=target.api_version, plural=target.plural,
                                  namespace=target.namespace, name=target.name)  # fmt: skip

    def gone(self, run: Run, annotate: Target, wl: Mapping[str, Any] | None = None) -> bool:
        """Suspended, no pod left, no replicated job active, the Workload (`wl`) holding no quota."""
        job = self.reader.job(run.ref, api_version=annotate.api_version)
        suspended = workload(run.ref.kind).conditions.suspended
        if job is None or not condition_true(job, suspended) or self.reader.kubeflow_pods(run.ref):
            return False
        if annotate.override is not None and jobset_patch.active_jobs(self.jobset(run)):
            return False
        return not reserved(wl)

    def set_active(self, run: Run, target: Target, wl: Mapping[str, Any], *, value: bool) -> None:
        """`spec.active: value` on the Workload `wl` (bound to its uid), its intent first; nothing
        when it reads so already."""
        if active(wl) is value:
            return
        self.journal.intend(run, Step.RESTORING, target=target, obj=wl, write="patch",
                            message=f"Workload spec.active: {str(value).lower()} about to be sent")  # fmt: skip
        self.writer.patch_custom(target, fenced_patch(active_patch(value), wl, locked=False),
                                 fence=run.fence)  # fmt: skip

    def renew(self, run: Run, annotate: Target, *, restore: bool) -> None:
        """A JobSet's or TrainJob's: once its JobSet's templates read planned (or, restoring,
        original), renew the child Jobs keeping Kueue marks those templates do not have."""
        wanted = TemplateState.ORIGINAL if restore else TemplateState.PLANNED
        fail: Callable[[str], Exception] = FailedError if restore else RollbackError

        def templates() -> bool:
            jobset = self.jobset(run)
            return jobset is not None and jobset_patch.templates_state(annotate, jobset) is wanted

        self.waiter.until(run, templates, budget=self.settings.suspend_timeout, fail=fail,
                          what=f"the JobSet's templates did not read {wanted.value}")  # fmt: skip
        self.waiter.renew_children(
            run, lambda jobs: jobset_patch.kueue_marked_children(self.jobset(run) or {}, jobs),
            step=Step.RESTORING if restore else Step.RENEWING,
            budget=self.settings.suspend_timeout, fail=fail, why="keeping Kueue's old marks",
        )  # fmt: skip
