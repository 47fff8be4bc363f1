"""The twin's Kubeflow Trainer controller: TrainJob (`trainer.kubeflow.org/v1alpha1`) -> JobSet.

Started by `cluster.TwinCluster` for the scenario's Trainer release. For each TrainJob (unless
`spec.managedBy` names MultiKueue) it builds, from the referenced ClusterTrainingRuntime or
TrainingRuntime, what `trainjob_build` describes and keeps it applied:
- the JobSet (same name, controller ownerReference) is created once, and re-applied only while
  the TrainJob or the JobSet is suspended (upstream: "do not update the JobSet if it already
  exists and is not suspended"), with the JobSet defaults its creation received — so the
  JobSet's webhook decides what may change (a changed affinity is refused, and the JobSet then
  stays as it was);
- for MPI, the hostfile ConfigMap and the SSH Secret;
- a failure (runtime missing, a refused JobSet update) is a Warning Event
  `TrainJobResourcesCreationFailed` ("TrainJob resources reconciliation failed: ...") and a retry;
- status: `Suspended` (True while `spec.suspend`, reason Suspended; False, reason Resumed, once
  resumed), `Complete` / `Failed` copied from the JobSet's Completed / Failed conditions, and
  `jobsStatus` from its `replicatedJobsStatus`. There is no Created or Running condition.
A finished TrainJob is not reconciled further. It reacts to watch events (TrainJobs, and the
JobSets they own) and its own retries.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable, Mapping
from typing import Any, cast

from agent.twin import trainjob_build as build
from agent.twin.admission_jobset import default_jobset
from agent.twin.apierror import ApiError
from agent.twin.clock import TwinClock
from agent.twin.controller import Controller, Subscription
from agent.twin.crds import TRAINJOB_CONTROLLER, TrainerRelease
from agent.twin.operator_conditions import find, is_true, set_status_condition
from agent.twin.operator_events import EventRecorder
from agent.twin.resources import by_kind, lookup
from agent.twin.store import Store
from agent.twin.watch import WatchEvent

log = logging.getLogger(__name__)

TRAINJOBS = lookup("trainjobs")
JOBSETS = lookup("jobsets")
TRAINING_RUNTIMES = lookup("trainingruntimes")
CLUSTER_TRAINING_RUNTIMES = lookup("clustertrainingruntimes")
RETRY_SECONDS = 1.0
Obj = dict[str, Any]


class TrainJobController(Controller):
    def __init__(self, store: Store, *, clock: TwinClock, release: TrainerRelease) -> None:
        super().__init__(store, name="trainjob-controller", clock=clock)
        self._release = release
        self._events = EventRecorder(store, component="trainjob-controller")

    def _subscriptions(self) -> list[Subscription]:
        return [Subscription(TRAINJOBS, self._on_trainjob, since="0"),
                Subscription(JOBSETS, self._on_jobset)]  # fmt: skip

    def _on_trainjob(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        if event.type != "DELETED":
            self._queue.add((str(meta.get("namespace")), str(meta.get("name"))))

    def _on_jobset(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "TrainJob" and ref.get("apiVersion") == build.API_VERSION \
                    and ref.get("controller"):  # fmt: skip
                self._queue.add((str(meta.get("namespace")), str(ref.get("name"))))

    # --- reconcile ------------------------------------------------------------------------------

    def _reconcile(self, raw: Hashable) -> float | None:
        namespace, name = cast(tuple[str, str], raw)
        trainjob = self._get_live(TRAINJOBS, name, namespace=namespace)
        if trainjob is None:
            return None
        manager = (trainjob.get("spec") or {}).get("managedBy")
        if manager and manager != TRAINJOB_CONTROLLER:
            return None
        status: Obj = dict(trainjob.get("status") or {})
        conditions = [c for c in status.get("conditions") or []
                      if c.get("type") != "Failed" or c.get("reason") == "DeadlineExceeded"]
        retry: float | None = None
        finished = is_true(conditions, "Complete") or is_true(conditions, "Failed")
        if not finished:
            try:
                self._apply(trainjob)
            except (ApiError, build.BuildError) as exc:
                text = exc.message if isinstance(exc, ApiError) else str(exc)
                message = f"TrainJob resources reconciliation failed: {text:.950}"
                if len(text) > 950:
                    message += " ..."
                self._events.record(trainjob, reason="TrainJobResourcesCreationFailed",
                                    message=message, warning=True)
                retry = RETRY_SECONDS
        if build.is_suspended(trainjob):
            conditions = set_status_condition(conditions, "Suspended", status=True,
                                              reason="Suspended", message="TrainJob is suspended")
        elif is_true(conditions, "Suspended"):
            conditions = set_status_condition(conditions, "Suspended", status=False,
                                              reason="Resumed", message="TrainJob is resumed")
        new_status = {**status, "conditions": conditions}
        jobset = self._jobset(trainjob)
        if jobset is not None:
            js_conditions = (jobset.get("status") or {}).get("conditions") or []
            for source, target in (("Completed", "Complete"), ("Failed", "Failed")):
                found = find(js_conditions, source)
                if found is not None and found.get("status") == "True":
                    conditions = [c for c in conditions if c.get("type") != target]
                    conditions.append({**found, "type": target})
            new_status["conditions"] = conditions
            new_status["jobsStatus"] = [
                {k: s.get(k, 0) if k != "name" else s.get("name")
                 for k in ("name", "ready", "succeeded", "failed", "active", "suspended")}
                for s in (jobset.get("status") or {}).get("replicatedJobsStatus") or []
            ]  # fmt: skip
        if not new_status["conditions"]:
            new_status.pop("conditions")
        if new_status != (trainjob.get("status") or {}):
            try:
                self._store.update(TRAINJOBS, {**trainjob, "status": new_status},
                                   namespace=namespace, subresource="status")
            except ApiError as exc:
                log.debug("trainjob %s status not written: %s", name, exc.message)
                return RETRY_SECONDS / 10
        return retry

    def _jobset(self, trainjob: Mapping[str, Any]) -> Obj | None:
        meta = trainjob.get("metadata") or {}
        try:
            return self._store.get(JOBSETS, str(meta.get("name")), namespace=str(meta.get("namespace")))
        except ApiError:
            return None

    def _runtime(self, trainjob: Mapping[str, Any]) -> Obj:
        kind, name = build.runtime_ref(trainjob)
        if kind == "TrainingRuntime":
            namespace = str((trainjob.get("metadata") or {}).get("namespace") or "default")
            return self._store.get(TRAINING_RUNTIMES, name, namespace=namespace)
        if kind == "ClusterTrainingRuntime":
            return self._store.get(CLUSTER_TRAINING_RUNTIMES, name)
        raise build.BuildError(f"unsupported runtime: {kind}.trainer.kubeflow.org")

    def _apply(self, trainjob: Mapping[str, Any]) -> None:
        built = build.build(trainjob, self._runtime(trainjob), self._release)
        current = self._jobset(trainjob)
        desired = built.jobset
        if current is None:
            self._store.create(JOBSETS, desired)
        elif build.is_suspended(trainjob) or (current.get("spec") or {}).get("suspend"):
            spec_holder: Obj = {"spec": copy.deepcopy(desired["spec"])}
            default_jobset(None, spec_holder)  # the defaults the JobSet received at creation
            meta = dict(current["metadata"])
            meta["labels"] = {**(meta.get("labels") or {}), **desired["metadata"]["labels"]}
            meta["annotations"] = {**(meta.get("annotations") or {}),
                                   **desired["metadata"]["annotations"]}  # fmt: skip
            updated = {**current, "metadata": meta, "spec": spec_holder["spec"]}
            if updated != current:
                self._store.update(JOBSETS, updated, namespace=meta["namespace"])
        for obj in built.extra:
            self._ensure(obj)

    def _ensure(self, obj: Mapping[str, Any]) -> None:
        rt = by_kind(str(obj.get("apiVersion")), str(obj.get("kind")))
        meta = obj["metadata"]
        try:
            current = self._store.get(rt, meta["name"], namespace=meta["namespace"])
        except ApiError:
            self._store.create(rt, obj)
            return
        if rt.plural == "configmaps" and current.get("data") != obj.get("data"):
            self._store.update(rt, {**current, "data": obj.get("data")}, namespace=meta["namespace"])
