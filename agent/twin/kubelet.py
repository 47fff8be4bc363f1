"""The twin's kubelet (one for all nodes): starts bound pods, stops deleted ones, crashes and restarts
containers, and hands out GPUs.

Started by `cluster.TwinCluster`. A pod bound to a node turns Running after the scenario's start
delay (model seconds) with the container statuses, conditions, IPs and QoS class a real kubelet
reports; if the scenario names a `pod_zone_label`, the pod first gets that label set to its node's
zone (emulating the mutating webhook that zone-boundary policies rely on). A pod with a
deletionTimestamp is removed (grace 0) after `pod_stop_seconds`, as a kubelet does once its containers have
exited. `crash()` is how the training runtime makes a worker exit with Error: restartPolicy Never
fails the pod; otherwise the container restarts after CrashLoopBackOff back-off (10 s doubling,
capped). Pods annotated `twin.zonemedic.io/run-seconds` succeed after that long. It does not run
anything: there are no processes, only status.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from agent.twin.apierror import ApiError
from agent.twin.clock import TwinClock
from agent.twin.controller import Controller, Subscription
from agent.twin.operator_events import EventRecorder, timestamp
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from agent.twin.scheduler_resources import GPU, pod_requests
from agent.twin.store import Store
from agent.twin.watch import WatchEvent

log = logging.getLogger(__name__)

PODS = lookup("pods")
NODES = lookup("nodes")
ZONE_LABEL = "topology.kubernetes.io/zone"
RUN_SECONDS_ANNOTATION = "twin.zonemedic.io/run-seconds"
PodKey = tuple[str, str]


@dataclass
class _PodState:
    start_due: float | None = None
    stop_due: float | None = None
    restart_due: float | None = None
    finish_due: float | None = None
    node: str = ""
    gpus: list[int] = field(default_factory=list)
    ip: str = ""


@dataclass(frozen=True)
class GpuHolder:
    namespace: str
    pod: str
    container: str


def qos_class(pod: Mapping[str, Any]) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    requests = [((c.get("resources") or {}).get("requests") or {}) for c in containers]
    limits = [((c.get("resources") or {}).get("limits") or {}) for c in containers]
    if not any(requests) and not any(limits):
        return "BestEffort"
    guaranteed = all(
        lim.get("cpu")
        and lim.get("memory")
        and req.get("cpu", lim["cpu"]) == lim["cpu"]
        and req.get("memory", lim["memory"]) == lim["memory"]
        for req, lim in zip(requests, limits, strict=True)
    )
    return "Guaranteed" if guaranteed else "Burstable"


class Kubelet(Controller):
    def __init__(
        self,
        store: Store,
        *,
        clock: TwinClock,
        start_seconds: float = 2.0,
        stop_seconds: float = 1.0,
        pod_zone_label: str | None = None,
        crash_backoff_seconds: float = 10.0,
        crash_backoff_max_seconds: float = 300.0,
    ) -> None:
        super().__init__(store, name="kubelet", clock=clock)
        self._clock = clock
        self._start_seconds = start_seconds
        self._stop_seconds = stop_seconds
        self._zone_label = pod_zone_label
        self._backoff = crash_backoff_seconds
        self._backoff_max = crash_backoff_max_seconds
        self._events = EventRecorder(store, component="kubelet")
        self._lock = threading.Lock()
        self._pods: dict[PodKey, _PodState] = {}
        self._gpus: dict[str, dict[int, GpuHolder]] = {}  # node -> gpu index -> holder
        self._node_index: dict[str, int] = {}
        self._ip_seq: dict[str, int] = {}

    def _subscriptions(self) -> list[Subscription]:
        return [Subscription(PODS, self._on_pod, since="0")]

    def gpu_holders(self) -> dict[str, dict[int, GpuHolder]]:
        """node -> GPU index -> the pod holding it (for the DCGM exporter)."""
        with self._lock:
            return {node: dict(held) for node, held in self._gpus.items()}

    # --- events -------------------------------------------------------------------------------

    def _on_pod(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if event.type == "DELETED":
            self._forget(key)
            return
        if (event.object.get("spec") or {}).get("nodeName"):
            self._queue.add(key)

    def _forget(self, key: PodKey) -> None:
        with self._lock:
            state = self._pods.pop(key, None)
            if state is not None:
                self._release(state)

    def _release(self, state: _PodState) -> None:
        held = self._gpus.get(state.node, {})
        for index in state.gpus:
            held.pop(index, None)
        state.gpus = []

    # --- reconcile ------------------------------------------------------------------------------

    def _reconcile(self, raw: Hashable) -> float | None:
        key = cast(PodKey, raw)
        namespace, name = key
        try:
            pod = self._store.get(PODS, name, namespace=namespace)
        except ApiError:
            self._forget(key)
            return None
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return None
        now = self._clock.now()
        with self._lock:
            state = self._pods.setdefault(key, _PodState(node=str(node)))
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        phase = status.get("phase")
        if meta.get("deletionTimestamp"):
            if state.stop_due is None:
                state.stop_due = now + self._stop_seconds
            if now < state.stop_due:
                return state.stop_due - now
            with self._lock:
                self._release(state)
            with contextlib.suppress(ApiError):
                self._store.delete(PODS, name, namespace=namespace, grace_period_seconds=0)
            return None
        if phase in ("Succeeded", "Failed"):
            with self._lock:
                self._release(state)
            return None
        if phase == "Pending":
            if state.start_due is None:
                state.start_due = now + self._start_seconds
            if now < state.start_due:
                return state.start_due - now
            return self._start(pod, state, now)
        if state.restart_due is not None:
            if now < state.restart_due:
                return state.restart_due - now
            state.restart_due = None
            self._restart(pod)
        if state.finish_due is not None:
            if now < state.finish_due:
                return state.finish_due - now
            self._finish(pod)
        return None

    def _node(self, name: str) -> Mapping[str, Any] | None:
        try:
            return self._store.get(NODES, name)
        except ApiError:
            return None

    def _pod_ip(self, node: str) -> str:
        with self._lock:
            index = self._node_index.setdefault(node, len(self._node_index))
            seq = self._ip_seq.get(node, 1) + 1
            self._ip_seq[node] = seq if seq < 254 else 1
        return f"10.244.{index % 256}.{seq}"

    def _allocate_gpus(
        self, pod: Mapping[str, Any], state: _PodState, node: Mapping[str, Any]
    ) -> None:
        want = pod_requests(pod).get(GPU, 0)
        if not want or state.gpus:
            return
        capacity = int((node.get("status") or {}).get("allocatable", {}).get(GPU, 0) or 0)
        containers = (pod.get("spec") or {}).get("containers") or []
        container = next(
            (
                c.get("name", "")
                for c in containers
                if GPU in ((c.get("resources") or {}).get("limits") or {})
                or GPU in ((c.get("resources") or {}).get("requests") or {})
            ),
            containers[0].get("name", "") if containers else "",
        )
        meta = pod.get("metadata") or {}
        holder = GpuHolder(str(meta.get("namespace")), str(meta.get("name")), str(container))
        with self._lock:
            held = self._gpus.setdefault(state.node, {})
            free = [i for i in range(capacity) if i not in held][:want]
            for index in free:
                held[index] = holder
            state.gpus = free

    def _start(self, pod: Mapping[str, Any], state: _PodState, now: float) -> float | None:
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        node = self._node(state.node)
        if node is None:
            return None
        zone = ((node.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL)
        if self._zone_label and zone and (meta.get("labels") or {}).get(self._zone_label) != zone:
            try:
                pod = self._store.patch(
                    PODS,
                    name,
                    {"metadata": {"labels": {self._zone_label: zone}}},
                    namespace=namespace,
                    patch_type=PatchType.MERGE,
                )
            except ApiError:
                return None
        self._allocate_gpus(pod, state, node)
        started = timestamp()
        host_ip = next(
            (a.get("address") for a in (node.get("status") or {}).get("addresses") or []
             if a.get("type") == "InternalIP"),
            "10.0.0.1",
        )  # fmt: skip
        state.ip = state.ip or self._pod_ip(state.node)
        spec = pod.get("spec") or {}
        containers = spec.get("containers") or []
        statuses = [
            {
                "name": c.get("name"),
                "image": c.get("image"),
                "imageID": f"{c.get('image')}@sha256:{'0' * 64}",
                "containerID": f"containerd://{name}-{c.get('name')}-0",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started}},
                "lastState": {},
            }
            for c in containers
        ]
        conditions = [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
            for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
        ]  # fmt: skip
        body = {
            "status": {
                "phase": "Running",
                "hostIP": host_ip,
                "hostIPs": [{"ip": host_ip}],
                "podIP": state.ip,
                "podIPs": [{"ip": state.ip}],
                "startTime": started,
                "qosClass": qos_class(pod),
                "conditions": conditions,
                "containerStatuses": statuses,
            }
        }
        try:
            self._store.patch(
                PODS,
                name,
                body,
                namespace=namespace,
                patch_type=PatchType.MERGE,
                subresource="status",
            )
        except ApiError:
            return None
        for c in containers:
            self._events.record(pod, reason="Started", message=f"Started container {c.get('name')}")
        run_for = (meta.get("annotations") or {}).get(RUN_SECONDS_ANNOTATION)
        if run_for is not None:
            try:
                state.finish_due = now + float(run_for)
            except ValueError:
                log.warning(
                    "pod %s/%s: bad %s %r", namespace, name, RUN_SECONDS_ANNOTATION, run_for
                )
            else:
                return state.finish_due - now
        return None

    def complete(self, namespace: str, name: str) -> None:
        """The pod's containers exit 0 (the training runtime calls this when a job is done)."""
        try:
            pod = self._store.get(PODS, name, namespace=namespace)
        except ApiError:
            return
        if (pod.get("status") or {}).get("phase") == "Running":
            self._finish(pod)

    def _finish(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        done = timestamp()
        statuses = []
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            started = ((cs.get("state") or {}).get("running") or {}).get("startedAt", done)
            statuses.append({**cs, "ready": False, "started": False, "state": {"terminated": {
                "exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": done}}})  # fmt: skip
        conditions = [
            {**c, "status": "False", "reason": "PodCompleted"} if c.get("type") in ("Ready", "ContainersReady") else c
            for c in (pod.get("status") or {}).get("conditions") or []
        ]  # fmt: skip
        try:
            self._store.patch(
                PODS, str(meta.get("name")),
                {"status": {"phase": "Succeeded", "containerStatuses": statuses, "conditions": conditions}},
                namespace=str(meta.get("namespace")), patch_type=PatchType.MERGE, subresource="status",
            )  # fmt: skip
        except ApiError:
            return

    # --- crashes (driven by the training runtime) -----------------------------------------------

    def _crash_delay(self, restarts: int) -> float:
        """CrashLoopBackOff: base, 2 base, 4 base, ... at most the cap (restart 1 waits base)."""
        return float(min(self._backoff * 2 ** (max(restarts, 1) - 1), self._backoff_max))

    def crash(self, namespace: str, name: str, *, message: str, exit_code: int = 1) -> None:
        """The pod's containers exit with Error: restart with back-off, or fail (Never)."""
        pod = self._get_live(PODS, name, namespace=namespace)
        if pod is None:
            return
        status = pod.get("status") or {}
        if status.get("phase") != "Running":
            return
        key = (namespace, name)
        now = self._clock.now()
        done = timestamp()
        never = (pod.get("spec") or {}).get("restartPolicy") == "Never"
        statuses = []
        restarts = 0
        for cs in status.get("containerStatuses") or []:
            running = (cs.get("state") or {}).get("running")
            if running is None:
                statuses.append(cs)
                restarts = max(restarts, int(cs.get("restartCount", 0)))
                continue
            terminated = {"exitCode": exit_code, "reason": "Error", "message": message,
                          "startedAt": running.get("startedAt", done), "finishedAt": done}  # fmt: skip
            if never:
                statuses.append(
                    {**cs, "ready": False, "started": False, "state": {"terminated": terminated}}
                )
                continue
            restarts = int(cs.get("restartCount", 0)) + 1
            delay = self._crash_delay(restarts)
            statuses.append({
                **cs, "ready": False, "started": False, "restartCount": restarts,
                "lastState": {"terminated": terminated},
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message":
                          f"back-off {int(delay)}s restarting failed container={cs.get('name')} pod={name}_{namespace}"}},
            })  # fmt: skip
        conditions = [
            {**c, "status": "False", "reason": "ContainersNotReady" if not never else "PodFailed",
             "lastTransitionTime": done}
            if c.get("type") in ("Ready", "ContainersReady") else c
            for c in status.get("conditions") or []
        ]  # fmt: skip
        body: dict[str, Any] = {"containerStatuses": statuses, "conditions": conditions}
        if never:
            body["phase"] = "Failed"
        try:
            self._store.patch(PODS, name, {"status": body}, namespace=namespace,
                              patch_type=PatchType.MERGE, subresource="status")  # fmt: skip
        except ApiError:
            return
        self._events.record(
            pod, reason="BackOff", message="Back-off restarting failed container", warning=True
        )
        if not never:
            delay = self._crash_delay(restarts)
            with self._lock:
                state = self._pods.setdefault(
                    key, _PodState(node=str((pod.get("spec") or {}).get("nodeName")))
                )
                state.restart_due = now + delay
            self._queue.add_after(key, delay)

    def _restart(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        started = timestamp()
        statuses = []
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if "waiting" in (cs.get("state") or {}):
                statuses.append({**cs, "ready": True, "started": True, "state": {"running": {"startedAt": started}},
                      "containerID": f"containerd://{meta.get('name')}-{cs.get('name')}-{cs.get('restartCount', 0)}"})  # fmt: skip
            else:
                statuses.append(cs)
        conditions = [
            {**c, "status": "True", "reason": None, "lastTransitionTime": started}
            if c.get("type") in ("Ready", "ContainersReady") else c
            for c in (pod.get("status") or {}).get("conditions") or []
        ]  # fmt: skip
        try:
            self._store.patch(
                PODS, str(meta.get("name")), {"status": {"containerStatuses": statuses, "conditions": conditions}},
                namespace=str(meta.get("namespace")), patch_type=PatchType.MERGE, subresource="status",
            )  # fmt: skip
        except ApiError:
            return
