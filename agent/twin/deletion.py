"""Deletion in the twin's store: propagation, garbage collection, finalizers, graceful pods.

What the real API server and garbage collector do on delete: Background (the object goes, its
dependents are collected once none of their owners is left), Foreground (the owner stays with the
`foregroundDeletion` finalizer until its dependents are gone), Orphan (the dependents lose the
ownerReference); finalizers keep an object Terminating until they are removed; a bound pod stays
Terminating for its grace period (gracetimer.py); a namespace empties itself and goes once empty.

Used by the store facade (store.py) and the write module (a write that removes the last finalizer
of a terminating object ends its deletion). The lock is held by the caller of every method. It
does not create or patch objects, and does not speak HTTP.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from agent.twin.gracetimer import GraceTimer
from agent.twin.objects import ObjectTable
from agent.twin.resources import ResourceType, lookup
from agent.twin.watch import EventType

Obj = dict[str, Any]

FOREGROUND_FINALIZER = "foregroundDeletion"
NAMESPACES_KEY = ("", "v1", "namespaces")
PODS_KEY = ("", "v1", "pods")


class Propagation(StrEnum):
    BACKGROUND = "Background"
    FOREGROUND = "Foreground"
    ORPHAN = "Orphan"


def timestamp(seconds: float) -> str:
    """An RFC 3339 timestamp in whole seconds, as Kubernetes writes them."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


class Deletion:
    """Deletes objects in the table with the server's semantics; see the module docstring."""

    def __init__(
        self, table: ObjectTable, lock: threading.RLock, *, clock: Callable[[], float]
    ) -> None:
        self._table = table
        self._clock = clock
        self.timer = GraceTimer(lock, clock=clock, expire=self.expire_due)

    def _grace(self, rt: ResourceType, current: Obj, grace: int | None) -> int:
        """The grace period a deletion gets: only a bound, unfinished pod waits."""
        if rt.key != PODS_KEY:
            return 0
        spec = current.get("spec") or {}
        phase = (current.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return 0
        return int(spec.get("terminationGracePeriodSeconds", 30)) if grace is None else grace

    def _marked(
        self, rt: ResourceType, current: Obj, *, propagation: Propagation, grace: int
    ) -> Obj | None:
        """The object marked for deletion (deletionTimestamp, finalizers), or None when it goes
        at once. Writes nothing."""
        cmeta = current["metadata"]
        is_namespace = rt.key == NAMESPACES_KEY
        finalizers = list(cmeta.get("finalizers") or ())
        if (
            propagation is Propagation.FOREGROUND
            and self._table.dependents.get(cmeta["uid"])
            and FOREGROUND_FINALIZER not in finalizers
        ):
            finalizers.append(FOREGROUND_FINALIZER)
        if not (finalizers or grace > 0 or is_namespace):
            return None
        new = dict(current)
        meta = dict(cmeta)
        new["metadata"] = meta
        meta["deletionTimestamp"] = timestamp(self._clock() + grace)
        meta["deletionGracePeriodSeconds"] = grace
        if finalizers:
            meta["finalizers"] = finalizers
        if is_namespace:
            new["status"] = {**(current.get("status") or {}), "phase": "Terminating"}
        return new

    def _shortened(self, rt: ResourceType, current: Obj, grace: int) -> Obj | None:
        """A terminating pod given a shorter (non-zero) grace period, or None when the request
        changes nothing or removes it at once."""
        cmeta = current["metadata"]
        waiting = int(cmeta.get("deletionGracePeriodSeconds", 0))
        if rt.key != PODS_KEY or cmeta["uid"] not in self.timer.pending or grace >= waiting:
            return None
        if grace == 0:
            return None
        new = dict(current)
        new["metadata"] = {
            **cmeta,
            "deletionTimestamp": timestamp(self._clock() + grace),
            "deletionGracePeriodSeconds": grace,
        }
        return new

    def preview(
        self, rt: ResourceType, current: Obj, *, propagation: Propagation, grace: int | None
    ) -> Obj:
        """What `delete` would answer (a dry run), writing nothing."""
        period = self._grace(rt, current, grace)
        if current["metadata"].get("deletionTimestamp"):
            return self._shortened(rt, current, period) or current
        return self._marked(rt, current, propagation=propagation, grace=period) or current

    def delete(
        self, rt: ResourceType, current: Obj, *, propagation: Propagation, grace: int | None
    ) -> Obj:
        """Start or finish deleting `current`. Returns the latest state."""
        table = self._table
        pending = self.timer.pending
        cmeta = current["metadata"]
        uid = cmeta["uid"]
        period = self._grace(rt, current, grace)
        if cmeta.get("deletionTimestamp"):
            # Already terminating: only a shorter grace period changes anything.
            waiting = int(cmeta.get("deletionGracePeriodSeconds", 0))
            if rt.key == PODS_KEY and uid in pending and period == 0 < waiting:
                pending.discard(uid)
                if not cmeta.get("finalizers"):
                    self.remove(rt, current, already_bumped=False)
                return current
            shorter = self._shortened(rt, current, period)
            if shorter is not None:
                table.modify(rt, current, shorter)
                self.timer.schedule(uid, self._clock() + period)
                return shorter
            return current
        if propagation is Propagation.ORPHAN:
            self._orphan_dependents(uid)
        waits_for_dependents = propagation is Propagation.FOREGROUND and bool(
            table.dependents.get(uid)
        )
        new = self._marked(rt, current, propagation=propagation, grace=period)
        if new is None:
            self.remove(rt, current, already_bumped=False)
            return current
        if period > 0:
            pending.add(uid)
            self.timer.schedule(uid, self._clock() + period)
        table.modify(rt, current, new)
        if waits_for_dependents:
            for dep_uid in sorted(table.dependents.get(uid, ())):
                self._delete_uid(dep_uid, Propagation.FOREGROUND)
        if rt.key == NAMESPACES_KEY:
            self._empty_namespace(cmeta["name"])
        found = table.find(rt, cmeta.get("namespace", ""), cmeta["name"])
        return new if found is None else found

    def _delete_uid(self, uid: str, propagation: Propagation) -> None:
        found = self._table.by_uid_obj(uid)
        if found is not None:
            self.delete(found[0], found[1], propagation=propagation, grace=None)

    def _orphan_dependents(self, owner_uid: str) -> None:
        table = self._table
        for dep_uid in sorted(table.dependents.get(owner_uid, ())):
            found = table.by_uid_obj(dep_uid)
            if found is None:
                continue
            rt, dep = found
            new = dict(dep)
            meta = dict(dep["metadata"])
            new["metadata"] = meta
            refs = [r for r in meta.get("ownerReferences") or () if r.get("uid") != owner_uid]
            if refs:
                meta["ownerReferences"] = refs
            else:
                meta.pop("ownerReferences", None)
            table.modify(rt, dep, new)

    def _empty_namespace(self, ns: str) -> None:
        table = self._table
        for key, bucket in list(table.objects.items()):
            rt = table.types[key]
            if not rt.namespaced:
                continue
            for key2 in sorted(k for k in bucket if k[0] == ns):
                obj = bucket.get(key2)
                if obj is not None:
                    self.delete(rt, obj, propagation=Propagation.BACKGROUND, grace=None)
        self._maybe_finish_namespace(ns)

    def _maybe_finish_namespace(self, ns: str) -> None:
        table = self._table
        ns_rt = lookup("namespaces")
        nsobj = table.find(ns_rt, "", ns)
        if nsobj is None or not nsobj["metadata"].get("deletionTimestamp"):
            return
        for key, bucket in table.objects.items():
            if table.types[key].namespaced and any(k[0] == ns for k in bucket):
                return
        if not nsobj["metadata"].get("finalizers"):
            self.remove(ns_rt, nsobj, already_bumped=False)

    def remove(self, rt: ResourceType, obj: Obj, *, already_bumped: bool) -> None:
        """Drop `obj` from the store, emit DELETED, and collect what depended on it."""
        table = self._table
        meta = obj["metadata"]
        uid = meta["uid"]
        ns = meta.get("namespace", "")
        table.drop(rt, obj)
        self.timer.pending.discard(uid)
        final = obj
        if not already_bumped:
            final = dict(obj)
            final["metadata"] = dict(meta)
            table.bump(final["metadata"])
        table.hub.emit(EventType.DELETED, rt, final, old=None)
        self._collect_dependents(uid)
        self._finish_foreground_owners(meta)
        if rt.namespaced and ns:
            self._maybe_finish_namespace(ns)

    def _collect_dependents(self, uid: str) -> None:
        """Background garbage collection of dependents whose owners are now all gone."""
        table = self._table
        for dep_uid in sorted(table.dependents.pop(uid, set())):
            found = table.by_uid_obj(dep_uid)
            if found is None:
                continue
            dep_rt, dep = found
            live = [
                r
                for r in dep["metadata"].get("ownerReferences") or ()
                if r.get("uid") != uid and r.get("uid") in table.by_uid
            ]
            if live:
                continue
            self.delete(dep_rt, dep, propagation=Propagation.BACKGROUND, grace=None)

    def _finish_foreground_owners(self, meta: Obj) -> None:
        """Owners in foreground deletion finish once their last dependent is gone."""
        table = self._table
        for ref in meta.get("ownerReferences") or ():
            owner_uid = ref.get("uid")
            if not owner_uid or table.dependents.get(owner_uid):
                continue
            found = table.by_uid_obj(owner_uid)
            if found is None:
                continue
            o_rt, owner = found
            if FOREGROUND_FINALIZER not in (owner["metadata"].get("finalizers") or ()):
                continue
            new = dict(owner)
            new["metadata"] = dict(owner["metadata"])
            rest = [f for f in owner["metadata"]["finalizers"] if f != FOREGROUND_FINALIZER]
            new["metadata"]["finalizers"] = rest
            table.bump(new["metadata"])
            table.put(o_rt, new, old=owner)
            if rest or owner_uid in self.timer.pending:
                table.hub.emit(EventType.MODIFIED, o_rt, new, old=owner)
            else:
                self.remove(o_rt, new, already_bumped=True)

    def expire_due(self) -> int:
        """Remove pods whose grace period has passed by the store's clock; returns how many."""
        removed = 0
        pending = self.timer.pending
        for uid in self.timer.pop_due(self._clock()):
            if uid not in pending:
                continue
            found = self._table.by_uid_obj(uid)
            pending.discard(uid)
            if found is None:
                continue
            rt, obj = found
            if not obj["metadata"].get("finalizers"):
                self.remove(rt, obj, already_bumped=False)
                removed += 1
        return removed
