"""The cluster cache's objects: slim objects by resource name and key, the resources they are of,
which resources are expected and which have been listed (synced), and the reads over them.

The base of `agent.sources.cache.ClusterCache`, which stores and deletes the objects (and keeps
their indexes); read by the detector and the runtime's mirror (`items`, `items_by_key`, `snapshot`),
the pipeline and the executor (`get`), the readiness check (`synced`) and the metrics (`count`).
One re-entrant lock, shared with the cache.

What it does not do: decide what an update affects, or index anything (see the cache).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable

from agent.sources.podfacts import Obj, ObjKey
from agent.sources.resources import Resource


class ObjectStore:
    """Slim objects by resource, behind one lock (the cache's)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._objects: dict[str, dict[ObjKey, Obj]] = defaultdict(dict)
        self._resources: dict[str, Resource] = {}
        self._synced: set[str] = set()
        self._expected: set[str] = set()

    # -- readiness ---------------------------------------------------------------------------

    def expect(self, resources: Iterable[Resource]) -> None:
        with self._lock:
            for r in resources:
                self._expected.add(r.name)
                self._resources[r.name] = r

    @property
    def synced(self) -> bool:
        with self._lock:
            return bool(self._expected) and self._expected <= self._synced

    def synced_resources(self) -> set[str]:
        with self._lock:
            return set(self._synced)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, resource_name: str, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._objects.get(resource_name, {}).get((namespace, name))

    def items(self, resource_name: str) -> list[Obj]:
        with self._lock:
            return list(self._objects.get(resource_name, {}).values())

    def items_by_key(self, resource_name: str) -> list[tuple[ObjKey, Obj]]:
        with self._lock:
            return list(self._objects.get(resource_name, {}).items())

    def resource(self, resource_name: str) -> Resource | None:
        with self._lock:
            return self._resources.get(resource_name)

    def resources(self) -> list[Resource]:
        """The resources the cache holds objects of (or expects), in a stable order."""
        with self._lock:
            names = sorted(set(self._objects) | self._expected)
            return [self._resources[n] for n in names if n in self._resources]

    def count(self, resource_name: str) -> int:
        with self._lock:
            return len(self._objects.get(resource_name, {}))

    def keys(self, resource_name: str) -> set[ObjKey]:
        with self._lock:
            return set(self._objects.get(resource_name, {}))

    def snapshot(self, namespaces: set[str] | None = None) -> list[Obj]:
        """Every cached object (namespaced ones limited to `namespaces` when given), for the core."""
        with self._lock:
            out: list[Obj] = []
            for r_name, store in self._objects.items():
                resource = self._resources.get(r_name)
                if resource is None:
                    continue
                if namespaces is None or not resource.namespaced:
                    out.extend(store.values())
                else:
                    out.extend(o for k, o in store.items() if k[0] in namespaces)
            return out
