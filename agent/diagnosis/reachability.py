"""Check a job's flow rules against the policies, grouping pods no policy can tell apart.

Two pods are in the same identity class when they share namespace, service account, named ports
and the values of every label key some policy selector reads (`PolicySet.pod_label_keys()`).
The evaluator's answer depends on nothing else, so one `PolicySet.check` per class pair
stands for all its pod pairs. Zone-mirroring labels (`mirror_keys`) are kept apart so a class can
be moved to another zone (counterfactual co-location) without re-reading its pods. Classes are
interned to small ints and verdicts cached across jobs. Called by `agent.diagnosis.diagnose`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent.model.cluster import Namespace, Pod
from agent.model.flow import FlowRule
from agent.model.network import Caveat, Endpoint, FlowVerdict, PortRange, Protocol
from agent.policy import PolicySet
from agent.policy.rule import UnreadablePolicy

# (namespace, service account, values of the relevant label keys, mirror-label values, named ports)
NamedPorts = tuple[tuple[tuple[str, Protocol], int], ...]
RawClass = tuple[str, str, tuple[str | None, ...], tuple[str | None, ...], NamedPorts]


@dataclass(frozen=True, slots=True)
class DeniedPairs:
    """All pod pairs between one source class and one destination class that are denied."""

    sources: tuple[Pod, ...]
    destinations: tuple[Pod, ...]
    ports: PortRange
    verdict: FlowVerdict
    count: int


@dataclass(frozen=True, slots=True)
class ClassPairs:
    """The `count` pod pairs from class `src` (pods `sources`) to class `dst` on `ports`."""

    src: int
    dst: int
    sources: list[Pod]
    destinations: list[Pod]
    ports: PortRange
    count: int


class Reachability:
    """Flow checks for many jobs over one policy set (one instance per snapshot)."""

    def __init__(
        self,
        policies: PolicySet,
        namespaces: Mapping[str, Namespace],
        *,
        label_keys: frozenset[str],
        mirror_keys: Sequence[str] = (),
    ) -> None:
        self._policies = policies
        self._namespaces = namespaces
        self._mirror = tuple(mirror_keys)
        # the relevant label keys in a fixed order, mirror keys apart
        self._selected = tuple(sorted(k for k in label_keys if k not in set(mirror_keys)))
        self._class_ids: dict[RawClass, int] = {}
        self._classes: list[RawClass] = []
        self._moved_ids: dict[tuple[int, str], int] = {}
        self._named: dict[int, NamedPorts] = {}
        self._endpoints: dict[int, Endpoint] = {}
        self._verdicts: dict[tuple[int, int, PortRange], FlowVerdict] = {}

    def _intern(self, raw: RawClass) -> int:
        cid = self._class_ids.get(raw)
        if cid is None:
            cid = self._class_ids[raw] = len(self._classes)
            self._classes.append(raw)
        return cid

    def class_of(self, pod: Pod) -> int:
        """The pod's identity class (a small int), as placed now."""
        get = pod.labels.get
        ports = pod.ports
        named = self._named.get(id(ports))
        if named is None:
            named = self._named[id(ports)] = tuple(
                ((p.name, p.protocol), p.port) for p in ports if p.name
            )
        raw = (
            pod.namespace,
            pod.service_account,
            tuple(map(get, self._selected)),
            tuple(map(get, self._mirror)),
            named,
        )
        cid = self._class_ids.get(raw)
        if cid is None:
            cid = self._intern(raw)
        return cid

    def moved(self, cid: int, zone: str) -> int:
        """The class `cid` would have in `zone` (mirroring labels set to `zone`)."""
        key = (cid, zone)
        moved = self._moved_ids.get(key)
        if moved is None:
            raw = self._classes[cid]
            mirror = tuple(None if v is None else zone for v in raw[3])
            moved = self._moved_ids[key] = self._intern((raw[0], raw[1], raw[2], mirror, raw[4]))
        return moved

    def endpoint(self, cid: int) -> Endpoint:
        """The endpoint standing for class `cid` (its projected labels, namespace, account)."""
        ep = self._endpoints.get(cid)
        if ep is None:
            ns, account, values, mirror, named = self._classes[cid]
            labels = {k: v for k, v in zip(self._selected, values, strict=True) if v is not None}
            labels.update(
                (k, v) for k, v in zip(self._mirror, mirror, strict=True) if v is not None
            )
            namespace = self._namespaces.get(ns)
            ep = self._endpoints[cid] = Endpoint(
                namespace=ns,
                labels=labels,
                namespace_labels=namespace.labels if namespace is not None else {},
                service_account=account,
                named_ports=dict(named),
            )
        return ep

    def verdict(self, src: int, dst: int, ports: PortRange) -> FlowVerdict:
        cache_key = (src, dst, ports)
        result = self._verdicts.get(cache_key)
        if result is None:
            result = self._policies.check(self.endpoint(src), self.endpoint(dst), ports)
            self._verdicts[cache_key] = result
        return result

    def _group(self, pods: tuple[Pod, ...], known: dict[int, int]) -> dict[int, list[Pod]]:
        out: dict[int, list[Pod]] = {}
        class_of = self.class_of
        for pod in pods:
            cid = known.get(id(pod))
            if cid is None:
                cid = known[id(pod)] = class_of(pod)
            members = out.get(cid)
            if members is None:
                out[cid] = [pod]
            else:
                members.append(pod)
        return out

    def prepare(self, rules: Sequence[FlowRule]) -> list[ClassPairs]:
        """The class pairs of `rules` that stand for at least one pod pair (as placed now)."""
        grouped: dict[int, dict[int, list[Pod]]] = {}
        known: dict[int, int] = {}  # id(pod) -> class, for this call only (pods recur in rules)
        out: list[ClassPairs] = []
        for rule in rules:
            src_classes = grouped.get(id(rule.sources))
            if src_classes is None:
                src_classes = grouped[id(rule.sources)] = self._group(rule.sources, known)
            dst_classes = grouped.get(id(rule.destinations))
            if dst_classes is None:
                dst_classes = grouped[id(rule.destinations)] = self._group(rule.destinations, known)
            for skey, spods in src_classes.items():
                for dkey, dpods in dst_classes.items():
                    count = len(spods) * len(dpods)
                    if skey == dkey:
                        if spods is dpods:
                            count -= len(spods)
                        else:
                            ids = {id(p) for p in dpods}
                            count -= sum(1 for p in spods if id(p) in ids)
                    if count:
                        out.append(ClassPairs(skey, dkey, spods, dpods, rule.ports, count))
        return out

    def caveats(self, pairs: Sequence[ClassPairs]) -> tuple[Caveat, ...]:
        """The caveats of the verdicts of `pairs` (as placed now), each once."""
        out: dict[Caveat, None] = {}
        for pair in pairs:
            for caveat in self.verdict(pair.src, pair.dst, pair.ports).caveats:
                out[caveat] = None
        return tuple(out)

    def uncertain(self, pods: Sequence[Pod]) -> tuple[UnreadablePolicy, ...]:
        """The unreadable policies that may select one of `pods` (as placed now)."""
        if not self._policies.unreadable:
            return ()
        seen: set[int] = set()
        out: dict[str, UnreadablePolicy] = {}
        for pod in pods:
            cid = self.class_of(pod)
            if cid in seen:
                continue
            seen.add(cid)
            for record in self._policies.uncertain(self.endpoint(cid)):
                out[record.id] = record
        return tuple(out[k] for k in sorted(out))

    def denied(
        self, pairs: Sequence[ClassPairs], *, zone: str | None = None, first_only: bool = False
    ) -> list[DeniedPairs]:
        """Denied class pairs (as placed now, or with every pod moved to `zone`).

        With `first_only`, stop at the first denied pair (enough to know a placement fails).
        """
        out: list[DeniedPairs] = []
        move = zone is not None and bool(self._mirror)
        for pair in pairs:
            src, dst = pair.src, pair.dst
            if move:
                assert zone is not None
                src, dst = self.moved(src, zone), self.moved(dst, zone)
            result = self.verdict(src, dst, pair.ports)
            if result.allowed:
                continue
            out.append(
                DeniedPairs(
                    tuple(pair.sources), tuple(pair.destinations), pair.ports, result, pair.count
                )
            )
            if first_only:
                break
        return out
