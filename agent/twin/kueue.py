"""The twin's Kueue (v0.14): Workloads for queued jobs, admission by quota and topology, the ungater.

Started by `cluster.TwinCluster` when the scenario says `kueue:`. Installing it serves the
kueue.x-k8s.io/v1beta1 kinds and registers the webhooks (kueue_webhook). One work queue runs,
in order, what Kueue's controllers do:
- the job reconciler (per integrated job labelled `kueue.x-k8s.io/queue-name`): one Workload per
  job (built when the job has no active pod; a Workload that no longer matches a running job is
  deleted and the job stopped, a suspended job's unreserved one is rewritten); a finished job
  finishes its Workload (`Finished`, reason Succeeded/Failed); an admitted Workload starts its
  job (admission merged into the pod templates, then unsuspended; retried while the API refuses,
  e.g. Kueue's own webhook when the merge leaves two topology annotations) - also a job someone
  else suspended while it is admitted; an evicted Workload stops it (suspended, templates restored to
  the Workload's) and, once no pod is active, loses its admission (`QuotaReserved=False`,
  reason Pending; `Requeued=False` unless preempted); a running job whose Workload is not
  admitted is stopped; a Workload being deleted stops the job and drops its finalizer. A kind
  whose templates are derived (TrainJob, `kueue_trainjob`) starts and stops through its own
  patches: its stop is done, and only then the quota released or the finalizer dropped, once
  nothing of it is active and its own injection is undone;
- the Workload controller: `spec.active: false` evicts (`Evicted=True`, reason Deactivated,
  "The workload is deactivated"), never requeued until `active: true` again (`Requeued=True`,
  reason Reactivated);
- the scheduler: pending active Workloads by priority then age, per ClusterQueue (StrictFIFO
  stops at the first that does not fit; BestEffortFIFO goes on); the LocalQueue and ClusterQueue
  must exist and be active and the namespace match the ClusterQueue's `namespaceSelector`;
  flavors and nominal quota (kueue_quota), then Topology Aware Scheduling on TAS flavors
  (kueue_topology) from the flavor's nodes' free capacity (allocatable less the requests of pods
  that are not TAS pods, less the topology assignments of admitted Workloads); admission writes
  `status.admission` and `QuotaReserved`/`Admitted` True; a Workload that does not fit gets
  `QuotaReserved=False` with Kueue's message and a Pending event;
- the topology ungater: a TAS-admitted Workload's gated pods (label `kueue.x-k8s.io/podset`,
  annotation `kueue.x-k8s.io/workload`) get their domain's node selector and lose the
  `kueue.x-k8s.io/topology` gate (by rank when the pod index label gives one, else greedily);
- the queues' status: pending, reserving and admitted counts, flavors' reserved usage, `Active`.
It does not preempt, borrow within cohorts, run admission checks or MultiKueue.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, cast

from agent.twin.apierror import ApiError
from agent.twin.clock import TwinClock
from agent.twin.controller import Controller, Subscription
from agent.twin.crds import TrainerRelease
from agent.twin.kueue_jobs import (
    KINDS,
    TRAINJOB_FRAMEWORK,
    QueuedKind,
    has_queued_owner,
    is_suspended,
    queue_name,
)
from agent.twin.kueue_labels import (
    ADMITTED,
    CLUSTER_QUEUES,
    DEACTIVATED,
    EVICTED,
    FAILED_TO_START,
    FINISHED,
    HOSTNAME_LABEL,
    INADMISSIBLE,
    LOCAL_QUEUES,
    PENDING,
    PODSET_LABEL,
    PREEMPTED,
    PREFERRED_TOPOLOGY,
    QUOTA_RESERVED,
    REACTIVATED,
    REQUEUED,
    REQUIRED_TOPOLOGY,
    RESOURCE_FLAVORS,
    RESOURCE_IN_USE,
    TOPOLOGIES,
    TOPOLOGY_GATE,
    UNCONSTRAINED_TOPOLOGY,
    WORKLOAD_ANNOTATION,
    WORKLOADS,
)
from agent.twin.kueue_quota import Demand, Flavor, assign, quantity, resource_groups, tas_only
from agent.twin.kueue_topology import Leaf, Request, Topology, place_all
from agent.twin.kueue_trainjob import TRAINJOBS, KueueEntryMissingError, trainjob_kind
from agent.twin.kueue_trainjob import mutate as trainjob_mutate
from agent.twin.kueue_webhook import register
from agent.twin.kueue_workloads import (
    PodSetInfoConflictError,
    build,
    explicit_tas,
    info_from_admission,
    info_from_pod_set,
    merged_template,
    owned_by,
    pod_sets,
    same_pod_sets,
    start_patches,
    stop_patch,
)
from agent.twin.operator_events import EventRecorder, timestamp
from agent.twin.patch import PatchType
from agent.twin.resources import KUEUE_GROUP, lookup
from agent.twin.scheduler_resources import PODS as PODS_RESOURCE
from agent.twin.scheduler_resources import node_allocatable, pod_requests, to_units
from agent.twin.scheduler_terms import label_selector_matches
from agent.twin.status_conditions import find, is_true, set_condition
from agent.twin.store import Store
from agent.twin.watch import WatchEvent

log = logging.getLogger(__name__)

PODS = lookup("pods")
NODES = lookup("nodes")
NAMESPACES = lookup("namespaces")
RETRY_SECONDS = 0.05  # model seconds before a reconcile that deleted stale Workloads runs again
START_RETRY_SECONDS = 1.0  # model seconds before unsuspending a job the API refused is retried
_TAS_ANNOTATIONS = (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, UNCONSTRAINED_TOPOLOGY)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = obj.get("metadata") or {}
    return found


def _conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def _reserved(wl: Mapping[str, Any]) -> bool:
    return is_true(_conditions(wl), QUOTA_RESERVED)


def _admitted(wl: Mapping[str, Any]) -> bool:
    return is_true(_conditions(wl), ADMITTED)


def _finished(wl: Mapping[str, Any]) -> bool:
    return is_true(_conditions(wl), FINISHED)


def _active(wl: Mapping[str, Any]) -> bool:
    return (wl.get("spec") or {}).get("active") is not False


def _key(obj: Mapping[str, Any]) -> str:
    return f"{_meta(obj).get('namespace')}/{_meta(obj).get('name')}"


class Kueue(Controller):
    def __init__(
        self, store: Store, *, clock: TwinClock, frameworks: Sequence[str] | None = None,
        trainer_release: TrainerRelease | None = None,
    ) -> None:  # fmt: skip
        super().__init__(store, name="kueue", clock=clock)
        kinds = list(KINDS)
        if trainer_release is not None and trainer_release.runtime_patches:
            kinds.append(trainjob_kind(store, trainer_release))  # Kueue writes runtimePatches
        self._kinds = tuple(k for k in kinds if frameworks is None or k.framework in frameworks)
        store.install_group(KUEUE_GROUP)
        if any(k.framework == TRAINJOB_FRAMEWORK for k in self._kinds):
            store.add_mutation(TRAINJOBS, trainjob_mutate)
        register(store, self._kinds)
        self._events = {k.framework: EventRecorder(store, component=f"{k.framework}-kueue-controller")
                        for k in self._kinds}  # fmt: skip
        self._admission_events = EventRecorder(store, component="kueue-admission")
        self._workload_events = EventRecorder(store, component="kueue-workload-controller")

    @property
    def kinds(self) -> tuple[QueuedKind, ...]:
        return self._kinds

    # --- watches --------------------------------------------------------------------------------

    def _subscriptions(self) -> list[Subscription]:
        subs = [Subscription(k.resource, self._on_job(i), since="0")
                for i, k in enumerate(self._kinds)]  # fmt: skip
        subs.append(Subscription(WORKLOADS, self._on_workload, since="0"))
        subs.append(Subscription(PODS, self._on_pod))
        for rt in (NODES, RESOURCE_FLAVORS, TOPOLOGIES, CLUSTER_QUEUES, LOCAL_QUEUES):
            subs.append(Subscription(rt, self._on_queueing, since="0"))
        return subs

    def _on_job(self, index: int) -> Any:
        def handle(event: WatchEvent) -> None:
            meta = _meta(event.object)
            self._queue.add(("job", index, str(meta.get("namespace")), str(meta.get("name"))))

        return handle

    def _on_workload(self, event: WatchEvent) -> None:
        meta = _meta(event.object)
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        for ref in meta.get("ownerReferences") or []:
            for index, kind in enumerate(self._kinds):
                if ref.get("controller") and (ref.get("apiVersion"), ref.get("kind")) == (
                    kind.resource.api_version, kind.resource.kind
                ):
                    self._queue.add(("job", index, namespace, str(ref.get("name"))))
        if event.type != "DELETED":
            self._queue.add(("workload", namespace, name))
            self._queue.add(("ungate", namespace, name))
        self._queue.add(("schedule",))
        self._queue.add(("queues",))

    def _on_pod(self, event: WatchEvent) -> None:
        meta = _meta(event.object)
        workload = (meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION)
        if workload and event.type != "DELETED":
            self._queue.add(("ungate", str(meta.get("namespace")), str(workload)))
        phase = (event.object.get("status") or {}).get("phase")
        if event.type == "DELETED" or phase in ("Succeeded", "Failed") or meta.get(
            "deletionTimestamp"
        ):
            self._queue.add(("schedule",))  # room freed for Topology Aware Scheduling

    def _on_queueing(self, _event: WatchEvent) -> None:
        self._queue.add(("schedule",))
        self._queue.add(("queues",))

    def _reconcile(self, raw: Hashable) -> float | None:
        key = cast(tuple[Any, ...], raw)
        if key[0] == "job":
            return self._reconcile_job(self._kinds[key[1]], key[2], key[3])
        if key[0] == "workload":
            self._reconcile_workload(key[1], key[2])
        elif key[0] == "schedule":
            self._schedule()
        elif key[0] == "ungate":
            self._ungate(key[1], key[2])
        elif key[0] == "queues":
            self._write_queue_statuses()
        return None

    # --- small writes ---------------------------------------------------------------------------

    def _patch(self, rt: Any, obj: Mapping[str, Any], body: Mapping[str, Any], *,
               status: bool = False) -> dict[str, Any] | None:  # fmt: skip
        meta = _meta(obj)
        try:
            return self._store.patch(rt, str(meta.get("name")), dict(body),
                                     namespace=meta.get("namespace"), patch_type=PatchType.MERGE,
                                     subresource="status" if status else None)  # fmt: skip
        except ApiError as exc:
            log.debug("kueue: %s %s not written: %s", rt.kind, _key(obj), exc.message)
            return None

    def _write_workload_status(
        self, wl: Mapping[str, Any], conditions: list[Any], **fields: Any
    ) -> None:
        self._patch(WORKLOADS, wl, {"status": {"conditions": conditions, **fields}}, status=True)

    def _set(self, wl: Mapping[str, Any], conditions: list[Any], kind: str, *, status: bool,
             reason: str, message: str) -> tuple[list[Any], bool]:  # fmt: skip
        return set_condition(conditions, kind, status=status, reason=reason, message=message,
                             generation=int(_meta(wl).get("generation", 1)), now=timestamp())

    def _drop_finalizer(self, wl: Mapping[str, Any]) -> None:
        finalizers = [f for f in _meta(wl).get("finalizers") or [] if f != RESOURCE_IN_USE]
        if finalizers != list(_meta(wl).get("finalizers") or []):
            self._patch(WORKLOADS, wl, {"metadata": {"finalizers": finalizers or None}})

    def _flavors(self) -> dict[str, dict[str, Any]]:
        return {str(_meta(f).get("name")): f for f in self._store.list(RESOURCE_FLAVORS)[0]}

    # --- the job reconciler ---------------------------------------------------------------------

    def _workloads_of(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        return [w for w in self._store.list(WORKLOADS, namespace=namespace)[0] if owned_by(w, uid)]

    def _reconcile_job(self, kind: QueuedKind, namespace: str, name: str) -> float | None:
        job = self._get_live(kind.resource, name, namespace=namespace)
        if job is None:
            for orphan in self._store.list(WORKLOADS, namespace=namespace)[0]:
                refs = _meta(orphan).get("ownerReferences") or []
                if any(r.get("name") == name and r.get("kind") == kind.resource.kind for r in refs):
                    self._drop_finalizer(orphan)
            return None
        if not queue_name(job) or has_queued_owner(job):
            return None
        wl, retry = self._ensure_one(kind, job)
        if retry:
            return RETRY_SECONDS
        events = self._events[kind.framework]
        if wl is not None and _finished(wl):
            self._drop_finalizer(wl)
            return None
        if wl is not None and _meta(wl).get("deletionTimestamp"):
            if not self._stop(kind, job, wl, "Workload is deleted"):
                return RETRY_SECONDS  # a TrainJob's replicated jobs still active
            self._drop_finalizer(wl)
            return None
        message, succeeded, finished = kind.finished(job)
        if finished:
            if wl is not None and not _finished(wl):
                conditions, _ = self._set(wl, _conditions(wl), FINISHED, status=True,
                                          reason="Succeeded" if succeeded else "Failed",
                                          message=message)  # fmt: skip
                self._write_workload_status(wl, conditions)
                events.record(job, reason="FinishedWorkload",
                              message=f"Workload '{_key(wl)}' is declared finished")
            return None
        if wl is None:
            if kind.is_active(job):
                return None  # the job is suspended but still has active pods: wait
            created = self._create_workload(kind, job)
            if created is not None:
                events.record(job, reason="CreatedWorkload",
                              message=f"Created Workload: {_key(created)}")
            return None
        evicted = find(_conditions(wl), EVICTED)
        if evicted is not None and evicted.get("status") == "True":
            stopped = self._stop(kind, job, wl, str(evicted.get("message") or ""))
            if stopped and _reserved(wl) and not kind.is_active(job):
                self._clear_admission(wl, evicted)
            return None if stopped else RETRY_SECONDS
        if is_suspended(kind, job):
            if _admitted(wl):
                return None if self._start(kind, job, wl) else START_RETRY_SECONDS
            if (wl.get("spec") or {}).get("queueName") != queue_name(job):
                self._patch(WORKLOADS, wl, {"spec": {"queueName": queue_name(job)}})
            return None
        if not _admitted(wl):
            self._stop(kind, job, wl, "Not admitted by cluster queue")
        return None

    def _create_workload(self, kind: QueuedKind, job: Mapping[str, Any]) -> dict[str, Any] | None:
        try:
            return self._store.create(WORKLOADS, build(kind, job))
        except ApiError as exc:
            log.debug("kueue: Workload for %s not created: %s", _key(job), exc.message)
            return None

    def _equivalent(self, kind: QueuedKind, job: Mapping[str, Any], wl: Mapping[str, Any]) -> bool:
        job_sets = pod_sets(kind, job)
        wl_sets = list((wl.get("spec") or {}).get("podSets") or [])
        admitted = _admitted(wl)
        if _reserved(wl):
            running: list[dict[str, Any]] = []
            infos = {i.name: i for i in info_from_admission(wl, self._flavors())}
            for pod_set in wl_sets:
                info = infos.get(str(pod_set.get("name")))
                if info is None:
                    running = []
                    break
                try:
                    template = merged_template(pod_set.get("template") or {}, info)
                except PodSetInfoConflictError:
                    running = []
                    break
                running.append({**pod_set, "template": template})
            if running:
                if same_pod_sets(job_sets, running, ignore_tolerations=admitted):
                    return True
                return is_suspended(kind, job) and same_pod_sets(
                    job_sets, wl_sets, ignore_tolerations=admitted)
        return same_pod_sets(job_sets, wl_sets, ignore_tolerations=admitted)

    def _ensure_one(
        self, kind: QueuedKind, job: Mapping[str, Any]
    ) -> tuple[dict[str, Any] | None, bool]:
        """The job's matching Workload (or None), and whether to run again (stale ones deleted)."""
        uid = str(_meta(job).get("uid"))
        match: dict[str, Any] | None = None
        stale: list[dict[str, Any]] = []
        for wl in self._workloads_of(str(_meta(job).get("namespace")), uid):
            if match is None and self._equivalent(kind, job, wl):
                match = wl
            else:
                stale.append(wl)
        to_update = None
        if match is None and stale and is_suspended(kind, job) and not _reserved(stale[0]):
            to_update = stale.pop(0)
        if match is None and not is_suspended(kind, job) and not kind.finished(job)[2]:
            only = stale[0] if len(stale) == 1 else None
            message = ("No matching Workload; restoring pod templates according to existent "
                       "Workload" if only is not None else
                       "Missing Workload; unable to restore pod templates")  # fmt: skip
            self._stop(kind, job, only, message)
        events = self._events[kind.framework]
        for wl in stale:
            self._drop_finalizer(wl)
            try:
                self._store.delete(WORKLOADS, str(_meta(wl).get("name")),
                                   namespace=str(_meta(wl).get("namespace")))
            except ApiError:
                continue
            events.record(job, reason="DeletedWorkload",
                          message=f"Deleted not matching Workload: {_key(wl)}")
        if stale:
            return None, True
        if to_update is not None:
            updated = self._patch(WORKLOADS, to_update, {"spec": build(kind, job)["spec"]})
            events.record(job, reason="UpdatedWorkload",
                          message=f"Updated not matching Workload for suspended job: "
                                  f"{_key(to_update)}")  # fmt: skip
            return updated, False
        return match, False

    def _start(self, kind: QueuedKind, job: Mapping[str, Any], wl: Mapping[str, Any]) -> bool:
        """Unsuspend the job with its admission; False when the API refused (run again later)."""
        infos = info_from_admission(wl, self._flavors())
        try:
            bodies = start_patches(kind, job, infos)
        except PodSetInfoConflictError as exc:  # permanent: the Workload fails to start
            conditions, _ = self._set(wl, _conditions(wl), FINISHED, status=True,
                                      reason=FAILED_TO_START, message=str(exc))  # fmt: skip
            self._write_workload_status(wl, conditions)
            return True
        except KueueEntryMissingError as exc:
            log.warning("kueue: starting %s failed: %s", _key(job), exc)
            return False
        for body in bodies:
            try:
                self._store.patch(kind.resource, str(_meta(job).get("name")), body,
                                  namespace=str(_meta(job).get("namespace")),
                                  patch_type=PatchType.MERGE)  # fmt: skip
            except ApiError as exc:
                log.warning("kueue: unsuspending %s failed: %s", _key(job), exc.message)
                return False
        cluster_queue = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
        self._events[kind.framework].record(
            job, reason="Started", message=f"Admitted by clusterQueue {cluster_queue}")
        return True

    def _stop(
        self, kind: QueuedKind, job: Mapping[str, Any], wl: Mapping[str, Any] | None, message: str
    ) -> bool:
        """Suspend the job and take its admission back out of its templates; False while that
        must wait (a derived kind's replicated jobs still active)."""
        if kind.stop is not None:
            return self._stop_derived(kind, job, message)
        if is_suspended(kind, job):
            return True
        infos = [info_from_pod_set(p) for p in (wl or {}).get("spec", {}).get("podSets") or []]
        suspended = self._patch(kind.resource, job, stop_patch(kind, job, None))
        if suspended is None:
            return True
        if kind.resource.group == "batch" and (suspended.get("status") or {}).get("startTime"):
            # A started batch Job's template may change only once its startTime is reset.
            suspended = self._patch(kind.resource, suspended, {"status": {"startTime": None}},
                                    status=True) or suspended  # fmt: skip
        if infos:
            restore = stop_patch(kind, suspended, infos)
            self._patch(kind.resource, suspended, restore)
        self._events[kind.framework].record(job, reason="Stopped", message=message)
        return True

    def _stop_derived(self, kind: QueuedKind, job: Mapping[str, Any], message: str) -> bool:
        """A TrainJob: suspended, then (once nothing of it is active) its own entry emptied."""
        assert kind.stop is not None
        current: Mapping[str, Any] = job
        if not is_suspended(kind, job):
            for body in kind.stop(job, None):
                suspended = self._patch(kind.resource, job, body)
                if suspended is None:
                    return False
                current = suspended
            self._events[kind.framework].record(job, reason="Stopped", message=message)
        if kind.is_active(current):
            return False
        for body in kind.stop(current, ()):
            if self._patch(kind.resource, current, body) is None:
                return False
        return True

    def _clear_admission(self, wl: Mapping[str, Any], evicted: Mapping[str, Any]) -> None:
        reason, message = str(evicted.get("reason")), str(evicted.get("message") or "")
        conditions, _ = self._set(wl, _conditions(wl), REQUEUED, status=reason == PREEMPTED,
                                  reason=reason, message=message)  # fmt: skip
        conditions, _ = self._set(wl, conditions, QUOTA_RESERVED, status=False, reason=PENDING,
                                  message=message)  # fmt: skip
        if is_true(conditions, ADMITTED):
            conditions, _ = self._set(wl, conditions, ADMITTED, status=False,
                                      reason="NoReservation",
                                      message="The workload has no reservation")  # fmt: skip
        self._write_workload_status(wl, conditions, admission=None)

    # --- the Workload controller ------------------------------------------------------------

    def _reconcile_workload(self, namespace: str, name: str) -> None:
        wl = self._get_live(WORKLOADS, name, namespace=namespace)
        if wl is None or _finished(wl):
            return
        conditions = _conditions(wl)
        if _active(wl):
            requeued = find(conditions, REQUEUED)
            if requeued is not None and requeued.get("status") == "False" and requeued.get(
                "reason"
            ) == DEACTIVATED:
                conditions, _ = self._set(wl, conditions, REQUEUED, status=True,
                                          reason=REACTIVATED,
                                          message="The workload was reactivated")  # fmt: skip
                self._write_workload_status(wl, conditions)
            return
        if not is_true(conditions, EVICTED):
            message = "The workload is deactivated"
            conditions, _ = self._set(wl, conditions, EVICTED, status=True, reason=DEACTIVATED,
                                      message=message)  # fmt: skip
            self._write_workload_status(wl, conditions)
            self._workload_events.record(wl, reason=f"{EVICTED}DueTo{DEACTIVATED}",
                                         message=message)

    # --- the scheduler ------------------------------------------------------------------------

    def _schedule(self) -> None:
        workloads = self._store.list(WORKLOADS)[0]
        pending = [w for w in workloads
                   if _active(w) and not _finished(w) and not _reserved(w)
                   and not _meta(w).get("deletionTimestamp")]  # fmt: skip
        if not pending:
            return
        pending.sort(key=lambda w: (-int((w.get("spec") or {}).get("priority") or 0),
                                    str(_meta(w).get("creationTimestamp")), _key(w)))  # fmt: skip
        snapshot = _Snapshot.take(self._store, workloads)
        blocked: set[str] = set()
        for wl in pending:
            outcome = snapshot.try_admit(wl, blocked)
            if outcome.admission is not None:
                self._admit(wl, outcome.admission)
            elif outcome.message:
                self._leave_pending(wl, outcome.reason, outcome.message, outcome.requests)

    def _admit(self, wl: Mapping[str, Any], admission: dict[str, Any]) -> None:
        cluster_queue = admission["clusterQueue"]
        conditions = _conditions(wl)
        conditions, _ = self._set(wl, conditions, QUOTA_RESERVED, status=True,
                                  reason="QuotaReserved",
                                  message=f"Quota reserved in ClusterQueue {cluster_queue}")
        conditions, _ = self._set(wl, conditions, ADMITTED, status=True, reason="Admitted",
                                  message="The workload is admitted")  # fmt: skip
        for kind in (EVICTED, PREEMPTED):
            previous = find(conditions, kind)
            if previous is not None and previous.get("status") == "True":
                conditions, _ = self._set(wl, conditions, kind, status=False,
                                          reason="QuotaReserved",
                                          message=f"Previously: {previous.get('message')}")
        self._write_workload_status(wl, conditions, admission=admission, resourceRequests=None)
        self._admission_events.record(wl, reason="QuotaReserved",
                                      message=f"Quota reserved in ClusterQueue {cluster_queue}")
        self._admission_events.record(wl, reason="Admitted",
                                      message=f"Admitted by ClusterQueue {cluster_queue}")

    def _leave_pending(self, wl: Mapping[str, Any], reason: str, message: str,
                       requests: list[dict[str, Any]]) -> None:  # fmt: skip
        conditions, changed = self._set(wl, _conditions(wl), QUOTA_RESERVED, status=False,
                                        reason=reason, message=message)  # fmt: skip
        if not changed and (wl.get("status") or {}).get("resourceRequests") == requests:
            return
        self._write_workload_status(wl, conditions, resourceRequests=requests)
        if changed:
            self._admission_events.record(wl, reason="Pending", message=message, warning=True)

    # --- the topology ungater -----------------------------------------------------------------

    def _ungate(self, namespace: str, name: str) -> None:
        wl = self._get_live(WORKLOADS, name, namespace=namespace)
        if wl is None or not _admitted(wl):
            return
        admission = (wl.get("status") or {}).get("admission") or {}
        assignments = admission.get("podSetAssignments") or []
        if not any(a.get("topologyAssignment") for a in assignments):
            return
        requests = {str(p.get("name")): p.get("topologyRequest") or {}
                    for p in (wl.get("spec") or {}).get("podSets") or []}  # fmt: skip
        offsets, limits = _rank_bounds(assignments, requests)
        pods = [p for p in self._store.list(PODS, namespace=namespace)[0]
                if (_meta(p).get("annotations") or {}).get(WORKLOAD_ANNOTATION) == name
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]  # fmt: skip
        for assignment in assignments:
            topology = assignment.get("topologyAssignment")
            if not topology:
                continue
            set_name = str(assignment.get("name"))
            mine = sorted((p for p in pods
                           if (_meta(p).get("labels") or {}).get(PODSET_LABEL) == set_name),
                          key=lambda p: str(_meta(p).get("name")))  # fmt: skip
            request = requests.get(set_name, {})
            ranked = pods_by_rank(mine, topology, request, offset=offsets.get(set_name, 0),
                              limit=limits.get(set_name, 0), size=int(assignment.get("count") or 0))
            for pod, selector in ranked if ranked is not None else pods_greedily(mine, topology):
                self._release(pod, selector)

    def _release(self, pod: Mapping[str, Any], selector: Mapping[str, str]) -> None:
        spec = pod.get("spec") or {}
        gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != TOPOLOGY_GATE]
        if len(gates) == len(spec.get("schedulingGates") or []):
            return
        node_selector = {**(spec.get("nodeSelector") or {}), **selector}
        self._patch(PODS, pod, {"spec": {"schedulingGates": gates or None,
                                         "nodeSelector": node_selector}})  # fmt: skip

    # --- queue statuses -----------------------------------------------------------------------

    def _write_queue_statuses(self) -> None:
        workloads = [w for w in self._store.list(WORKLOADS)[0] if not _finished(w)]
        flavors = self._flavors()
        topologies = {str(_meta(t).get("name")) for t in self._store.list(TOPOLOGIES)[0]}
        local_queues = self._store.list(LOCAL_QUEUES)[0]
        queue_of = {(str(_meta(q).get("namespace")), str(_meta(q).get("name"))):
                    str((q.get("spec") or {}).get("clusterQueue")) for q in local_queues}
        cluster_active: dict[str, bool] = {}
        for cq in self._store.list(CLUSTER_QUEUES)[0]:
            name = str(_meta(cq).get("name"))
            mine = [w for w in workloads if queue_of.get(
                (str(_meta(w).get("namespace")), str((w.get("spec") or {}).get("queueName")))
            ) == name]  # fmt: skip
            reason, message = _cluster_queue_state(cq, flavors, topologies)
            cluster_active[name] = reason == "Ready"
            self._write_status(CLUSTER_QUEUES, cq, _counts(mine, cq), active=reason == "Ready",
                               reason=reason, message=message)
        for lq in local_queues:
            key = (str(_meta(lq).get("namespace")), str(_meta(lq).get("name")))
            cq_name = queue_of[key]
            mine = [w for w in workloads if (str(_meta(w).get("namespace")),
                    str((w.get("spec") or {}).get("queueName"))) == key]  # fmt: skip
            if cq_name not in cluster_active:
                state = (False, "ClusterQueueDoesNotExist",
                         "Can't submit new workloads to clusterQueue")
            elif not cluster_active[cq_name]:
                state = (False, "ClusterQueueIsInactive",
                         "Can't submit new workloads to clusterQueue")
            else:
                state = (True, "Ready", "Can submit new workloads to localQueue")
            active, reason, message = state
            self._write_status(LOCAL_QUEUES, lq, _counts(mine, None), active=active,
                               reason=reason, message=message)

    def _write_status(self, rt: Any, obj: Mapping[str, Any], status: dict[str, Any], *,
                      active: bool, reason: str, message: str) -> None:  # fmt: skip
        current = dict(obj.get("status") or {})
        conditions, _ = set_condition(current.get("conditions") or [], "Active", status=active,
                                      reason=reason, message=message,
                                      generation=int(_meta(obj).get("generation", 1)),
                                      now=timestamp())  # fmt: skip
        wanted = {**current, **status, "conditions": conditions}
        if wanted != current:
            self._patch(rt, obj, {"status": wanted}, status=True)


# --- the scheduler's view of the cluster (pure once taken) ----------------------------------------


class _Outcome:
    def __init__(self, admission: dict[str, Any] | None = None, reason: str = "",
                 message: str = "", requests: list[dict[str, Any]] | None = None) -> None:
        self.admission = admission
        self.reason = reason
        self.message = message
        self.requests = requests or []


def _per_pod(pod_set: Mapping[str, Any]) -> dict[str, int]:
    return pod_requests({"spec": (pod_set.get("template") or {}).get("spec") or {}})


def _total_requests(wl: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for pod_set in (wl.get("spec") or {}).get("podSets") or []:
        count = int(pod_set.get("count", 1))
        resources = {r: quantity(r, v * count) for r, v in sorted(_per_pod(pod_set).items())
                     if r != PODS_RESOURCE and v > 0}  # fmt: skip
        out.append({"name": pod_set.get("name"), "resources": resources})
    return out


def _is_tas_pod(pod: Mapping[str, Any]) -> bool:
    annotations = _meta(pod).get("annotations") or {}
    return any(k in annotations for k in _TAS_ANNOTATIONS)


def _node_ready(node: Mapping[str, Any]) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])  # fmt: skip


def _cluster_queue_state(
    cq: Mapping[str, Any], flavors: Mapping[str, Any], topologies: set[str]
) -> tuple[str, str]:
    """(reason, message) of the ClusterQueue's Active condition."""
    names = [str(f.get("name")) for g in (cq.get("spec") or {}).get("resourceGroups") or []
             for f in g.get("flavors") or []]  # fmt: skip
    missing = [n for n in names if n not in flavors]
    messages, reasons = [], []
    if (cq.get("spec") or {}).get("stopPolicy", "None") not in ("None", None):
        reasons.append("Stopped")
        messages.append("is stopped")
    if missing:
        reasons.append("FlavorNotFound")
        messages.append(f"references missing ResourceFlavor(s): {','.join(missing)}")
    for name in names:
        topology = ((flavors.get(name) or {}).get("spec") or {}).get("topologyName")
        if topology and topology not in topologies:
            reasons.append("TopologyNotFound")
            messages.append(f'there is no Topology "{topology}" for TAS flavor "{name}"')
    if reasons:
        return reasons[0], f"Can't admit new workloads: {', '.join(messages)}."
    return "Ready", "Can admit new workloads"


def _counts(workloads: Sequence[Mapping[str, Any]], cq: Mapping[str, Any] | None) -> dict[str, Any]:
    reserving = [w for w in workloads if _reserved(w)]
    usage: dict[str, dict[str, int]] = {}
    for wl in reserving:
        for assignment in ((wl.get("status") or {}).get("admission") or {}).get(
            "podSetAssignments"
        ) or []:
            for resource, flavor in (assignment.get("flavors") or {}).items():
                amount = (assignment.get("resourceUsage") or {}).get(resource, 0)
                bucket = usage.setdefault(str(flavor), {})
                bucket[resource] = bucket.get(resource, 0) + to_units(resource, amount)
    flavors_usage = []
    if cq is not None:
        for group in (cq.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                name = str(flavor.get("name"))
                flavors_usage.append({"name": name, "resources": [
                    {"name": r, "total": quantity(r, usage.get(name, {}).get(r, 0)),
                     "borrowed": "0"} for r in group.get("coveredResources") or []]})
    else:
        flavors_usage = [{"name": name, "resources": [
            {"name": r, "total": quantity(r, v)} for r, v in sorted(used.items())]}
            for name, used in sorted(usage.items())]  # fmt: skip
    usage_key = "flavorsUsage" if cq is not None else "flavorUsage"
    return {
        "pendingWorkloads": sum(1 for w in workloads if _active(w) and not _reserved(w)),
        "reservingWorkloads": len(reserving),
        "admittedWorkloads": sum(1 for w in workloads if _admitted(w)),
        "flavorsReservation": copy.deepcopy(flavors_usage),
        usage_key: flavors_usage,
    }


class _Snapshot:
    """Queues, flavors, quota usage and TAS room as of one scheduling pass."""

    def __init__(self) -> None:
        self.flavors: dict[str, Flavor] = {}
        self.flavor_objects: dict[str, dict[str, Any]] = {}
        self.topologies: dict[str, list[str]] = {}
        self.cluster_queues: dict[str, dict[str, Any]] = {}
        self.local_queues: dict[tuple[str, str], dict[str, Any]] = {}
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self.usage: dict[str, dict[tuple[str, str], int]] = {}
        self.tas: dict[str, Topology] = {}
        self.nodes: list[dict[str, Any]] = []
        self.non_tas: dict[str, dict[str, int]] = {}
        self.tas_used: dict[str, dict[str, dict[str, int]]] = {}  # flavor -> node -> units

    @classmethod
    def take(cls, store: Store, workloads: Sequence[Mapping[str, Any]]) -> _Snapshot:
        s = cls()
        s.topologies = {str(_meta(t).get("name")): [str(level.get("nodeLabel")) for level in
                        (t.get("spec") or {}).get("levels") or []]
                        for t in store.list(TOPOLOGIES)[0]}  # fmt: skip
        for obj in store.list(RESOURCE_FLAVORS)[0]:
            name = str(_meta(obj).get("name"))
            topology = (obj.get("spec") or {}).get("topologyName")
            s.flavor_objects[name] = obj
            s.flavors[name] = Flavor.of(obj, s.topologies.get(str(topology), ()) if topology
                                        else ())  # fmt: skip
        s.cluster_queues = {str(_meta(q).get("name")): q for q in store.list(CLUSTER_QUEUES)[0]}
        s.local_queues = {(str(_meta(q).get("namespace")), str(_meta(q).get("name"))): q
                          for q in store.list(LOCAL_QUEUES)[0]}  # fmt: skip
        s.namespace_labels = {str(_meta(n).get("name")): dict(_meta(n).get("labels") or {})
                              for n in store.list(NAMESPACES)[0]}  # fmt: skip
        queue_of = {k: str((q.get("spec") or {}).get("clusterQueue"))
                    for k, q in s.local_queues.items()}  # fmt: skip
        per_set: dict[tuple[str, str], dict[str, int]] = {}
        for wl in workloads:
            if not _reserved(wl) or _finished(wl):
                continue
            admission = (wl.get("status") or {}).get("admission") or {}
            cq = str(admission.get("clusterQueue") or queue_of.get(
                (str(_meta(wl).get("namespace")), str((wl.get("spec") or {}).get("queueName")))))
            used = s.usage.setdefault(cq, {})
            sets = {str(p.get("name")): p for p in (wl.get("spec") or {}).get("podSets") or []}
            for assignment in admission.get("podSetAssignments") or []:
                for resource, flavor in (assignment.get("flavors") or {}).items():
                    amount = to_units(resource, (assignment.get("resourceUsage") or {}).get(
                        resource, 0))
                    used[(str(flavor), resource)] = used.get((str(flavor), resource), 0) + amount
                topology = assignment.get("topologyAssignment")
                pod_set = sets.get(str(assignment.get("name")))
                if topology and pod_set is not None:
                    flavor = next(iter((assignment.get("flavors") or {}).values()), "")
                    per_set[(str(flavor), str(assignment.get("name")))] = _per_pod(pod_set)
                    s._assume(str(flavor), topology, _per_pod(pod_set))
        s.nodes = [n for n in store.list(NODES)[0] if _node_ready(n)]
        for pod in store.list(PODS)[0]:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or _is_tas_pod(pod) or (pod.get("status") or {}).get("phase") in (
                "Succeeded", "Failed"
            ):
                continue
            used_on = s.non_tas.setdefault(str(node), {})
            for resource, amount in pod_requests(pod).items():
                used_on[resource] = used_on.get(resource, 0) + amount
        return s

    def _assume(self, flavor: str, topology: Mapping[str, Any], per_pod: Mapping[str, int]) -> None:
        levels = list(topology.get("levels") or [])
        on = self.tas_used.setdefault(flavor, {})
        for domain in topology.get("domains") or []:
            key = ",".join(f"{k}={v}" for k, v in zip(levels, domain.get("values") or [],
                                                       strict=False))  # fmt: skip
            used = on.setdefault(key, {})
            for resource, amount in per_pod.items():
                used[resource] = used.get(resource, 0) + amount * int(domain.get("count", 0))

    def topology(self, flavor_name: str) -> Topology | None:
        if flavor_name in self.tas:
            return self.tas[flavor_name]
        flavor = self.flavors.get(flavor_name)
        if flavor is None or not flavor.topology_name or not flavor.levels:
            return None
        levels = list(flavor.levels)
        used_on = self.tas_used.get(flavor_name, {})
        leaves: dict[tuple[str, ...], Leaf] = {}
        for node in self.nodes:
            labels = _meta(node).get("labels") or {}
            if any(labels.get(k) != v for k, v in flavor.node_labels.items()):
                continue
            if any(level not in labels for level in levels):
                continue
            values = tuple(str(labels[level]) for level in levels)
            name = str(_meta(node).get("name"))
            free = dict(node_allocatable(node))
            for resource, amount in self.non_tas.get(name, {}).items():
                free[resource] = free.get(resource, 0) - amount
            for key in (",".join(f"{k}={v}" for k, v in zip(levels, values, strict=True)),
                        f"{HOSTNAME_LABEL}={labels.get(HOSTNAME_LABEL)}"):  # fmt: skip
                for resource, amount in used_on.get(key, {}).items():
                    free[resource] = free.get(resource, 0) - amount
            taints = tuple((node.get("spec") or {}).get("taints") or ())
            if values in leaves:  # several nodes in one lowest-level domain: room adds up
                old = leaves[values]
                merged = {r: old.free.get(r, 0) + free.get(r, 0) for r in {*old.free, *free}}
                leaves[values] = Leaf(values, merged, old.taints, old.labels)
            else:
                leaves[values] = Leaf(values, free, taints, dict(labels))
        topology = Topology(str(flavor.topology_name), levels, list(leaves.values()))
        self.tas[flavor_name] = topology
        return topology

    def try_admit(self, wl: Mapping[str, Any], blocked: set[str]) -> _Outcome:
        namespace = str(_meta(wl).get("namespace"))
        queue = str((wl.get("spec") or {}).get("queueName") or "")
        requests = _total_requests(wl)
        lq = self.local_queues.get((namespace, queue))
        if lq is None:
            return _Outcome(reason=INADMISSIBLE, message=f"LocalQueue {queue} doesn't exist",
                            requests=requests)
        cq_name = str((lq.get("spec") or {}).get("clusterQueue"))
        cq = self.cluster_queues.get(cq_name)
        if cq is None:
            return _Outcome(reason=INADMISSIBLE, message=f"ClusterQueue {cq_name} doesn't exist",
                            requests=requests)
        if cq_name in blocked:
            return _Outcome()
        reason, _ = _cluster_queue_state(cq, self.flavor_objects, set(self.topologies))
        if reason != "Ready":
            return _Outcome(reason=INADMISSIBLE, message=f"ClusterQueue {cq_name} is inactive",
                            requests=requests)
        selector = (cq.get("spec") or {}).get("namespaceSelector")
        if not label_selector_matches(selector, self.namespace_labels.get(namespace, {})):
            return _Outcome(reason=PENDING, requests=requests,
                            message="Workload namespace doesn't match ClusterQueue selector")
        groups = resource_groups(cq)
        sets = list((wl.get("spec") or {}).get("podSets") or [])
        demands = []
        for pod_set in sets:
            template_spec = (pod_set.get("template") or {}).get("spec") or {}
            request = pod_set.get("topologyRequest") or {}
            demands.append(Demand(
                name=str(pod_set.get("name")), count=int(pod_set.get("count", 1)),
                per_pod=_per_pod(pod_set), node_selector=dict(template_spec.get("nodeSelector") or {}),
                tolerations=tuple(template_spec.get("tolerations") or ()),
                tas_level=request.get("required") or request.get("preferred"),
                tas_required="required" in request, explicit_tas=explicit_tas(request),
                group=request.get("podSetGroupName"),
            ))  # fmt: skip
        usage = self.usage.setdefault(cq_name, {})
        assigned = assign(demands, groups, self.flavors, usage)
        if assigned.message:
            if (cq.get("spec") or {}).get("queueingStrategy") == "StrictFIFO":
                blocked.add(cq_name)
            return _Outcome(reason=PENDING, message=assigned.message, requests=requests)
        topologies = self._place(demands, assigned.flavors, implied=tas_only(groups, self.flavors))
        if isinstance(topologies, str):
            if (cq.get("spec") or {}).get("queueingStrategy") == "StrictFIFO":
                blocked.add(cq_name)
            return _Outcome(reason=PENDING, message=topologies, requests=requests)
        assignments = []
        for demand in demands:
            flavors = assigned.flavors.get(demand.name, {})
            entry: dict[str, Any] = {
                "name": demand.name, "count": demand.count, "flavors": dict(flavors),
                "resourceUsage": {r: quantity(r, v) for r, v in sorted(demand.total.items())},
            }  # fmt: skip
            if demand.name in topologies:
                entry["topologyAssignment"] = topologies[demand.name]
            assignments.append(entry)
            for resource, amount in demand.total.items():
                slot = (flavors[resource], resource)
                usage[slot] = usage.get(slot, 0) + amount
        return _Outcome(admission={"clusterQueue": cq_name, "podSetAssignments": assignments})

    def _place(self, demands: Sequence[Demand], flavors: Mapping[str, Mapping[str, str]], *,
               implied: bool) -> dict[str, dict[str, Any]] | str:  # fmt: skip
        """Topology assignments per pod set name, or the pending message."""
        by_flavor: dict[str, list[Request]] = {}
        for demand in demands:
            if not (demand.explicit_tas or implied):
                continue
            chosen = set(flavors.get(demand.name, {}).values())
            if len(chosen) != 1:
                continue
            flavor = chosen.pop()
            if not (self.flavors.get(flavor) and self.flavors[flavor].topology_name):
                continue
            by_flavor.setdefault(flavor, []).append(Request(
                name=demand.name, count=demand.count, per_pod=demand.per_pod,
                level=demand.tas_level, required=demand.tas_required,
                unconstrained=not demand.tas_level, tolerations=(*demand.tolerations,
                *self.flavors[flavor].tolerations), node_selector=demand.node_selector,
                group=demand.group,
            ))  # fmt: skip
        out: dict[str, dict[str, Any]] = {}
        for flavor, requests in by_flavor.items():
            topology = self.topology(flavor)
            if topology is None:
                return "workload requires Topology, but there is no TAS cache information"
            mark = topology.checkpoint()
            placed = place_all(topology, requests)
            if placed.failure:
                topology.restore(mark)
                names = placed.failed or tuple(r.name for r in requests)
                return "; ".join(f"couldn't assign flavors to pod set {n}: {placed.failure}"
                                 for n in names)  # fmt: skip
            out.update(placed.assignments)
        return out


def _rank_bounds(
    assignments: Sequence[Mapping[str, Any]], requests: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, int], dict[str, int]]:
    """Kueue's rank offsets: in a group, the larger pod set's ranks start after the smaller's."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for index, assignment in enumerate(assignments):
        group = requests.get(str(assignment.get("name")), {}).get("podSetGroupName")
        groups.setdefault(str(group) if group else f"#{index}", []).append(assignment)
    offsets: dict[str, int] = {}
    limits: dict[str, int] = {}
    for members in groups.values():
        if len(members) > 1:
            small, large = members[0], members[1]
            if int(small.get("count") or 0) > int(large.get("count") or 0):
                small, large = large, small
            offsets[str(small.get("name"))] = 0
            offsets[str(large.get("name"))] = int(small.get("count") or 0)
            limits[str(small.get("name"))] = int(small.get("count") or 0)
            limits[str(large.get("name"))] = int(large.get("count") or 0) + int(
                small.get("count") or 0)
        else:
            offsets[str(members[0].get("name"))] = 0
            limits[str(members[0].get("name"))] = int(members[0].get("count") or 0)
    return offsets, limits


def _domain_selectors(topology: Mapping[str, Any]) -> list[tuple[dict[str, str], int]]:
    levels = list(topology.get("levels") or [])
    return [(dict(zip(levels, d.get("values") or [], strict=False)), int(d.get("count", 0)))
            for d in topology.get("domains") or []]  # fmt: skip


def _gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == TOPOLOGY_GATE
               for g in (pod.get("spec") or {}).get("schedulingGates") or [])  # fmt: skip


def pods_by_rank(
    pods: Sequence[Mapping[str, Any]], topology: Mapping[str, Any],
    request: Mapping[str, Any], *, offset: int, limit: int, size: int,
) -> list[tuple[Mapping[str, Any], dict[str, str]]] | None:  # fmt: skip
    """Gated pods with the domain their rank falls in, or None when ranks cannot be read. A
    pod's rank is its index label (plus its Job's index times the Job size, for a pod set of
    several Jobs), less the offset of its group."""
    label = request.get("podIndexLabel")
    if not label:
        return None
    group_label, groups = request.get("subGroupIndexLabel"), int(request.get("subGroupCount") or 1)
    domains: list[dict[str, str]] = []
    for selector, count in _domain_selectors(topology):
        domains.extend([selector] * count)
    ranks: dict[int, Mapping[str, Any]] = {}
    for pod in pods:
        labels = _meta(pod).get("labels") or {}
        raw = labels.get(label)
        if raw is None or not str(raw).isdigit() or int(raw) >= limit:
            return None
        rank = int(raw) - offset
        if group_label:
            job_index = labels.get(group_label)
            if job_index is None or not str(job_index).isdigit() or int(job_index) >= groups:
                return None
            if int(raw) >= size // groups:
                return None
            rank = int(raw) + int(job_index) * (size // groups) - offset
        if rank < 0 or rank >= size or rank in ranks or rank >= len(domains):
            return None
        ranks[rank] = pod
    return [(pod, domains[rank]) for rank, pod in sorted(ranks.items()) if _gated(pod)]


def pods_greedily(
    pods: Sequence[Mapping[str, Any]], topology: Mapping[str, Any]
) -> list[tuple[Mapping[str, Any], dict[str, str]]]:
    """Gated pods given to the domains that still have fewer ungated pods than assigned."""
    levels = list(topology.get("levels") or [])
    gated = [p for p in pods if _gated(p)]
    placed: dict[tuple[str, ...], int] = {}
    for pod in pods:
        if not _gated(pod):
            selector = (pod.get("spec") or {}).get("nodeSelector") or {}
            key = tuple(str(selector.get(level, "")) for level in levels)
            placed[key] = placed.get(key, 0) + 1
    out: list[tuple[Mapping[str, Any], dict[str, str]]] = []
    for selector, count in _domain_selectors(topology):
        key = tuple(selector.get(level, "") for level in levels)
        room = max(count - placed.get(key, 0), 0)
        for pod in gated[len(out): len(out) + room]:
            out.append((pod, selector))
    return out
