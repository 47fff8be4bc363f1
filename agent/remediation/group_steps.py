"""The steps of a generic group's remediation: Deployment rollouts and batch Job recreation, and their undoing.

Who calls it: `agent.remediation.remediator.Remediator`, for a run whose job is a configured generic
group (`JobKind.GROUP`; its workloads described by `agent.model.workload.OwnerKind`). What it
does, each step recorded through the run's `Journal` and decided from the recorded plan plus the
live objects, so a fresh run resumes at any point:
- `apply`: before the first write, the checks of `Recheck.confirm` and `Recheck.guards`, then the
  server-side dry run (`dryRun=All`) of every write the plan makes: each Deployment patch, each
  batch Job's DELETE and the CREATE of its planned and of its original manifest (the server
  answers the CREATE `AlreadyExists` only once every admission check passed, so a webhook's or a
  quota's refusal shows here). Then, target by target: a Deployment's template patch (a rollout;
  `metadata.uid` and `resourceVersion` fence it to the Deployment planned); a batch Job DELETEd
  (Foreground, `preconditions.uid` and `resourceVersion` of the Job planned, as just read),
  waited for until gone, and CREATEd from the plan, annotated `zonemedic.io/recreated-by` with
  the incident and which manifest it is. A CREATE the server refuses rolls back.
- `rollback`: every target restored, the last one written first (each recorded restored,
  ROLLBACK_RESTORED with its note, before the next; a fresh run resumes at the first not
  recorded): the Deployment's original template, the Jobs zonemedic created deleted and the
  originals recreated; what could not be
  restored (deleted, replaced or changed by someone else) is left as it is and said in the notes:
  a Job created from the plan that is gone though the rollback did not delete it was deleted by
  its owner, and is never recreated; when the owner deleted every workload of the group, the
  rollback is `SupersededError` (nothing was restored; the incident ends superseded, as a
  training job deleted by its owner does).
- idempotent from the live objects: the planned template on the Deployment means it was patched;
  a planned Job that is missing means it was deleted (create it from the plan); a Job annotated
  as created from the plan means it was created.

What it does not do: write other than through `agent.remediation.writer.ClusterWriter`, wait for
the pods to be bound, or verify (the Remediator does).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from typing import Any

from agent.errors import ClusterWriteError, WriteConflictError
from agent.model.lifecycle import RemediationActionKind
from agent.remediation.observe import ClusterReader, is_terminating
from agent.remediation.plan import Plan, Target, TargetAction
from agent.remediation.recheck import Recheck
from agent.remediation.run import (
    Clock,
    FailedError,
    Journal,
    RollbackError,
    Run,
    Step,
    SupersededError,
    changed,
)
from agent.remediation.template import TemplateState
from agent.remediation.writer import ClusterWriter, fenced_patch, resource_version_of, uid_of
from agent.settings import RemediationSettings

A = RemediationActionKind
# On a batch Job zonemedic created: `incident/<id>/planned` or `incident/<id>/original`.
RECREATED_ANNOTATION = "zonemedic.io/recreated-by"


def _stamp(obj: Mapping[str, Any] | None) -> str | None:
    """The `RECREATED_ANNOTATION` of a Job (None: not one zonemedic created)."""
    if obj is None:
        return None
    found = ((obj.get("metadata") or {}).get("annotations") or {}).get(RECREATED_ANNOTATION)
    return str(found) if found is not None else None


class GroupSteps:
    """Roll out, recreate and restore a generic group for its run (see the module docstring)."""

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

    def _workload(self, target: Target) -> dict[str, Any] | None:
        """The target as live now (None: gone)."""
        return self.reader.object(api_version=target.api_version, plural=target.plural,
                                  namespace=target.namespace, name=target.name)  # fmt: skip

    def apply(self, run: Run) -> None:
        """Before the first write its checks and the dry run; then every target moved, in the
        plan's order; each idempotent from the recorded steps and the live objects."""
        if run.has(Step.RESUMED):
            return
        plan = run.plan
        assert plan is not None
        if not run.written():
            live = self.recheck.confirm(run, None)
            self.recheck.guards(run, live)
            self._dry_run(run, plan)
        for target in plan.targets:
            if target.action is TargetAction.ROLLOUT:
                self._roll_out(run, target, restore=False)
            else:
                self._recreate(run, target, restore=False)
        self.journal.record(run, A.APPLY, Step.RESUMED, message="every workload outside the zone moved")

    def _stamped(self, run: Run, target: Target, state: TemplateState) -> dict[str, Any]:
        """The Job to create from the plan (`state` PLANNED) or the original manifest, annotated
        with the incident and which of the two it is."""
        manifest = target.manifest if state is TemplateState.PLANNED else target.original
        assert manifest is not None
        out = copy.deepcopy(dict(manifest))
        meta = out.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}),
                               RECREATED_ANNOTATION: run.stamp(state)}  # fmt: skip
        return out

    def _dry_run(self, run: Run, plan: Plan) -> None:
        """Every write the plan makes, server-side dry run: each Deployment patch; each Job's
        DELETE and the CREATE of its planned and of its original manifest (`AlreadyExists` while
        the Job to replace holds the name means every admission check passed)."""
        fence = run.fence
        try:
            for target in plan.targets:
                obj = self._workload(target)
                if obj is None or uid_of(obj) != target.uid:
                    raise SupersededError(
                        f"{target.kind} {target.name} was deleted or recreated since the plan"
                    )
                if target.action is TargetAction.ROLLOUT:
                    patch = fenced_patch(target.template_patch(), obj, locked=False)
                    self.writer.patch_deployment(target.namespace, target.name, patch,
                                                 fence=fence, dry_run=True)  # fmt: skip
                    continue
                # a 409 on the DELETE: changed since read (a status write), the delete re-reads;
                # on a CREATE: AlreadyExists, admitted; only the name is taken (the Job to replace)
                with contextlib.suppress(WriteConflictError):
                    self.writer.delete_job(target.namespace, target.name, uid=target.uid,
                                           resource_version=resource_version_of(obj), fence=fence, dry_run=True)  # fmt: skip
                for state in (TemplateState.PLANNED, TemplateState.ORIGINAL):
                    with contextlib.suppress(WriteConflictError):
                        self.writer.create_job(target.namespace, self._stamped(run, target, state),
                                               fence=fence, dry_run=True)  # fmt: skip
        except ClusterWriteError as exc:
            self.journal.record(run, A.DRY_RUN, Step.DRY_RUN, succeeded=False, message=exc.message)
            raise FailedError(f"the server-side dry run refused a change: {exc.message}") from None
        self.journal.record(run, A.DRY_RUN, Step.DRY_RUN, message="dryRun=All accepted every change")

    def _roll_out(self, run: Run, target: Target, *, restore: bool) -> str | None:
        """Bring the Deployment's template to the planned (or, restoring, the original) one;
        idempotent from the live template. Restoring returns a note when there was nothing it
        could restore."""
        want = TemplateState.ORIGINAL if restore else TemplateState.PLANNED
        where = f"Deployment {target.namespace}/{target.name}"
        fail = FailedError if restore else RollbackError
        for _attempt in range(self.settings.max_conflict_retries + 1):
            obj = self._workload(target)
            if obj is None or uid_of(obj) != target.uid:
                if restore:
                    return f"{where} was deleted or recreated by its owner: nothing to restore"
                raise changed(run, f"{where} was deleted or recreated")
            state = target.state_of(obj)
            if state is want:
                if not restore and not run.has(Step.ROLLED_OUT, target=target.name):
                    self.journal.record(run, A.APPLY, Step.ROLLED_OUT, extra={"target": target.name},
                                        message=f"Deployment {target.name}: planned template found on it")  # fmt: skip
                return None
            if state is TemplateState.OTHER:
                if restore:
                    return f"{where}: its template was changed by someone else; left as it is"
                raise changed(run, f"{where}: its template was changed by someone else")
            step = Step.RESTORING if restore else Step.ROLLING_OUT
            self.journal.intend(run, step, target=target, obj=obj, write="patch",
                                message=f"{where}: template patch about to be sent")  # fmt: skip
            patch = fenced_patch(target.template_patch(restore=restore), obj, locked=True)
            try:
                self.writer.patch_deployment(target.namespace, target.name, patch, fence=run.fence)
            except WriteConflictError:
                continue
            except ClusterWriteError as exc:
                raise fail(f"the patch of {where} was refused: {exc.message}") from None
            if not restore:
                self.journal.record(run, A.APPLY, Step.ROLLED_OUT, extra={"target": target.name},
                                    message=f"Deployment {target.name}: template patched (rollout)")  # fmt: skip
            return None
        raise fail(f"{where} kept changing (HTTP 409)")

    def _recreate(self, run: Run, target: Target, *, restore: bool) -> str | None:
        """Bring the batch Job to one created from the plan (or, restoring, the original Job or
        one created from its manifest); idempotent from the live object: the Job planned (its
        uid) is deleted, one being deleted is waited for, a missing one is created, one carrying
        this incident's annotation is ours. Restoring returns a note when there was nothing it
        could restore."""
        want = TemplateState.ORIGINAL if restore else TemplateState.PLANNED
        where = f"Job {target.namespace}/{target.name}"
        fail = FailedError if restore else RollbackError
        deadline = self.clock.now() + self.settings.suspend_timeout
        conflicts = 0
        while True:
            obj = self._workload(target)
            stamp = _stamp(obj)
            gone = obj is None or (is_terminating(obj) and uid_of(obj) == target.uid)
            if (gone and not restore and run.has(Step.JOB_DELETING, target=target.name)
                    and not run.has(Step.JOB_DELETED, target=target.name)):  # fmt: skip
                self.journal.record(run, A.APPLY, Step.JOB_DELETED, extra={"target": target.name, "uid": target.uid},
                                    message=f"Job {target.name}: found deleted (its deletion landed unrecorded)")  # fmt: skip
            if (obj is None and restore and run.has(Step.JOB_CREATED, target=target.name)
                    and not run.has(Step.RESTORING, target=target.name)):  # fmt: skip
                # the Job created from the plan is gone and not by the rollback's DELETE: its
                # owner deleted it; never recreated behind the owner's back
                return f"{where} was deleted by its owner after zonemedic created it: nothing to restore"
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
                        raise FailedError(
                            f"recreating {where} from its original manifest (recorded in the "
                            f"plan) was refused: {exc.message}"
                        ) from None
                    raise RollbackError(f"creating {where} was refused: {exc.message}") from None
                if not restore:
                    self.journal.record(run, A.APPLY, Step.JOB_CREATED, extra={"target": target.name},
                                        message=f"Job {target.name} recreated with the new template")  # fmt: skip
                return None
            if is_terminating(obj):
                if self.clock.now() >= deadline:
                    raise fail(f"{where} still present "
                               f"{self.settings.suspend_timeout.total_seconds():g}s after its deletion")  # fmt: skip
                self.journal.pause(run)
                continue
            if stamp == run.stamp(want) or (restore and uid_of(obj) == target.uid):
                if not restore and not run.has(Step.JOB_CREATED, target=target.name):
                    self.journal.record(run, A.APPLY, Step.JOB_CREATED, extra={"target": target.name},
                                        message=f"Job {target.name}: the one created from the plan found")  # fmt: skip
                return None
            ours = stamp == run.stamp(TemplateState.PLANNED) if restore else uid_of(obj) == target.uid
            if not ours:
                if restore:
                    return f"{where} was replaced by someone else (uid {uid_of(obj)}); left as it is"
                raise changed(run, f"{where} was replaced by someone else (uid {uid_of(obj)})")
            step = Step.RESTORING if restore else Step.JOB_DELETING
            self.journal.intend(run, step, target=target, obj=obj, write="delete",
                                message=f"{where}: Foreground deletion about to be sent")  # fmt: skip
            try:
                self.writer.delete_job(target.namespace, target.name, uid=uid_of(obj),
                                       resource_version=resource_version_of(obj), fence=run.fence)  # fmt: skip
            except WriteConflictError:
                conflicts += 1  # changed since read (or replaced): look again
                if conflicts > self.settings.max_conflict_retries:
                    raise fail(f"{where} kept changing (HTTP 409)") from None
                continue
            except ClusterWriteError as exc:
                raise fail(f"deleting {where} was refused: {exc.message}") from None
            if not restore:
                self.journal.record(run, A.APPLY, Step.JOB_DELETED,
                                    extra={"target": target.name, "uid": uid_of(obj)},
                                    message=f"Job {target.name} deleted (Foreground) for recreation")  # fmt: skip

    def rollback(self, run: Run) -> list[str]:
        """Restore every target (the last one written first); the notes say what could not be."""
        plan = run.plan
        assert plan is not None
        notes: list[str] = []
        for target in reversed(plan.targets):
            done = [a for a in run.detail.actions if a.payload.get("step") == Step.ROLLBACK_RESTORED.value
                    and a.payload.get("target") == target.name]  # fmt: skip
            if done:  # restored by a run that stopped later: its note as recorded
                note = done[-1].payload.get("note")
            else:
                if target.action is TargetAction.ROLLOUT:
                    note = self._roll_out(run, target, restore=True)
                else:
                    note = self._recreate(run, target, restore=True)
                self.journal.record(run, A.ROLLBACK, Step.ROLLBACK_RESTORED,
                                    message=note or f"{target.kind} {target.name} restored",
                                    extra={"target": target.name, "note": note})  # fmt: skip
            if note is not None:
                notes.append(str(note))
        if len(notes) == len(plan.targets) and all(self._workload(t) is None for t in plan.targets):
            # the owner deleted every workload of the group meanwhile: nothing was restored
            raise SupersededError("; ".join(["the group's workloads were deleted by their owner meanwhile", *notes]))
        return notes
