"""The steps of a Kueue-managed job's remediation: re-queued through Kueue, never suspended by zonemedic.

Who calls it: `agent.remediation.remediator.Remediator`, for a run whose plan re-places the job
through Kueue (`Plan.kueue`, built by `agent.remediation.kueue_plan`): a Kubeflow job, a JobSet,
or a TrainJob. What it does, each step recorded through the run's `Journal` (the intent before
each write) and decided from the recorded plan plus the live objects, so a fresh run resumes at
any point:
- `apply`: after the checks of the first write (`Recheck.confirm`, `Recheck.guards`, Kueue's
  marks expected) and a server-side dry run, set the Workload's `spec.active: false` (DEACTIVATED;
  a Workload found inactive after the intent means the patch landed unrecorded); wait until Kueue
  has suspended the job, no pod of it is left (Terminating included), no replicated job of its
  JobSet is active and Kueue has released the Workload's quota (it takes its admission back out
  of the templates first), within `suspend_timeout` (else `RollbackError`); write the templates'
  Kueue annotations, locked on the job's resourceVersion (a 409 re-reads and retries, templates
  found planned mean it landed): a Kubeflow job's replica specs, a JobSet's replicated jobs, a
  TrainJob's own `runtimePatches` entry (`agent.remediation.jobset_patch`); for a JobSet or a
  TrainJob, once its JobSet's templates carry them, renew the suspended child Jobs that keep
  Kueue's old marks (`jobset_patch.kueue_marked_children`: the JobSet's resume merge would keep
  them beside the new request, which Kueue's Job webhook refuses), the JobSet controller creating
  them again (RENEWED); delete the Workload (by uid) so Kueue rebuilds it from the annotated job
  and re-queues it (RESUMED); then wait within `schedule_timeout` for Kueue to admit the rebuilt
  Workload with a topology assignment in exactly one zone, one of the plan's `zones` (ADMITTED
  with the zone; another zone, several, or no admission in time: `RollbackError`).
- `rollback` and `resume_as_is`: `agent.remediation.kueue_rollback` (each rollback step recorded
  before the next, so a rollback killed at any write resumes where it stopped): nothing when
  nothing was written; a Workload only deactivated is reactivated; once the templates were
  annotated, the current Workload is deactivated, the pods awaited gone, the annotations
  restored to the job's own (a TrainJob: zonemedic's entry out), the child Jobs keeping the
  plan's marks renewed, and the Workload deleted so Kueue rebuilds it as before; after a
  failure, the Workload left deactivated is reactivated (a job is never left held).

What it does not do: touch the job's own `suspend` or write a nodeSelector (Kueue owns both), write
other than through `agent.remediation.writer.ClusterWriter`, wait for the pods to be bound, or
verify (the Remediator does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.errors import ClusterWriteError, WriteConflictError
from agent.model.cluster import ZONE_LABEL
from agent.model.kueue import HOSTNAME_LEVEL as HOSTNAME_LABEL
from agent.model.kueue import KueueWorkload
from agent.model.lifecycle import RemediationActionKind
from agent.remediation.job_state import JobWaiter
from agent.remediation.kueue_job import (
    KueueJob,
    active,
    active_patch,
    annotation_patch,
    template_state,
)
from agent.remediation.kueue_rollback import KueueRollback
from agent.remediation.observe import ClusterReader
from agent.remediation.plan import Target
from agent.remediation.recheck import Recheck
from agent.remediation.run import (
    Clock,
    FailedError,
    Journal,
    RollbackError,
    Run,
    Step,
    SupersededError,
)
from agent.remediation.template import TemplateState
from agent.remediation.writer import ClusterWriter, fenced_patch, uid_of
from agent.settings import RemediationSettings
from agent.snapshot.kueue import parse_workload
from agent.snapshot.manifests import ManifestError

A = RemediationActionKind


class KueueSteps:
    """Re-queue a Kueue job with zone-level annotations for its run (see the module docstring)."""

    def __init__(
        self, *, reader: ClusterReader, writer: ClusterWriter, journal: Journal, recheck: Recheck,
        settings: RemediationSettings, clock: Clock,
    ) -> None:  # fmt: skip
        self.reader = reader
        self.writer = writer
        self.journal = journal
        self.recheck = recheck
        self.settings = settings
        self.clock = clock
        waiter = JobWaiter(reader=reader, writer=writer, journal=journal, clock=clock)
        self.kueue = KueueJob(reader=reader, writer=writer, journal=journal, waiter=waiter,
                              settings=settings)  # fmt: skip
        self.undo = KueueRollback(kueue=self.kueue, journal=journal, settings=settings)

    # -- apply ------------------------------------------------------------------------------

    def apply(self, run: Run) -> None:
        """Deactivate, wait for the pods to go, annotate, requeue, wait for the admission."""
        requeue, annotate = self.kueue.targets(run)
        job = self.kueue.job(run, annotate, written=run.has(Step.DEACTIVATING))
        if not run.has(Step.DEACTIVATED):
            self._deactivate(run, requeue, job)
        self._wait_gone(run, annotate, requeue)
        if not run.has(Step.ANNOTATED):
            self._annotate(run, annotate)
        if annotate.override is not None and not run.has(Step.RENEWED):
            self.kueue.renew(run, annotate, restore=False)
            self.journal.record(run, A.APPLY, Step.RENEWED,
                                message="no child Job keeps Kueue's old marks")  # fmt: skip
        if not run.has(Step.RESUMED):
            wl = self.kueue.workload(requeue)
            self.journal.intend(run, Step.REQUEUING, target=requeue, obj=wl, write="delete",
                                message="the deactivated Workload is about to be deleted")  # fmt: skip
            if wl is not None and uid_of(wl) == requeue.uid:
                try:
                    self.writer.delete_custom(requeue, fence=run.fence)
                except ClusterWriteError as exc:
                    raise RollbackError(f"the Workload delete was refused: {exc.message}") from None
            self.journal.record(run, A.APPLY, Step.RESUMED,
                                message="Workload deleted: Kueue rebuilds it from the annotated job "
                                        "and re-queues the job (it may wait for quota)")  # fmt: skip
        self._wait_admitted(run, requeue)

    def _deactivate(self, run: Run, requeue: Target, job: Mapping[str, Any]) -> None:
        wl = self.kueue.workload(requeue)
        intended = run.has(Step.DEACTIVATING)
        if wl is None or uid_of(wl) != requeue.uid:
            if intended:
                raise RollbackError("the job's Workload was deleted or recreated during remediation")
            raise SupersededError("the job's Workload was deleted or recreated since the plan")
        if intended and not active(wl):  # the patch landed; the process died before saying so
            self.journal.record(run, A.APPLY, Step.DEACTIVATED, message="Workload found inactive")
            return
        if not intended:
            live = self.recheck.confirm(run, job)
            self.recheck.guards(run, live)
        patch = fenced_patch(active_patch(False), wl, locked=False)
        if not intended:
            try:
                self.writer.patch_custom(requeue, patch, fence=run.fence, dry_run=True)
            except ClusterWriteError as exc:
                self.journal.record(run, A.DRY_RUN, Step.DRY_RUN, succeeded=False, message=exc.message)
                raise FailedError(f"the server-side dry run refused the patch: {exc.message}") from None
            self.journal.record(run, A.DRY_RUN, Step.DRY_RUN, message="dryRun=All accepted the patch")
        self.journal.intend(run, Step.DEACTIVATING, target=requeue, obj=wl, write="patch",
                            message="Workload spec.active: false about to be sent")  # fmt: skip
        try:
            self.writer.patch_custom(requeue, patch, fence=run.fence)
        except ClusterWriteError as exc:
            raise RollbackError(f"the Workload patch was refused: {exc.message}") from None
        self.journal.record(run, A.APPLY, Step.DEACTIVATED,
                            message=f"Workload {requeue.name} deactivated: Kueue evicts it and "
                                    "suspends the job")  # fmt: skip

    def _wait_gone(self, run: Run, annotate: Target, requeue: Target) -> None:
        """Kueue suspended the job, no pod of it is left (Terminating included) and Kueue
        released the Workload's quota (its admission taken back out of the templates)."""
        if run.has(Step.PODS_GONE) or run.has(Step.RESUMED):
            return
        since = run.step(Step.DEACTIVATED)
        while not self.kueue.gone(run, annotate, self.kueue.workload(requeue)):
            if self.journal.since(since) >= self.settings.suspend_timeout:
                raise RollbackError(
                    f"the job's pods still present {self.settings.suspend_timeout.total_seconds():g}s "
                    "after its Workload was deactivated")  # fmt: skip
            self.journal.pause(run)
        self.journal.record(run, A.APPLY, Step.PODS_GONE, message="Kueue suspended the job; no pod left")

    def _annotate(self, run: Run, annotate: Target) -> None:
        for _attempt in range(self.settings.max_conflict_retries + 1):
            job = self.kueue.job(run, annotate, written=True)
            state = template_state(annotate, job)
            if state is TemplateState.PLANNED:
                self.journal.record(run, A.APPLY, Step.ANNOTATED, message="templates found annotated")
                return
            if state is TemplateState.OTHER and annotate.override is not None:
                raise RollbackError("the job's templates were changed by someone else during remediation")
            self.journal.intend(run, Step.ANNOTATING, target=annotate, obj=job, write="patch",
                                message="template annotations about to be sent")  # fmt: skip
            try:
                self.writer.patch_custom(annotate, annotation_patch(annotate, job, restore=False),
                                         fence=run.fence)  # fmt: skip
            except WriteConflictError:
                continue
            except ClusterWriteError as exc:
                raise RollbackError(f"the annotation patch was refused: {exc.message}") from None
            self.journal.record(run, A.APPLY, Step.ANNOTATED,
                                message="templates annotated for Kueue's zone-level placement")
            return
        raise RollbackError("the job kept changing (HTTP 409) while annotating it")

    def _wait_admitted(self, run: Run, requeue: Target) -> None:
        """Kueue admitted the rebuilt Workload with a topology assignment in one allowed zone."""
        if run.has(Step.ADMITTED):
            return
        plan = run.planned()
        since = run.step(Step.RESUMED)
        while True:
            found = self.reader.kueue_workload(run.ref)
            if found is not None and uid_of(found) != requeue.uid:
                try:
                    wl = parse_workload(found)
                except ManifestError as exc:
                    raise RollbackError(f"the rebuilt Workload cannot be read: {exc}") from None
                if wl.admitted:
                    zones = self._admitted_zones(wl)
                    if len(zones) != 1 or zones[0] not in plan.zones:
                        raise RollbackError(
                            f"Kueue admitted the job in {', '.join(zones) or 'no topology zone'}, "
                            f"not in one zone the policies allow ({', '.join(plan.zones)})")  # fmt: skip
                    self.journal.record(run, A.APPLY, Step.ADMITTED,
                                        message=f"Kueue admitted Workload {wl.name} in {zones[0]}",
                                        extra={"zone": zones[0]})  # fmt: skip
                    return
            if self.journal.since(since) >= self.settings.schedule_timeout:
                raise RollbackError(
                    f"Kueue did not admit the job within "
                    f"{self.settings.schedule_timeout.total_seconds():g}s (it may wait for quota)")  # fmt: skip
            self.journal.pause(run)

    def _admitted_zones(self, wl: KueueWorkload) -> list[str]:
        """The zones of the admission's topology assignments: their zone level, or (Kueue
        records only the hostname level when the Topology's lowest level is the hostname) the
        zone label of the nodes they name."""
        zones = set(wl.zones(ZONE_LABEL))
        hosts = {h for a in wl.assignments for h in a.values_at(HOSTNAME_LABEL)}
        if hosts:
            zone_of = {str((n.get("metadata") or {}).get("name")):
                       ((n.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL)
                       for n in self.reader.nodes()}  # fmt: skip
            zones |= {str(zone_of.get(h)) for h in hosts}
        return sorted(zones)

    # -- rollback (agent.remediation.kueue_rollback) -----------------------------------------

    def rollback(self, run: Run) -> list[str]:
        """Undo what was written, one recorded step at a time; nothing it could not restore."""
        return self.undo.rollback(run)

    def resume_as_is(self, run: Run) -> None:
        """After a failure: reactivate the Workload left deactivated (the job never left held)."""
        self.undo.resume_as_is(run)
