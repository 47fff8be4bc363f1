"""The twin's kube-scheduler: watches pods without a node and binds them through pods/binding.

Started by `cluster.TwinCluster`. Each pending pod (schedulerName default-scheduler, no nodeName,
no scheduling gates, not terminating) goes through `scheduler_cycle.schedule` on a snapshot of the store. A placed pod
is bound with `Store.bind` and gets a Scheduled event; an unplaceable one stays Pending with
`PodScheduled=False, reason=Unschedulable` and a FailedScheduling event carrying kube-scheduler's
message. Unschedulable pods are retried when the cluster changes (a pod leaves, a node changes),
never by polling. Tie-breaks use one `random.Random(seed)`, so a scenario places pods the same way
each run. It does not preempt and does not run extenders.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Hashable, Mapping
from typing import Any, cast

from agent.twin.apierror import ApiError
from agent.twin.clock import TwinClock
from agent.twin.controller import Controller, Subscription
from agent.twin.operator_events import EventRecorder, timestamp
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from agent.twin.scheduler_cycle import schedule
from agent.twin.scheduler_snapshot import Snapshot
from agent.twin.store import Store
from agent.twin.watch import WatchEvent

log = logging.getLogger(__name__)

PODS = lookup("pods")
NODES = lookup("nodes")
NAMESPACES = lookup("namespaces")
SCHEDULER_NAME = "default-scheduler"
RETRY_SECONDS = 1.0  # model seconds between two attempts at one unschedulable pod


def needs_scheduling(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return (
        not spec.get("nodeName")
        and not spec.get("schedulingGates")  # a gated pod waits until its gates are removed
        and (spec.get("schedulerName") or SCHEDULER_NAME) == SCHEDULER_NAME
        and not meta.get("deletionTimestamp")
        and phase not in ("Succeeded", "Failed")
    )


class Scheduler(Controller):
    def __init__(self, store: Store, *, clock: TwinClock, seed: int = 1) -> None:
        super().__init__(store, name="scheduler", clock=clock)
        self._rng = random.Random(seed)
        self._events = EventRecorder(store, component=SCHEDULER_NAME)
        self._lock = threading.Lock()
        self._unschedulable: set[tuple[str, str]] = set()

    def _subscriptions(self) -> list[Subscription]:
        return [
            Subscription(PODS, self._on_pod, since="0"),
            Subscription(NODES, self._on_cluster_change),
        ]

    # --- events ---------------------------------------------------------------------------

    def _on_pod(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if event.type == "DELETED" or (event.type == "MODIFIED" and meta.get("deletionTimestamp")):
            with self._lock:
                self._unschedulable.discard(key)
            self._on_cluster_change(event)
            return
        if needs_scheduling(event.object):
            with self._lock:
                waiting = key in self._unschedulable
            if not waiting or event.type == "ADDED":
                self._queue.add(key)
        elif event.type == "ADDED" and (event.object.get("spec") or {}).get("nodeName"):
            self._on_cluster_change(event)  # a pod placed by someone else frees affinity terms

    def _on_cluster_change(self, _event: WatchEvent) -> None:
        with self._lock:
            waiting = list(self._unschedulable)
        for key in waiting:
            self._queue.add_after(key, RETRY_SECONDS)

    # --- one pod ----------------------------------------------------------------------------

    def _reconcile(self, key: Hashable) -> float | None:
        namespace, name = cast(tuple[str, str], key)
        key = (namespace, name)
        try:
            pod = self._store.get(PODS, name, namespace=namespace)
        except ApiError:
            with self._lock:
                self._unschedulable.discard(key)
            return None
        if not needs_scheduling(pod):
            with self._lock:
                self._unschedulable.discard(key)
            return None
        # Stored objects are never mutated by the store, so the cycle reads them without copies.
        nodes = self._store.list_refs(NODES)[0]
        pods = self._store.list_refs(PODS)[0]
        namespaces = self._store.list_refs(NAMESPACES)[0]
        decision = schedule(pod, Snapshot.build(nodes, pods, namespaces), self._rng)
        if decision.node is None:
            with self._lock:
                self._unschedulable.add(key)
            self._mark_unschedulable(pod, decision.message)
            return None
        try:
            self._store.bind(namespace, name, decision.node)
        except ApiError as exc:
            log.debug("binding %s/%s failed: %s", namespace, name, exc.message)
            return None
        with self._lock:
            self._unschedulable.discard(key)
        self._events.record(
            pod,
            reason="Scheduled",
            message=f"Successfully assigned {namespace}/{name} to {decision.node}",
        )
        return None

    def _mark_unschedulable(self, pod: Mapping[str, Any], message: str) -> None:
        meta = pod.get("metadata") or {}
        conditions = [
            c
            for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("type") != "PodScheduled"
        ]
        previous = next(
            (
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") == "PodScheduled"
            ),
            None,
        )
        if previous is None or previous.get("message") != message:
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": timestamp(),
                }
            )
            try:
                self._store.patch(
                    PODS,
                    str(meta.get("name")),
                    {"status": {"conditions": conditions}},
                    namespace=str(meta.get("namespace")),
                    patch_type=PatchType.MERGE,
                    subresource="status",
                )
            except ApiError as exc:
                log.debug("pod status not written: %s", exc.message)
                return
        self._events.record(pod, reason="FailedScheduling", message=message, warning=True)
