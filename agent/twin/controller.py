"""The scaffolding every twin controller shares: a store, a work queue fed by store subscriptions.

Subclassed by the scheduler, the kubelet, the Job, Deployment and training operators, the dangling
collector and the training runtime. A subclass says what it watches (`_subscriptions`: resource,
handler, and whether to replay current objects first) and what one key means (`_reconcile`, run
on the queue's worker thread); the handlers put keys on `self._queue`. `start` starts the queue and
then subscribes in the declared order; `stop` unsubscribes and then stops the queue; `idle` is the
queue's. `_get_live` is the first step of most reconciles (the object, unless it is gone or being
deleted), and `owned_by` the ownerReferences test the operators share. A reconcile writes under
the field manager the real component writes under (kube-controller-manager, kube-scheduler,
kubelet; the add-on operators under their own names). It does not decide what a key is, and it
holds no lock of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.twin import managed_fields
from agent.twin.apierror import ApiError
from agent.twin.clock import TwinClock
from agent.twin.operator_queue import WorkQueue
from agent.twin.resources import ResourceType
from agent.twin.store import Obj, Store
from agent.twin.watch import WatchEvent

# queue name -> the field manager the real component's writes carry
_MANAGERS = {
    "garbage-collector": "kube-controller-manager",
    "job-controller": "kube-controller-manager",
    "deployment-controller": "kube-controller-manager",
    "scheduler": "kube-scheduler",
    "kubelet": "kubelet",
}


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    """True when one of `obj`'s ownerReferences names the owner with this uid."""
    return any(
        r.get("uid") == uid for r in (obj.get("metadata") or {}).get("ownerReferences") or []
    )


@dataclass(frozen=True)
class Subscription:
    """One in-process watch: `since="0"` replays current objects as ADDED first; None does not."""

    resource: ResourceType
    handler: Callable[[WatchEvent], None]
    since: str | None = None


class Controller:
    """Owns the store handle, the work queue (named `name`) and the subscriptions."""

    def __init__(self, store: Store, *, name: str, clock: TwinClock) -> None:
        self._store = store
        self.field_manager = _MANAGERS.get(name, name)
        self._queue = WorkQueue(name, self._reconcile_as_manager, clock=clock)
        self._unsubscribe: list[Callable[[], None]] = []

    def _subscriptions(self) -> list[Subscription]:
        """What this controller watches, in subscription order."""
        raise NotImplementedError

    def _reconcile(self, key: Hashable) -> float | None:
        """Handle one key; return model seconds to run it again, or None."""
        raise NotImplementedError

    def _reconcile_as_manager(self, key: Hashable) -> float | None:
        with managed_fields.acting_as(self.field_manager):
            return self._reconcile(key)

    def _get_live(self, rt: ResourceType, name: str, *, namespace: str) -> Obj | None:
        """The object to reconcile, or None when it is gone or being deleted (nothing to do)."""
        try:
            obj = self._store.get(rt, name, namespace=namespace)
        except ApiError:
            return None
        return None if (obj.get("metadata") or {}).get("deletionTimestamp") else obj

    def start(self) -> None:
        self._queue.start()
        for sub in self._subscriptions():
            self._unsubscribe.append(
                self._store.subscribe(sub.resource, sub.handler, since=sub.since)
            )

    def stop(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._queue.stop()

    def idle(self) -> bool:
        return self._queue.idle()
