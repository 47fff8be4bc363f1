"""The twin's JobSet controller (`jobset.x-k8s.io/v1alpha2`), as kubernetes-sigs/jobset runs JobSets.

Started by `cluster.TwinCluster`. For each JobSet (unless `spec.managedBy` names another
controller) it keeps the child Jobs and the headless Service `jobset_children` describes, and
writes the status: `replicatedJobsStatus`, `restarts`, `terminalState` and the conditions
`Suspended` (reasons SuspendedJobs / ResumeJobs), `Completed` (AllJobsCompleted) and `Failed`
(FailedJobs, ReachedMaxRestarts), each change also an Event. Semantics:
- a replicated job's Jobs are created once every replicated job it `dependsOn` is Ready or
  Complete (initializers before the trainers);
- `spec.suspend: true` suspends every active child Job (the Job controller deletes their pods;
  the Jobs stay); `false` resumes them: the JobSet's pod-template labels, annotations and
  nodeSelector are merged into each Job's template and tolerations and scheduling gates
  unioned (`resume_template`), after clearing the Job's `status.startTime`;
- a failed child Job fails the JobSet, or, with `failurePolicy.maxRestarts` not yet reached,
  restarts it (every Job recreated, `status.restarts` + 1);
- the success policy (All by default, or Any, of the targeted replicated jobs) completes it, and
  a finished JobSet's active Jobs are deleted.
It reacts to watch events only; it does not create pods (the Job controller does).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, cast

from agent.twin import jobset_children as children
from agent.twin.apierror import ApiError
from agent.twin.clock import TwinClock
from agent.twin.controller import Controller, Subscription, owned_by
from agent.twin.deletion import Propagation
from agent.twin.operator_conditions import is_true, set_status_condition
from agent.twin.operator_events import EventRecorder
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from agent.twin.store import Store
from agent.twin.watch import WatchEvent

log = logging.getLogger(__name__)

JOBSETS = lookup("jobsets")
BATCH_JOBS = lookup("jobs", group="batch")
SERVICES = lookup("services")
Obj = dict[str, Any]


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


class JobSetController(Controller):
    def __init__(self, store: Store, *, clock: TwinClock) -> None:
        super().__init__(store, name="jobset-controller", clock=clock)
        self._events = EventRecorder(store, component="jobset-controller")

    def _subscriptions(self) -> list[Subscription]:
        return [Subscription(JOBSETS, self._on_jobset, since="0"),
                Subscription(BATCH_JOBS, self._on_job)]  # fmt: skip

    def _on_jobset(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        if event.type != "DELETED":
            self._queue.add((str(meta.get("namespace")), str(meta.get("name"))))

    def _on_job(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "JobSet" and ref.get("apiVersion") == children.GROUP_VERSION:
                self._queue.add((str(meta.get("namespace")), str(ref.get("name"))))

    # --- reconcile ------------------------------------------------------------------------------

    def _reconcile(self, raw: Hashable) -> float | None:
        namespace, name = cast(tuple[str, str], raw)
        js = self._get_live(JOBSETS, name, namespace=namespace)
        if js is None or children.managed_elsewhere(js):
            return None
        uid = str((js.get("metadata") or {}).get("uid"))
        status: Obj = dict(js.get("status") or {})
        restarts = int(status.get("restarts", 0))
        owned = [
            j for j in self._store.list(BATCH_JOBS, namespace=namespace,
                                        label_selector=f"{children.JOBSET_NAME}={name}")[0]
            if owned_by(j, uid)
        ]  # fmt: skip
        previous = [j for j in owned if _attempt(j) < restarts]
        current = [j for j in owned if _attempt(j) >= restarts]
        active = [j for j in current if not children.job_finished(j)]
        failed = [j for j in current if children.job_finished(j) == "Failed"]
        successful = [j for j in current if children.job_finished(j) == "Complete"]
        statuses = children.replicated_job_statuses(js, current)
        conditions: list[Obj] = list(status.get("conditions") or [])
        new_status: Obj = {**status, "replicatedJobsStatus": statuses, "restarts": restarts}
        if is_true(conditions, "Completed") or is_true(conditions, "Failed"):
            self._delete_jobs(active)
            self._write(js, new_status, conditions)
            return None
        self._delete_jobs(previous)
        if failed:
            conditions = self._on_failure(js, new_status, conditions, failed)
        elif successful and children.success_reached(js, successful):
            conditions = self._condition(js, conditions, "Completed", value=True,
                                         reason="AllJobsCompleted",
                                         message="jobset completed successfully")
            new_status["terminalState"] = "Completed"
        else:
            if children.dns_hostnames(js):
                self._ensure_service(js)
            self._create_jobs(js, owned, statuses)
            if children.is_suspended(js):
                self._suspend(active)
                conditions = self._condition(js, conditions, "Suspended", value=True,
                                             reason="SuspendedJobs", message="jobset is suspended")
            else:
                self._resume(js, active, statuses)
                conditions = self._condition(js, conditions, "Suspended", value=False,
                                             reason="ResumeJobs", message="jobset is resumed")
        self._write(js, new_status, conditions)
        return None

    def _condition(self, js: Obj, conditions: list[Obj], kind: str, *, value: bool, reason: str,
                   message: str) -> list[Obj]:  # fmt: skip
        updated = set_status_condition(conditions, kind, status=value, reason=reason,
                                       message=message, add_when_false=False)  # fmt: skip
        if _without_times(updated) != _without_times(conditions):
            self._events.record(js, reason=reason, message=message)
        return updated

    def _on_failure(self, js: Obj, status: Obj, conditions: list[Obj],
                    failed: Sequence[Mapping[str, Any]]) -> list[Obj]:  # fmt: skip
        policy = children.spec(js).get("failurePolicy")
        first = sorted(_name(j) for j in failed)[0]
        if isinstance(policy, Mapping):
            counted = int(status.get("restartsCountTowardsMax", 0))
            if counted < int(policy.get("maxRestarts", 0)):
                status["restarts"] = int(status.get("restarts", 0)) + 1
                status["restartsCountTowardsMax"] = counted + 1
                self._events.record(js, reason="Restarting",
                                    message=f"restarting jobset, attempt {status['restarts']}")
                return conditions
            status["terminalState"] = "Failed"
            return self._condition(js, conditions, "Failed", value=True,
                                   reason="ReachedMaxRestarts",
                                   message="jobset failed due to reaching max number of restarts")
        status["terminalState"] = "Failed"
        return self._condition(js, conditions, "Failed", value=True, reason="FailedJobs",
                               message="jobset failed due to one or more job failures "
                               f"(first failed job: {first})")  # fmt: skip

    def _ensure_service(self, js: Obj) -> None:
        try:
            self._store.create(SERVICES, children.headless_service(js))
        except ApiError as exc:
            if exc.code != 409:
                self._events.record(js, reason="HeadlessServiceCreationFailed",
                                    message=exc.message, warning=True)

    def _create_jobs(self, js: Obj, owned: Sequence[Mapping[str, Any]],
                     statuses: Sequence[Mapping[str, Any]]) -> None:  # fmt: skip
        existing = {_name(j) for j in owned}
        for rjob in children.replicated_jobs(js):
            if not children.dependency_reached(js, rjob, statuses):
                continue
            for index in range(children.replicas(rjob)):
                wanted = children.desired_job(js, rjob, index)
                if wanted["metadata"]["name"] in existing:
                    continue
                try:
                    self._store.create(BATCH_JOBS, wanted)
                except ApiError as exc:
                    if exc.code == 409:
                        continue
                    self._events.record(js, reason="JobCreationFailed", warning=True,
                                        message=f"job {wanted['metadata']['name']!r} creation "
                                        f"failed with error: {exc.message}")  # fmt: skip

    def _suspend(self, active: Sequence[Mapping[str, Any]]) -> None:
        for job in active:
            if (job.get("spec") or {}).get("suspend"):
                continue
            meta = job["metadata"]
            try:
                self._store.patch(BATCH_JOBS, meta["name"],
                                  {"metadata": {"resourceVersion": meta["resourceVersion"]},
                                   "spec": {"suspend": True}},
                                  namespace=meta["namespace"], patch_type=PatchType.MERGE)
            except ApiError as exc:
                log.debug("job %s not suspended: %s", meta["name"], exc.message)

    def _resume(self, js: Obj, active: Sequence[Mapping[str, Any]],
                statuses: Sequence[Mapping[str, Any]]) -> None:  # fmt: skip
        templates = {str(r.get("name")): ((r.get("template") or {}).get("spec") or {}).get(
            "template") or {} for r in children.replicated_jobs(js)}
        by_rjob: dict[str, list[Mapping[str, Any]]] = {}
        for job in active:
            owner = str((job["metadata"].get("labels") or {}).get(children.REPLICATED_JOB, ""))
            by_rjob.setdefault(owner, []).append(job)
        for rjob in children.replicated_jobs(js):
            if not children.dependency_reached(js, rjob, statuses):
                continue
            for job in by_rjob.get(str(rjob.get("name")), []):
                if (job.get("spec") or {}).get("suspend"):
                    self._resume_job(job, templates.get(str(rjob.get("name")), {}))

    def _resume_job(self, job: Mapping[str, Any], template: Mapping[str, Any]) -> None:
        meta = job["metadata"]
        try:
            current = job
            if (job.get("status") or {}).get("startTime"):
                current = self._store.patch(BATCH_JOBS, meta["name"], {"status": {"startTime": None}},
                                            namespace=meta["namespace"], patch_type=PatchType.MERGE,
                                            subresource="status")  # fmt: skip
            resumed = {**current, "spec": {**current["spec"], "suspend": False,
                                           "template": children.resume_template(
                                               current["spec"].get("template") or {}, template)}}
            self._store.update(BATCH_JOBS, resumed, namespace=meta["namespace"])
        except ApiError as exc:
            log.debug("job %s not resumed: %s", meta["name"], exc.message)

    def _delete_jobs(self, jobs: Sequence[Mapping[str, Any]]) -> None:
        for job in jobs:
            meta = job["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            try:
                self._store.delete(BATCH_JOBS, meta["name"], namespace=meta["namespace"],
                                   propagation=Propagation.FOREGROUND)
            except ApiError:
                continue

    def _write(self, js: Obj, status: Obj, conditions: list[Obj]) -> None:
        new_status = {**status, "conditions": conditions}
        if not conditions:
            new_status.pop("conditions")
        if new_status == (js.get("status") or {}):
            return
        meta = js["metadata"]
        try:
            self._store.update(JOBSETS, {**js, "status": new_status}, namespace=meta["namespace"],
                               subresource="status")
        except ApiError as exc:
            log.debug("jobset %s status not written: %s", meta["name"], exc.message)
            self._queue.add_after((meta["namespace"], meta["name"]), 0.05)


def _attempt(job: Mapping[str, Any]) -> int:
    raw = ((job.get("metadata") or {}).get("labels") or {}).get(children.RESTART_ATTEMPT, "0")
    try:
        return int(raw)
    except ValueError:
        return 0


def _without_times(conditions: Sequence[Mapping[str, Any]]) -> list[Obj]:
    return [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in conditions]
