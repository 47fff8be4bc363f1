"""The core's view of the watch cache, kept up to date incrementally: parse only what changed.

Called by `agent.runtime.pipeline` before each diagnosis. The cache replaces an object's dict when
the object changes (slim dicts are never mutated), so an identity check tells which objects are new
or changed: only those go through the core's manifest parsers (`agent.snapshot.manifests`,
`agent.policy.parse_policy`); everything else reuses its parsed form. The `PolicySet` is rebuilt
only when a policy changed. At 150,000 pods this turns a full re-parse (seconds) into an identity
scan (tens of milliseconds). An object the core cannot parse is skipped with one warning (a bad
object must not stop detection for everyone else). Not thread-safe: the pipeline's lock guards it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from agent.errors import PolicyError
from agent.model.cluster import ClusterState, ContainerPort, JobKind
from agent.policy import Policy, PolicySet, parse_policy
from agent.snapshot.manifests import (
    ManifestError,
    parse_namespace,
    parse_node,
    parse_owned_object,
    parse_pod,
    parse_training_job,
)
from agent.sources.cache import ClusterCache
from agent.sources.resources import Resource, Role

log = logging.getLogger(__name__)

_JOB_KINDS = {k.value: k for k in JobKind if k is not JobKind.GROUP}


class ModelMirror:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self._parsed: dict[str, dict[tuple[str, str], tuple[Any, Any]]] = {}
        self._ports: dict[tuple[ContainerPort, ...], tuple[ContainerPort, ...]] = {}
        self._policy_set: PolicySet | None = None
        self._warned: set[tuple[str, str, str]] = set()
        self.parsed_last = 0

    def _parser(self, resource: Resource) -> Callable[[dict[str, Any]], Any]:
        role = resource.role
        if role is Role.POD:
            return lambda item: parse_pod(item, shared=self._ports)
        if role is Role.NODE:
            return parse_node
        if role is Role.NAMESPACE:
            return parse_namespace
        if role is Role.POLICY:
            return parse_policy
        if role is Role.JOB:
            kind = _JOB_KINDS[resource.kind]
            return lambda item: parse_training_job(item, kind)
        return lambda item: parse_owned_object(item, resource.kind)

    def _sync(self, resource: Resource) -> tuple[dict[tuple[str, str], Any], bool]:
        """Parsed objects of one resource, re-parsing only the changed ones; and whether
        anything changed. The previous slim object is held (not its id), so `is` is safe."""
        previous = self._parsed.get(resource.name, {})
        current: dict[tuple[str, str], tuple[Any, Any]] = {}
        parse = self._parser(resource)
        changed = False
        for key, obj in self.cache.items_by_key(resource.name):
            seen = previous.get(key)
            if seen is not None and seen[0] is obj:
                current[key] = seen
                continue
            changed = True
            try:
                parsed = parse(obj)
            except (ManifestError, PolicyError) as exc:
                warn_key = (resource.name, *key)
                if warn_key not in self._warned:
                    self._warned.add(warn_key)
                    log.warning(
                        "object skipped: the core cannot parse it",
                        extra={"resource": resource.name, "object": "/".join(key), "error": str(exc)},
                    )
                continue
            self.parsed_last += 1
            current[key] = (obj, parsed)
        changed = changed or len(current) != len(previous) or not current.keys() <= previous.keys()
        self._parsed[resource.name] = current
        return {k: v[1] for k, v in current.items()}, changed

    def state(self) -> tuple[ClusterState, PolicySet]:
        """The cluster as the core sees it, and the policy set, from the cache's current objects."""
        self.parsed_last = 0
        nodes: dict[str, Any] = {}
        namespaces: dict[str, Any] = {}
        pods: list[Any] = []
        jobs: dict[tuple[JobKind, str, str], Any] = {}
        owned: dict[tuple[str, str, str], Any] = {}
        policies: list[Policy] = []
        policies_changed = False
        for resource in self.cache.resources():
            parsed, changed = self._sync(resource)
            role = resource.role
            if role is Role.POD:
                pods.extend(parsed.values())
            elif role is Role.NODE:
                nodes.update((n.name, n) for n in parsed.values())
            elif role is Role.NAMESPACE:
                namespaces.update((n.name, n) for n in parsed.values())
            elif role is Role.POLICY:
                policies.extend(parsed.values())
                policies_changed = policies_changed or changed
            elif role is Role.JOB:
                jobs.update(((j.kind, j.namespace, j.name), j) for j in parsed.values())
            else:
                owned.update(((o.kind, o.namespace, o.name), o) for o in parsed.values())
        if self._policy_set is None or policies_changed:
            self._policy_set = PolicySet(sorted(policies, key=lambda p: p.id))
        state = ClusterState(
            nodes=nodes,
            namespaces=namespaces,
            pods=tuple(pods),
            job_objects=jobs,
            owned_objects=owned,
        )
        return state, self._policy_set
