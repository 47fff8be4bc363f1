"""The twin's batch/v1 Job controller, plus the API server's rule that a Job's template is immutable.

Started by `cluster.TwinCluster`. Keeps `min(parallelism, completions - succeeded)` pods running for
each Job, counts succeeded/failed pods, honours `spec.suspend` (deletes active pods, Suspended
condition; resume creates them again) and `backoffLimit`, and writes Complete/Failed. A
`completionMode: Indexed` Job keeps one pod per completion index not yet succeeded (lowest
first): pod `<job>-<index>-<random>`, hostname `<job>-<index>`, the index in the annotation and
label `batch.kubernetes.io/job-completion-index` and the env `JOB_COMPLETION_INDEX`, and
`status.completedIndexes`. Every pod carries the labels `batch.kubernetes.io/controller-uid`,
`batch.kubernetes.io/job-name` (and the legacy `controller-uid`, `job-name`); `status.active`
counts pods not terminating, `status.terminating` those being deleted. The admission
hook answers 422 to an update that changes `spec.template`, except the scheduling directives
(nodeSelector, tolerations, affinity, labels, annotations) of a suspended Job that has not
started, exactly as the real API server validates. It does not run pods (the kubelet does).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, cast

from agent.twin.apierror import ApiError
from agent.twin.clock import TwinClock
from agent.twin.controller import Controller, Subscription
from agent.twin.operator_conditions import is_true, set_condition
from agent.twin.operator_events import EventRecorder, timestamp
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from agent.twin.store import Store
from agent.twin.watch import WatchEvent

log = logging.getLogger(__name__)

PODS = lookup("pods")
JOBS = lookup("jobs", group="batch")
LABEL_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # annotation and label (1.28+)
INDEX_ENV = "JOB_COMPLETION_INDEX"
INDEXED = "Indexed"
CREATE_RETRY_SECONDS = 0.2  # model seconds before a refused pod creation is tried again
MUTABLE_WHEN_SUSPENDED = ("nodeSelector", "tolerations", "affinity", "schedulingGates")


def _template_without_scheduling(template: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(template))
    meta = out.setdefault("metadata", {}) or {}
    meta.pop("labels", None)
    meta.pop("annotations", None)
    spec = out.setdefault("spec", {}) or {}
    for key in MUTABLE_WHEN_SUSPENDED:
        spec.pop(key, None)
    return out


def template_admission(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> None:
    """Refuse (422) a change to spec.template, as the API server does for batch/v1 Jobs."""
    if old is None:
        return
    old_template = (old.get("spec") or {}).get("template") or {}
    new_template = (new.get("spec") or {}).get("template") or {}
    if old_template == new_template:
        return
    suspended = bool((old.get("spec") or {}).get("suspend")) and not (old.get("status") or {}).get(
        "startTime"
    )
    if suspended and _template_without_scheduling(old_template) == _template_without_scheduling(
        new_template
    ):
        return
    name = (new.get("metadata") or {}).get("name", "")
    message = "field is immutable"
    raise ApiError(
        422,
        "Invalid",
        f'Job.batch "{name}" is invalid: spec.template: Invalid value: '
        f"core.PodTemplateSpec{{...}}: {message}",
        details={
            "name": name,
            "group": "batch",
            "kind": "Job",
            "causes": [{"reason": "FieldValueInvalid", "message": f"Invalid value: {message}",
                        "field": "spec.template"}],
        },
    )  # fmt: skip


def _terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def completion_index(pod: Mapping[str, Any]) -> int | None:
    """The pod's completion index (Indexed Jobs), from its annotation."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(COMPLETION_INDEX)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def compress_indexes(indexes: set[int]) -> str:
    """`status.completedIndexes` as the Job controller writes it: `0-2,5`."""
    out: list[str] = []
    ordered = sorted(indexes)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


class JobController(Controller):
    def __init__(self, store: Store, *, clock: TwinClock) -> None:
        super().__init__(store, name="job-controller", clock=clock)
        self._events = EventRecorder(store, component="job-controller")

    def _subscriptions(self) -> list[Subscription]:
        return [Subscription(JOBS, self._on_job, since="0"), Subscription(PODS, self._on_pod)]

    def _on_job(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        if event.type != "DELETED":
            self._queue.add((str(meta.get("namespace")), str(meta.get("name"))))

    def _on_pod(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "Job" and ref.get("apiVersion") == "batch/v1":
                self._queue.add((str(meta.get("namespace")), str(ref.get("name"))))

    def _reconcile(self, raw: Hashable) -> float | None:
        namespace, name = cast(tuple[str, str], raw)
        job = self._get_live(JOBS, name, namespace=namespace)
        if job is None:
            return None
        retry: float | None = None
        meta = job.get("metadata") or {}
        uid = str(meta.get("uid"))
        spec = job.get("spec") or {}
        status = dict(job.get("status") or {})
        conditions = list(status.get("conditions") or [])
        pods = self._store.list(
            PODS, namespace=namespace, label_selector=f"{LABEL_CONTROLLER_UID}={uid}"
        )[0]
        active = [
            p for p in pods if not _terminal(p) and not p["metadata"].get("deletionTimestamp")
        ]
        terminating = sum(
            1 for p in pods if not _terminal(p) and p["metadata"].get("deletionTimestamp")
        )
        indexed = spec.get("completionMode") == INDEXED
        done_indexes = {
            i for p in pods if (p.get("status") or {}).get("phase") == "Succeeded"
            and (i := completion_index(p)) is not None
        }  # fmt: skip
        succeeded = (
            len(done_indexes) if indexed
            else sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        )  # fmt: skip
        failed = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Failed")
        finished = is_true(conditions, "Complete") or is_true(conditions, "Failed")
        new_status: dict[str, Any] = dict(status)
        if spec.get("suspend") and not finished:
            for pod in active:
                self._delete(pod)
            active = []
            conditions = set_condition(conditions, "Suspended", status=True, reason="JobSuspended",
                                       message="Job suspended")  # fmt: skip
            new_status.pop("startTime", None)
        elif not finished:
            if is_true(conditions, "Suspended"):
                conditions = set_condition(conditions, "Suspended", status=False, reason="JobResumed",
                                           message="Job resumed")  # fmt: skip
            completions = spec.get("completions")
            parallelism = int(spec.get("parallelism", 1))
            target = int(completions) if completions is not None else 1
            if succeeded >= target:
                for pod in active:
                    self._delete(pod)
                active = []
                conditions = set_condition(conditions, "SuccessCriteriaMet", status=True,
                                           reason="CompletionsReached", message="Reached expected number of succeeded pods")  # fmt: skip
                conditions = set_condition(conditions, "Complete", status=True, reason="CompletionsReached",
                                           message="Reached expected number of succeeded pods")  # fmt: skip
                new_status["completionTime"] = timestamp()
            elif failed > int(spec.get("backoffLimit", 6)):
                for pod in active:
                    self._delete(pod)
                active = []
                conditions = set_condition(conditions, "Failed", status=True, reason="BackoffLimitExceeded",
                                           message="Job has reached the specified backoff limit")  # fmt: skip
            else:
                room = max(0, min(parallelism, target - succeeded) - len(active))
                wanted: Sequence[int | None] = [None] * room
                if indexed:
                    running = {i for p in active if (i := completion_index(p)) is not None}
                    wanted = [i for i in range(target) if i not in done_indexes | running][:room]
                for index in wanted:
                    created = self._create_pod(job, index=index)
                    if created is None:
                        retry = CREATE_RETRY_SECONDS
                        break
                    active.append(created)
                new_status.setdefault("startTime", timestamp())
        if indexed:
            new_status["completedIndexes"] = compress_indexes(done_indexes)
        new_status.update(
            {
                "active": len(active),
                "terminating": terminating,
                "succeeded": succeeded,
                "failed": failed,
                "ready": sum(
                    1 for p in active if (p.get("status") or {}).get("phase") == "Running"
                ),
                "conditions": conditions,
            }
        )
        if new_status != status:
            body = {
                "status": {
                    **new_status,
                    **(
                        {"startTime": None}
                        if "startTime" not in new_status and "startTime" in status
                        else {}
                    ),
                }
            }
            try:
                self._store.patch(JOBS, name, body, namespace=namespace, patch_type=PatchType.MERGE,
                                  subresource="status")  # fmt: skip
            except ApiError as exc:
                log.debug("job status not written: %s", exc.message)
        return retry

    def _delete(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        try:
            self._store.delete(PODS, str(meta.get("name")), namespace=str(meta.get("namespace")))
        except ApiError:
            return

    def _create_pod(
        self, job: Mapping[str, Any], *, index: int | None = None
    ) -> dict[str, Any] | None:
        """Create one pod; None when the API server refuses it (an admission webhook, say):
        a Warning Event `FailedCreate`, as the Job controller records, and a retry later."""
        meta = job.get("metadata") or {}
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        tmeta = template.get("metadata") or {}
        labels = dict(tmeta.get("labels") or {})
        labels.update({LABEL_CONTROLLER_UID: str(meta.get("uid")), LABEL_JOB_NAME: str(meta.get("name")),
                       "controller-uid": str(meta.get("uid")), "job-name": str(meta.get("name"))})  # fmt: skip
        annotations = dict(tmeta.get("annotations") or {})
        spec = template.get("spec") or {}
        prefix = f"{meta.get('name')}-"
        if index is not None:
            prefix = f"{meta.get('name')}-{index}-"
            labels[COMPLETION_INDEX] = str(index)
            annotations[COMPLETION_INDEX] = str(index)
            spec["hostname"] = f"{meta.get('name')}-{index}"
            env = {"name": INDEX_ENV, "valueFrom": {"fieldRef": {
                "apiVersion": "v1", "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}}
            for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
                kept = [e for e in container.get("env") or [] if e.get("name") != INDEX_ENV]
                container["env"] = [*kept, env]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": prefix,
                "namespace": meta.get("namespace"),
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta.get("name"),
                                     "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": spec,
        }  # fmt: skip
        try:
            created = self._store.create(PODS, pod)
        except ApiError as exc:
            self._events.record(job, reason="FailedCreate", warning=True,
                                message=f"Error creating: {exc.message}")
            return None
        self._events.record(
            job, reason="SuccessfulCreate", message=f"Created pod: {created['metadata']['name']}"
        )
        return created
