"""The twin store's object table: stored objects, the resourceVersion counter and the indexes.

Objects are kept by resource type, then (namespace, name); `by_uid` finds an object from its uid
and `dependents` maps an owner's uid to the uids whose ownerReferences name it (what garbage
collection walks). Every write goes through `bump` (the next global resourceVersion) and `put`
(store and re-index), and is then reported to the watch hub by the caller. Stored objects are
never mutated after they are stored: a write stores a new dict.

Used by the store's write and deletion modules (writes.py, deletion.py) and the facade (store.py),
all under the store's lock. It does not validate, admit, or decide deletion semantics.
"""

from __future__ import annotations

import threading
from typing import Any

from agent.twin.apierror import not_found
from agent.twin.resources import ResourceType
from agent.twin.watch import EventType, Key, WatchHub

Obj = dict[str, Any]


class ObjectTable:
    """The objects and their indexes; every method expects the store's lock to be held."""

    def __init__(self, lock: threading.RLock, *, history_limit: int) -> None:
        self.rv = 0
        self.objects: dict[Key, dict[tuple[str, str], Obj]] = {}
        self.types: dict[Key, ResourceType] = {}
        self.by_uid: dict[str, tuple[ResourceType, str, str]] = {}
        self.dependents: dict[str, set[str]] = {}
        self.hub = WatchHub(lock, current_rv=self._current_rv, history_limit=history_limit)

    def _current_rv(self) -> int:
        return self.rv

    def bucket(self, rt: ResourceType) -> dict[tuple[str, str], Obj]:
        """The objects of one type (created empty on first use), keyed by (namespace, name)."""
        self.types[rt.key] = rt
        return self.objects.setdefault(rt.key, {})

    def find(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return self.objects.get(rt.key, {}).get((namespace, name))

    def must(self, rt: ResourceType, name: str, namespace: str | None) -> Obj:
        """The stored object, the namespace defaulting to "default" (404 when absent)."""
        ns = (namespace or "default") if rt.namespaced else ""
        found = self.find(rt, ns, name)
        if found is None:
            raise not_found(rt, name)
        return found

    def by_uid_obj(self, uid: str) -> tuple[ResourceType, Obj] | None:
        where = self.by_uid.get(uid)
        if where is None:
            return None
        rt, ns, name = where
        obj = self.find(rt, ns, name)
        return None if obj is None else (rt, obj)

    def bump(self, meta: Obj) -> None:
        """Advance the global resourceVersion and stamp it on `meta`."""
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)

    def put(self, rt: ResourceType, new: Obj, *, old: Obj | None) -> None:
        """Store `new` (in place of `old`, if any) and re-index it."""
        meta = new["metadata"]
        self.bucket(rt)[(meta.get("namespace", ""), meta["name"])] = new
        if old is not None:
            self.unindex(old)
        self.index(rt, new)

    def modify(self, rt: ResourceType, old: Obj, new: Obj) -> Obj:
        """The common write: bump, store `new` in place of `old`, emit MODIFIED; returns `new`."""
        self.bump(new["metadata"])
        self.put(rt, new, old=old)
        self.hub.emit(EventType.MODIFIED, rt, new, old=old)
        return new

    def drop(self, rt: ResourceType, obj: Obj) -> None:
        """Forget `obj`: out of its bucket and the uid index (its own dependents stay indexed)."""
        meta = obj["metadata"]
        self.objects.get(rt.key, {}).pop((meta.get("namespace", ""), meta["name"]), None)
        self.unindex(obj)
        self.by_uid.pop(meta["uid"], None)

    def index(self, rt: ResourceType, obj: Obj) -> None:
        meta = obj["metadata"]
        uid = meta["uid"]
        self.by_uid[uid] = (rt, meta.get("namespace", ""), meta["name"])
        for ref in meta.get("ownerReferences") or ():
            owner = ref.get("uid") if isinstance(ref, dict) else None
            if owner:
                self.dependents.setdefault(owner, set()).add(uid)

    def unindex(self, obj: Obj) -> None:
        meta = obj["metadata"]
        uid = meta["uid"]
        for ref in meta.get("ownerReferences") or ():
            owner = ref.get("uid") if isinstance(ref, dict) else None
            if not owner:
                continue
            deps = self.dependents.get(owner)
            if deps is not None:
                deps.discard(uid)
                if not deps:
                    del self.dependents[owner]

    def counts(self) -> dict[str, int]:
        return {
            f"{k[2]}.{k[0]}" if k[0] else k[2]: len(v) for k, v in self.objects.items() if v
        }
