"""What the remediation steps read off a live job, and how they wait for it, shared by every family.

Who calls it: the steps of each workload family (`agent.remediation.training_steps`,
`jobset_steps`, `kueue_steps`). What it holds:
- `condition_true`: whether an object's status condition of a type is True (a kind without the
  condition type, None, counts as True);
- `planned_job`: the job read now, the one the plan was made for (same uid), else
  `SupersededError` (worded for before or during the writes);
- `JobWaiter`: waiting, one journal pause at a time, until a state holds within a budget (else
  the error the caller names), and renewing a JobSet's child Jobs: deleting (intent first,
  bound to each one's uid) the ones a predicate calls stale, then waiting until the JobSet
  controller has created them again without it.
What it does not do: decide what is stale or what to write otherwise, or verify.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from agent.model.workload import BATCH_JOB
from agent.remediation.observe import ClusterReader
from agent.remediation.plan import Target, TargetAction
from agent.remediation.run import Clock, Journal, Run, Step, SupersededError
from agent.remediation.writer import ClusterWriter, uid_of

Obj = dict[str, Any]


def condition_true(obj: Mapping[str, Any], kind: str | None) -> bool:
    if kind is None:
        return True
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])  # fmt: skip


def planned_job(reader: ClusterReader, run: Run, *, api_version: str, during: bool) -> Obj:
    """The run's job as planned (same uid), else `SupersededError`."""
    job = reader.job(run.ref, api_version=api_version)
    if job is None or uid_of(job) != run.planned().preconditions.uid:
        raise SupersededError(
            "the job was deleted or recreated during remediation: nothing to restore" if during
            else "the job was deleted or recreated since the plan")  # fmt: skip
    return job


def child_target(job: Mapping[str, Any]) -> Target:
    """A child Job as a target of its own (what the journal's intent names)."""
    meta = job.get("metadata") or {}
    return Target(action=TargetAction.RECREATE, api_version=BATCH_JOB.api_version, kind=BATCH_JOB.kind,
                  plural=BATCH_JOB.plural, namespace=str(meta.get("namespace")),
                  name=str(meta.get("name")), uid=meta.get("uid"),
                  resource_version=meta.get("resourceVersion"), changes=())  # fmt: skip


class JobWaiter:
    """Waits for a job's state within a budget, and renews a JobSet's stale child Jobs."""

    def __init__(self, *, reader: ClusterReader, writer: ClusterWriter, journal: Journal,
                 clock: Clock) -> None:  # fmt: skip
        self.reader = reader
        self.writer = writer
        self.journal = journal
        self.clock = clock

    def until(self, run: Run, done: Callable[[], bool], *, budget: timedelta,
              fail: Callable[[str], Exception], what: str) -> None:  # fmt: skip
        """Pause until `done()`; past `budget`, raise `fail(what within <budget>s)`."""
        deadline = self.clock.now() + budget
        while not done():
            if self.clock.now() >= deadline:
                raise fail(f"{what} within {budget.total_seconds():g}s")
            self.journal.pause(run)

    def children(self, run: Run) -> list[Obj]:
        """The child Jobs, those being deleted included (a stale one counts until it is gone)."""
        jobs = self.reader.child_jobs(run.ref)
        return [{**j, "metadata": {k: v for k, v in (j.get("metadata") or {}).items()
                                   if k != "deletionTimestamp"}} for j in jobs]  # fmt: skip

    def renew_children(
        self, run: Run, stale: Callable[[Sequence[Mapping[str, Any]]], list[Mapping[str, Any]]], *,
        step: Step, budget: timedelta, fail: Callable[[str], Exception], why: str,
    ) -> None:  # fmt: skip
        """Delete the child Jobs `stale` names (intent `step` first, each bound to its uid),
        then wait until the JobSet controller has created them again and `stale` names none."""
        for child in stale(self.reader.child_jobs(run.ref)):
            target = child_target(child)
            self.journal.intend(run, step, target=target, obj=child, write="delete",
                                message=f"child Job {why} about to be deleted")  # fmt: skip
            self.writer.delete_job(target.namespace, target.name, uid=uid_of(child),
                                   resource_version=None, fence=run.fence)  # fmt: skip
        self.until(run, lambda: not stale(self.children(run)), budget=budget, fail=fail,
                   what="the stale child Jobs were not created again")  # fmt: skip
