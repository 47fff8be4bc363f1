"""Collects dangling dependents: objects created with ownerReferences whose owners no longer exist.

The store's garbage collection (deletion.py) deletes dependents when their owner is deleted; an object
created *after* its owner is gone (a controller racing a delete) would otherwise live forever. The
real garbage collector deletes such an object once it sees that none of its owners exist (same
name and uid); this does the same on ADDED events of pods, services, jobs, replica sets and JobSets
(a TrainJob's).
Started by `cluster.TwinCluster`. It does not implement propagation policies (the store does).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import Any, cast

from agent.twin.apierror import ApiError
from agent.twin.clock import TwinClock
from agent.twin.controller import Controller, Subscription
from agent.twin.resources import ResourceType, UnknownResourceError, by_kind, lookup
from agent.twin.store import Store
from agent.twin.watch import WatchEvent

log = logging.getLogger(__name__)

DEPENDENT_TYPES = (
    lookup("pods"),
    lookup("services"),
    lookup("jobs", group="batch"),
    lookup("replicasets", group="apps"),
    lookup("jobsets"),
)


class DanglingCollector(Controller):
    def __init__(self, store: Store, *, clock: TwinClock) -> None:
        super().__init__(store, name="garbage-collector", clock=clock)
        self._types = {rt.plural: rt for rt in DEPENDENT_TYPES}

    def _subscriptions(self) -> list[Subscription]:
        return [Subscription(rt, self._on_added(rt)) for rt in DEPENDENT_TYPES]

    def _on_added(self, rt: ResourceType) -> Any:
        def handle(event: WatchEvent) -> None:
            meta = event.object.get("metadata") or {}
            if event.type == "ADDED" and meta.get("ownerReferences"):
                self._queue.add((rt.plural, str(meta.get("namespace")), str(meta.get("name"))))

        return handle

    def _owner_exists(self, ref: Mapping[str, Any], namespace: str) -> bool:
        try:
            rt = by_kind(str(ref.get("apiVersion")), str(ref.get("kind")))
        except UnknownResourceError:
            return True  # a kind the twin does not serve: leave it alone
        try:
            owner = self._store.get(
                rt, str(ref.get("name")), namespace=namespace if rt.namespaced else None
            )
        except ApiError:
            return False
        return bool((owner.get("metadata") or {}).get("uid") == ref.get("uid"))

    def _reconcile(self, raw: Hashable) -> float | None:
        plural, namespace, name = cast(tuple[str, str, str], raw)
        rt = self._types[plural]
        try:
            obj = self._store.get(rt, name, namespace=namespace)
        except ApiError:
            return None
        refs = (obj.get("metadata") or {}).get("ownerReferences") or []
        if not refs or any(self._owner_exists(ref, namespace) for ref in refs):
            return None
        log.debug("collecting %s %s/%s: its owners are gone", plural, namespace, name)
        try:
            self._store.delete(rt, name, namespace=namespace)
        except ApiError:
            return None
        return None
