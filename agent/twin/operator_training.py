"""The twin's Kubeflow training operator: kubeflow.org/v1 jobs and mpi-operator's v2beta1 MPIJob.

Started by `cluster.TwinCluster`. For every training job it keeps the pods and headless services
`operator_kinds` describes (v2beta1 MPIJob: worker pods plus a launcher batch Job), and writes the
job's conditions (Created, Running, Restarting, Suspended, Succeeded, Failed), replicaStatuses (an
entry per replica type; counters that drop to zero are removed) and startTime. Semantics follow the Kubeflow training-operator v1 (and mpi-operator v2beta1):
- a missing pod is created from the job's *current* template; an existing pod is never compared
  with the template, so editing a template moves nothing that runs;
- a pod name still held by a terminating pod is created only once that pod is gone;
- `runPolicy.suspend: true` deletes all pods and services (and suspends the launcher Job);
  `false` recreates them from the current template (for the launcher Job only nodeSelector and
  tolerations are re-synced, as mpi-operator v0.8+ does);
- a finished job (Succeeded/Failed) is never resumed.
It reacts to watch events only; it does not schedule or run pods.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import Any, cast

from agent.twin.apierror import ApiError
from agent.twin.clock import TwinClock
from agent.twin.controller import Controller, Subscription, owned_by
from agent.twin.operator_conditions import is_true, set_condition
from agent.twin.operator_events import EventRecorder, timestamp
from agent.twin.operator_kinds import (
    KINDS,
    LABEL_JOB_NAME,
    MPI_V2,
    TrainingKind,
    desired_launcher_job,
    desired_pods,
    desired_services,
    is_suspended,
    launcher_scheduling,
    replica_specs,
)
from agent.twin.patch import PatchType
from agent.twin.resources import ResourceType, lookup
from agent.twin.store import Store
from agent.twin.watch import WatchEvent

log = logging.getLogger(__name__)

PODS = lookup("pods")
SERVICES = lookup("services")
BATCH_JOBS = lookup("jobs", group="batch")
JobKey = tuple[str, str, str, str]  # version, plural, namespace, name


def _resource(kind: TrainingKind) -> ResourceType:
    return lookup(kind.plural, group="kubeflow.org", version=kind.version)


class TrainingOperator(Controller):
    def __init__(self, store: Store, *, clock: TwinClock) -> None:
        super().__init__(store, name="training-operator", clock=clock)
        self._events = EventRecorder(store, component="training-operator")
        self._kinds_by_api = {(k.api_version, k.kind): k for k in KINDS.values()}

    def _subscriptions(self) -> list[Subscription]:
        jobs = [Subscription(_resource(k), self._on_job(k), since="0") for k in KINDS.values()]
        return jobs + [Subscription(rt, self._on_owned) for rt in (PODS, SERVICES, BATCH_JOBS)]

    def _on_job(self, kind: TrainingKind) -> Any:
        def handle(event: WatchEvent) -> None:
            meta = event.object.get("metadata") or {}
            if event.type != "DELETED":
                self._queue.add(
                    (kind.version, kind.plural, str(meta.get("namespace")), str(meta.get("name")))
                )

        return handle

    def _on_owned(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            kind = self._kinds_by_api.get((ref.get("apiVersion"), ref.get("kind")))
            if kind is not None and ref.get("controller"):
                self._queue.add(
                    (kind.version, kind.plural, str(meta.get("namespace")), str(ref.get("name")))
                )

    # --- reconcile ------------------------------------------------------------------------------

    def _reconcile(self, raw: Hashable) -> float | None:
        version, plural, namespace, name = cast(JobKey, raw)
        kind = KINDS[(version, plural)]
        rt = _resource(kind)
        job = self._get_live(rt, name, namespace=namespace)
        if job is None:
            return None
        meta = job.get("metadata") or {}
        uid = str(meta.get("uid"))
        conditions = list((job.get("status") or {}).get("conditions") or [])
        pods = [
            p
            for p in self._store.list(
                PODS, namespace=namespace, label_selector=f"{LABEL_JOB_NAME}={name}"
            )[0]
            if owned_by(p, uid)
        ]
        if not conditions:
            conditions = set_condition(conditions, "Created", status=True, reason=f"{kind.kind}Created",
                                       message=f"{kind.kind} {name} is created.")  # fmt: skip
        if not is_true(conditions, "Succeeded") and self._succeeded(kind, job, pods):
            message = f"{kind.kind} {name} is successfully completed."
            conditions = set_condition(conditions, "Succeeded", status=True, reason=f"{kind.kind}Succeeded",
                                       message=message)  # fmt: skip
            conditions = set_condition(conditions, "Running", status=False, reason=f"{kind.kind}Succeeded",
                                       message=message)  # fmt: skip
            self._events.record(job, reason=f"{kind.kind}Succeeded", message=message)
        finished = is_true(conditions, "Succeeded") or is_true(conditions, "Failed")
        if is_suspended(job):
            self._suspend(kind, job, pods, uid)
            conditions = set_condition(conditions, "Suspended", status=True, reason=f"{kind.kind}Suspended",
                                       message=f"{kind.kind} {name} is suspended.")  # fmt: skip
            conditions = set_condition(conditions, "Running", status=False, reason=f"{kind.kind}Suspended",
                                       message=f"{kind.kind} {name} is suspended.")  # fmt: skip
            self._write_status(rt, job, conditions, pods, suspended=True)
            return None
        if is_true(conditions, "Suspended"):
            conditions = set_condition(conditions, "Suspended", status=False, reason=f"{kind.kind}Resumed",
                                       message=f"{kind.kind} {name} is resumed.")  # fmt: skip
            self._events.record(
                job, reason=f"{kind.kind}Resumed", message=f"{kind.kind} {name} is resumed."
            )
        if finished:
            self._write_status(rt, job, conditions, pods, suspended=False)
            return None
        by_name = {str((p.get("metadata") or {}).get("name")): p for p in pods}
        for wanted in desired_pods(kind, job):
            pod_name = wanted["metadata"]["name"]
            if pod_name in by_name:
                continue
            try:
                created = self._store.create(PODS, wanted)
            except ApiError as exc:
                if exc.code != 409:  # 409: the old pod of that name is still terminating
                    raise
                continue
            by_name[pod_name] = created
            self._events.record(
                job, reason="SuccessfulCreatePod", message=f"Created pod: {pod_name}"
            )
        self._ensure_services(kind, job, namespace)
        if kind is MPI_V2:
            self._ensure_launcher(job, namespace)
        pods = list(by_name.values())
        failed_policy = self._handle_failures(kind, job, pods)
        if failed_policy:
            conditions = set_condition(conditions, "Failed", status=True, reason=f"{kind.kind}Failed",
                                       message=failed_policy)  # fmt: skip
            conditions = set_condition(conditions, "Running", status=False, reason=f"{kind.kind}Failed",
                                       message=failed_policy)  # fmt: skip
        else:
            conditions = self._running_conditions(kind, job, pods, conditions)
        self._write_status(rt, job, conditions, pods, suspended=False)
        return None

    def _succeeded(self, kind: TrainingKind, job: Mapping[str, Any], pods: list[Any]) -> bool:
        """The coordinator succeeded (training-operator's default success policy); for mpi-operator
        the launcher Job completed."""
        if kind is MPI_V2:
            name = f"{job['metadata']['name']}-launcher"
            try:
                launcher = self._store.get(BATCH_JOBS, name, namespace=job["metadata"]["namespace"])
            except ApiError:
                return False
            return is_true((launcher.get("status") or {}).get("conditions") or [], "Complete")
        coordinators = [
            p
            for p in pods
            if (p["metadata"].get("labels") or {}).get("training.kubeflow.org/job-role") == "master"
        ]
        return bool(coordinators) and all(
            (p.get("status") or {}).get("phase") == "Succeeded" for p in coordinators
        )

    def _suspend(
        self, kind: TrainingKind, job: Mapping[str, Any], pods: list[Any], uid: str
    ) -> None:
        namespace = str((job.get("metadata") or {}).get("namespace"))
        for pod in pods:
            if not (pod.get("metadata") or {}).get("deletionTimestamp"):
                try:
                    self._store.delete(PODS, pod["metadata"]["name"], namespace=namespace)
                except ApiError:
                    continue
        for svc in self._store.list(SERVICES, namespace=namespace)[0]:
            if owned_by(svc, uid):
                try:
                    self._store.delete(SERVICES, svc["metadata"]["name"], namespace=namespace)
                except ApiError:
                    continue
        if kind is MPI_V2:
            name = f"{job['metadata']['name']}-launcher"
            try:
                launcher = self._store.get(BATCH_JOBS, name, namespace=namespace)
            except ApiError:
                return
            if not (launcher.get("spec") or {}).get("suspend"):
                self._store.patch(BATCH_JOBS, name, {"spec": {"suspend": True}}, namespace=namespace,
                                  patch_type=PatchType.MERGE)  # fmt: skip

    def _ensure_services(self, kind: TrainingKind, job: Mapping[str, Any], namespace: str) -> None:
        for svc in desired_services(kind, job):
            try:
                self._store.create(SERVICES, svc)
            except ApiError as exc:
                if exc.code != 409:
                    raise

    def _ensure_launcher(self, job: Mapping[str, Any], namespace: str) -> None:
        wanted = desired_launcher_job(job)
        if wanted is None:
            return
        name = wanted["metadata"]["name"]
        try:
            current = self._store.get(BATCH_JOBS, name, namespace=namespace)
        except ApiError:
            self._store.create(BATCH_JOBS, wanted)
            return
        spec = current.get("spec") or {}
        if spec.get("suspend"):
            # Resume: mpi-operator re-syncs nodeSelector and tolerations only, never affinity.
            sync = launcher_scheduling(job)
            template_spec = {k: v for k, v in sync.items()}
            self._store.patch(
                BATCH_JOBS, name,
                {"spec": {"suspend": False, "template": {"spec": template_spec}}},
                namespace=namespace, patch_type=PatchType.MERGE,
            )  # fmt: skip

    def _handle_failures(self, kind: TrainingKind, job: Mapping[str, Any], pods: list[Any]) -> str:
        """Failed pods: ExitCode restarts them (delete, recreate); Never fails the job."""
        specs = replica_specs(kind, job)
        for pod in pods:
            if (pod.get("status") or {}).get("phase") != "Failed":
                continue
            rtype = next(
                (t for t in specs if t.lower() == (pod["metadata"].get("labels") or {}).get(
                    "training.kubeflow.org/replica-type", "worker")),
                None,
            )  # fmt: skip
            policy = (specs.get(rtype or "", {}) or {}).get("restartPolicy") or "OnFailure"
            if policy == "ExitCode" and not pod["metadata"].get("deletionTimestamp"):
                self._store.delete(
                    PODS, pod["metadata"]["name"], namespace=pod["metadata"]["namespace"]
                )
                continue
            return f"{kind.kind} {job['metadata']['name']} is failed because pod {pod['metadata']['name']} failed."
        return ""

    def _running_conditions(
        self, kind: TrainingKind, job: Mapping[str, Any], pods: list[Any], conditions: list[Any]
    ) -> list[Any]:
        name = job["metadata"]["name"]
        expected = len(desired_pods(kind, job)) + (
            1 if kind is MPI_V2 and "Launcher" in replica_specs(kind, job) else 0
        )
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        running = [p for p in live if (p.get("status") or {}).get("phase") == "Running"]
        if kind is MPI_V2:
            launcher = self._store.list(PODS, namespace=job["metadata"]["namespace"],
                                        label_selector=f"{LABEL_JOB_NAME}={name},training.kubeflow.org/job-role=launcher")[0]  # fmt: skip
            running += [p for p in launcher if (p.get("status") or {}).get("phase") == "Running"
                        and not p["metadata"].get("deletionTimestamp")]  # fmt: skip
        crashing = any(
            "waiting" in (cs.get("state") or {}) and int(cs.get("restartCount", 0)) > 0
            for p in live
            for cs in (p.get("status") or {}).get("containerStatuses") or []
        )
        if crashing:
            conditions = set_condition(conditions, "Restarting", status=True, reason=f"{kind.kind}Restarting",
                                       message=f"{kind.kind} {name} is restarting because a replica failed.")  # fmt: skip
            return set_condition(conditions, "Running", status=False, reason=f"{kind.kind}Restarting",
                                 message=f"{kind.kind} {name} is restarting.")  # fmt: skip
        if expected and len(running) >= expected:
            if any(c.get("type") == "Restarting" for c in conditions):
                conditions = set_condition(conditions, "Restarting", status=False, reason=f"{kind.kind}Running",
                                           message=f"{kind.kind} {name} is running.")  # fmt: skip
            return set_condition(conditions, "Running", status=True, reason=f"{kind.kind}Running",
                                 message=f"{kind.kind} {job['metadata']['namespace']}/{name} is running.")  # fmt: skip
        return conditions

    def _write_status(
        self,
        rt: ResourceType,
        job: Mapping[str, Any],
        conditions: list[Any],
        pods: list[Any],
        *,
        suspended: bool,
    ) -> None:
        status = dict(job.get("status") or {})
        # Every replica type has an entry, zero counters omitted, as the operator recounts them.
        kind = self._kinds_by_api.get((str(job.get("apiVersion")), str(job.get("kind"))))
        replica_statuses: dict[str, dict[str, int]] = (
            {t: {} for t in replica_specs(kind, job)} if kind is not None else {}
        )
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            rtype = labels.get("training.kubeflow.org/replica-type") or labels.get(
                "training.kubeflow.org/job-role", ""
            )
            canonical = rtype[:1].upper() + rtype[1:] if rtype != "ps" else "PS"
            entry = replica_statuses.setdefault(canonical, {})
            phase = (pod.get("status") or {}).get("phase")
            bucket = {"Running": "active", "Pending": "active", "Succeeded": "succeeded", "Failed": "failed"}.get(
                str(phase), "active")  # fmt: skip
            entry[bucket] = entry.get(bucket, 0) + 1
        new_status: dict[str, Any] = {
            **status,
            "conditions": conditions,
            "replicaStatuses": replica_statuses,
        }
        if not suspended and "startTime" not in status:
            new_status["startTime"] = timestamp()
        if is_true(conditions, "Succeeded") and "completionTime" not in status:
            new_status["completionTime"] = timestamp()
        if suspended:
            new_status.pop("startTime", None)
        if new_status == status:
            return
        body: dict[str, Any] = {"status": new_status}
        # A merge patch keeps counters it does not name: drop the ones that went to zero.
        previous = status.get("replicaStatuses") or {}
        body["status"]["replicaStatuses"] = {
            rtype: {**{k: None for k in (previous.get(rtype) or {}) if k not in entry}, **entry}
            for rtype, entry in replica_statuses.items()
        } | {rtype: None for rtype in previous if rtype not in replica_statuses}
        if suspended and "startTime" in status:
            body["status"]["startTime"] = None
        try:
            self._store.patch(rt, job["metadata"]["name"], body, namespace=job["metadata"]["namespace"],
                              patch_type=PatchType.MERGE, subresource="status")  # fmt: skip
        except ApiError as exc:
            log.debug("status of %s not written: %s", job["metadata"]["name"], exc.message)
