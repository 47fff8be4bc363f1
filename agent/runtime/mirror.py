"""The core's view of the watch cache, kept up to date incrementally: parse only what changed.

Called by `agent.runtime.diagnoser` before each diagnosis (a follower's pipeline calls `state()`).
The mirror `track()`s the cache, so each `state()` visits only the objects stored, replaced or
deleted since the previous one (the first call reads everything): those go through the core's manifest parsers (`agent.snapshot.manifests`,
`agent.policy.parse_policy`); everything else keeps its parsed form, in persistent maps. The
`PolicySet` is rebuilt only when a policy or the dataplane's configuration changed: policies are
read by `agent.policy.reading` (the snapshot loader's own reader: a policy that cannot be read is
kept as an `UnreadablePolicy`, warned about once, and the jobs it may select are diagnosed as
uncertain), and the dataplane is resolved by `agent.policy.dataplane` from what the cache holds
(Cilium policy kinds being served, the `cilium-config` ConfigMap) and the diagnosis settings. Pods
also feed a `FactsIndex` (zone-mirroring
label keys, GPUs used per node, pods by namespace: `agent.topology.facts`), handed to the
diagnosis with the state so a scoped diagnosis costs its scope, not the cluster; a node change
(rare: its zone may have changed) rebuilds that index. At 150,000 pods a batch of a few pod
events costs their parse and a few dictionary updates instead of a rescan of every object. An
object the core cannot parse is skipped with one warning (a bad object must not stop detection
for everyone else). Not thread-safe: the pipeline's lock guards it.

The first `state()` is a bulk load (150,000 pods at start-up): every cached object is parsed in
one pass, nodes first, the facts index built once at the end; the containers and owner
references the cache shares between a job's pods are parsed once each (`PodParts`); the cyclic
garbage collector is paused meanwhile (the process's one shared pause, `agent.sources.gcpause`:
the informers' lists pause it too), and a load of at least `FREEZE_AT` objects freezes what
the process holds (the cache and the mirror, long-lived by construction) out of its reach at once
(`frozen_loads` counts it: the pipeline's post-batch full collection, a second pass over the same
millions of objects, then waits for the next cluster-wide batch).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from typing import Any

from agent.model.cluster import ClusterState, Node, Pod
from agent.policy import Policy, PolicySet
from agent.policy.dataplane import DataplaneEvidence, dataplane_for
from agent.policy.reading import read_policy, unreadable_warning
from agent.policy.rule import UnreadablePolicy
from agent.settings import DiagnosisSettings
from agent.snapshot.kueue import kueue_objects, parse_kueue_object
from agent.snapshot.manifests import (
    ManifestError,
    PodParts,
    parse_namespace,
    parse_node,
    parse_owned_object,
    parse_pod,
    parse_training_job,
)
from agent.sources.cache import ClusterCache
from agent.sources.gcpause import gc_paused
from agent.sources.podfacts import ObjKey
from agent.sources.resources import Resource, Role
from agent.topology.facts import ClusterFacts, FactsIndex

log = logging.getLogger(__name__)

FREEZE_AT = 20_000  # objects: a bulk load this large freezes what it built (see above)
Slot = tuple[str, ObjKey]  # (resource name, object key)


def _identity(role: Role, parsed: Any) -> Any:
    """Where a parsed object sits in the state's maps."""
    if role in (Role.NODE, Role.NAMESPACE):
        return parsed.name
    if role is Role.POLICY:
        return parsed.id
    if role is Role.DATAPLANE:
        return "cilium-config"
    if role is Role.KUEUE:
        return (type(parsed).__name__, getattr(parsed, "namespace", ""), parsed.name)
    return (parsed.kind, parsed.namespace, parsed.name)


def _config_data(item: dict[str, Any]) -> dict[str, str]:
    data = item.get("data")
    return dict(data) if isinstance(data, dict) else {}


class ModelMirror:
    def __init__(self, cache: ClusterCache, *, settings: DiagnosisSettings | None = None) -> None:
        self.cache = cache
        self.settings = settings or DiagnosisSettings()
        self._tracker = cache.track()
        self._parsed: dict[Slot, tuple[Any, Any]] = {}  # slot -> (slim object, parsed)
        self._parts = PodParts()
        self._pods: dict[Slot, Pod] = {}
        self._pods_tuple: tuple[Pod, ...] | None = None
        self._maps: dict[Role, dict[Any, Any]] = {
            Role.NODE: {}, Role.NAMESPACE: {}, Role.POLICY: {}, Role.JOB: {}, Role.OWNER: {},
            Role.DATAPLANE: {}, Role.KUEUE: {},
        }
        self._facts = FactsIndex({})
        self._policy_set: PolicySet | None = None
        self._warned: set[tuple[str, str, str]] = set()
        self.parsed_last = 0
        self.visited_last = 0  # objects looked at by the last `state()`
        self.frozen_loads = 0  # bulk loads that froze the heap (see the module docstring)
        self.generation = 0  # counts the `snapshot()`s that found something changed

    def _parser(self, resource: Resource) -> Callable[[dict[str, Any]], Any]:
        role = resource.role
        if role is Role.POD:
            return lambda item: parse_pod(item, parts=self._parts)
        if role is Role.NODE:
            return parse_node
        if role is Role.NAMESPACE:
            return parse_namespace
        if role is Role.POLICY:
            return read_policy
        if role is Role.DATAPLANE:
            return _config_data
        if role is Role.JOB and resource.job_kind is not None:
            kind = resource.job_kind
            return lambda item: parse_training_job(item, kind)
        if role is Role.KUEUE and resource.kueue is not None:
            queued = resource.kueue.kind
            return lambda item: parse_kueue_object(item, queued)
        return lambda item: parse_owned_object(item, resource.kind)

    def _parse(
        self,
        resource: Resource,
        key: ObjKey,
        obj: dict[str, Any],
        parse: Callable[[dict[str, Any]], Any] | None = None,
    ) -> Any:
        try:
            parsed = (parse or self._parser(resource))(obj)
        except ManifestError as exc:
            self._warn(resource, key, str(exc))
            return None
        if isinstance(parsed, UnreadablePolicy):
            self._warn(resource, key, unreadable_warning(parsed))
        self.parsed_last += 1
        return parsed

    def _warn(self, resource: Resource, key: ObjKey, error: str) -> None:
        warn_key = (resource.name, *key)
        if warn_key not in self._warned:
            self._warned.add(warn_key)
            log.warning(
                "object skipped: the core cannot parse it",
                extra={"resource": resource.name, "object": "/".join(key), "error": error},
            )

    def _forget(self, slot: Slot, role: Role) -> None:
        seen = self._parsed.pop(slot, None)
        if seen is None:
            return
        if role is Role.POD:
            del self._pods[slot]
            self._facts.remove(slot)
            self._pods_tuple = None
        else:
            identity = _identity(role, seen[1])
            if self._maps[role].get(identity) is seen[1]:
                del self._maps[role][identity]

    def _update(self, resource: Resource, key: ObjKey) -> Role | None:
        """Bring one object up to date; the role that changed, or None (nothing did)."""
        slot = (resource.name, key)
        obj = self.cache.get(resource.name, *key)
        seen = self._parsed.get(slot)
        if obj is not None and seen is not None and seen[0] is obj:
            return None
        role = resource.role
        self._forget(slot, role)
        if obj is None:
            return role
        parsed = self._parse(resource, key, obj)
        if parsed is None:
            return role
        self._parsed[slot] = (obj, parsed)
        if role is Role.POD:
            self._pods[slot] = parsed
            self._facts.add(slot, parsed)
            self._pods_tuple = None
        else:
            self._maps[role][_identity(role, parsed)] = parsed
        return role

    def _rebuild_facts(self) -> None:
        self._facts = FactsIndex(self._maps[Role.NODE])
        self._facts.add_many(self._pods)

    def _load_all(self) -> None:
        """Parse every cached object afresh (an object unchanged since it was parsed keeps its
        parsed form), nodes first, then build the facts index once (see the module docstring)."""
        previous = self._parsed
        self._parsed = {}
        self._pods = {}
        self._pods_tuple = None
        self._maps = {role: {} for role in self._maps}
        with gc_paused():
            visited = 0
            resources = sorted(self.cache.resources(), key=lambda r: r.role is not Role.NODE)
            for resource in resources:
                role = resource.role
                parse = self._parser(resource)
                pods = role is Role.POD
                target = self._pods if pods else self._maps[role]
                for key, obj in self.cache.items_by_key(resource.name):
                    visited += 1
                    slot = (resource.name, key)
                    seen = previous.get(slot)
                    if seen is not None and seen[0] is obj:
                        parsed = seen[1]
                    else:
                        parsed = self._parse(resource, key, obj, parse)
                        if parsed is None:
                            continue
                    self._parsed[slot] = (obj, parsed)
                    target[slot if pods else _identity(role, parsed)] = parsed
            self.visited_last = visited
            self._rebuild_facts()
        if visited >= FREEZE_AT:
            gc.freeze()
            self.frozen_loads += 1

    def evidence(self) -> DataplaneEvidence:
        """What the cache shows about the dataplane: Cilium policy kinds served, cilium-config."""
        served = sorted(
            {f"API group {r.api_version}" for r in self.cache.resources() if r.group == "cilium.io"}
        )
        config = self._maps[Role.DATAPLANE].get("cilium-config")
        return DataplaneEvidence(cilium=tuple(served), cilium_config=config)

    def _policies(self) -> PolicySet:
        records = sorted(self._maps[Role.POLICY].values(), key=lambda p: p.id)
        dataplane = dataplane_for(self.evidence(), self.settings)
        policy_set = PolicySet(
            [p for p in records if isinstance(p, Policy)],
            dataplane=dataplane,
            unreadable=[p for p in records if isinstance(p, UnreadablePolicy)],
        )
        for warning in policy_set.warnings():
            if ("dataplane", warning, "") not in self._warned:
                self._warned.add(("dataplane", warning, ""))
                log.warning("dataplane", extra={"warning": warning})
        log.info("policies", extra={"dataplane": dataplane.describe(),
                                    "policies": len(policy_set.policies),
                                    "unreadable": len(policy_set.unreadable)})  # fmt: skip
        return policy_set

    def state(self) -> tuple[ClusterState, PolicySet]:
        """The cluster as the core sees it, and the policy set, from the cache's current objects."""
        state, policies, _ = self.snapshot()
        return state, policies

    def snapshot(self) -> tuple[ClusterState, PolicySet, ClusterFacts]:
        """`state()` plus the cluster-wide facts of that same state. `generation` afterwards
        names that state: it grows whenever an object was stored, replaced or deleted since the
        previous call, so what is computed from one state may be kept while it stays the same."""
        self.parsed_last = 0
        everything, touched = self.cache.drain(self._tracker)
        changed: set[Role] = set()
        if everything:
            self._load_all()
        else:
            slots = []
            for name, key in touched:
                resource = self.cache.resource(name)
                if resource is not None:
                    slots.append((resource, key))
            self.visited_last = len(slots)
            # nodes first: the facts index needs their zones before pods are counted
            slots.sort(key=lambda s: s[0].role is not Role.NODE)
            for resource, key in slots:
                role = self._update(resource, key)
                if role is not None:
                    changed.add(role)
            if Role.NODE in changed:
                self._rebuild_facts()
        if everything or changed:
            self.generation += 1
        if everything or self._policy_set is None or changed & {Role.POLICY, Role.DATAPLANE}:
            self._policy_set = self._policies()
        if self._pods_tuple is None:
            self._pods_tuple = tuple(self._pods.values())
        nodes: dict[str, Node] = dict(self._maps[Role.NODE])  # copies: the maps change later
        state = ClusterState(
            nodes=nodes,
            namespaces=dict(self._maps[Role.NAMESPACE]),
            pods=self._pods_tuple,
            job_objects=dict(self._maps[Role.JOB]),
            owned_objects=dict(self._maps[Role.OWNER]),
            kueue=kueue_objects(self._maps[Role.KUEUE].values()),
        )
        return state, self._policy_set, self._facts.facts()
