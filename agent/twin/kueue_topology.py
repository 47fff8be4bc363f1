"""Kueue's Topology Aware Scheduling placement: which topology domains a pod set's pods go to.

Called by the twin's Kueue admission for the pod sets admitted on a flavor with a `topologyName`.
It follows Kueue v0.14's BestFit profile (the default; pod set slices are not modelled):
1. every leaf domain (the lowest level of the Topology: a node when that level is
   `kubernetes.io/hostname`) counts how many pods of the pod set fit in its free capacity (taints
   not tolerated by the pod set and the flavor exclude it; so does a nodeSelector that does not
   match, when the lowest level is the hostname); with a leader (the smaller pod set of a
   `podset-group-name` pair, count 1) it also counts whether the leader fits and how many workers
   fit beside it; parents add up their children;
2. at the requested level it takes the fitting domain with the least room (the first such in
   order: most room first, then by name); a `required` level that no domain fits fails with
   Kueue's message (`topology "t" allows to fit only 3 out of 4 pod(s)`); a `preferred` level
   goes up one level at a time and, at the top, spreads over several domains; an unconstrained
   request (or an implied one, in a ClusterQueue whose flavors are all TAS flavors) is placed at
   the lowest level and spreads when no single domain fits;
3. it walks down level by level, filling the children with the most room first and the best fit
   for the last; the assignment names the lowest-level domains (only the hostname when the
   lowest level is the hostname) with a pod count each.
Both pod sets of a group are placed together in one domain; the leader is checked against the
workers' tolerations, as Kueue does. Pure. It does not bind pods (the ungater injects the
domains' node selectors; kube-scheduler binds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.twin.kueue_labels import HOSTNAME_LABEL
from agent.twin.scheduler_terms import untolerated_taint

Units = Mapping[str, int]


@dataclass(frozen=True)
class Leaf:
    """A lowest-level domain: its value per level, room left, and (for a node) taints and labels."""

    values: tuple[str, ...]
    free: Units
    taints: tuple[Mapping[str, Any], ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    """One pod set to place: count, one pod's requests (units), and what it asks of the topology."""

    name: str
    count: int
    per_pod: Units
    level: str | None = None  # the required/preferred level; None: the lowest level
    required: bool = False
    unconstrained: bool = False
    tolerations: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    group: str | None = None


@dataclass
class _Domain:
    values: tuple[str, ...]
    children: list[_Domain] = field(default_factory=list)
    leaf: Leaf | None = None
    state: int = 0
    with_leader: int = 0
    leader: int = 0


@dataclass(frozen=True)
class Placement:
    """The assignment per pod set name, or the reason nothing was placed."""

    assignments: dict[str, dict[str, Any]]
    failure: str = ""
    failed: tuple[str, ...] = ()  # the pod sets the failure is about


def count_in(free: Units, per_pod: Units) -> int:
    fits: int | None = None
    for resource, amount in per_pod.items():
        if amount <= 0:
            continue
        n = max(0, free.get(resource, 0)) // amount
        fits = n if fits is None else min(fits, n)
    return fits if fits is not None else 0


def _minus(free: Units, used: Units, times: int = 1) -> dict[str, int]:
    out = dict(free)
    for resource, amount in used.items():
        out[resource] = out.get(resource, 0) - amount * times
    return out


class Topology:
    """One flavor's topology tree over its leaves, with usage assumed while placing a workload."""

    def __init__(self, name: str, levels: Sequence[str], leaves: Sequence[Leaf]) -> None:
        self.name = name
        self.levels = list(levels)
        self._leaves = {leaf.values: leaf for leaf in leaves}
        self._assumed: dict[tuple[str, ...], dict[str, int]] = {}
        self._per_level: list[dict[tuple[str, ...], _Domain]] = [{} for _ in self.levels]
        for leaf in leaves:
            parent: _Domain | None = None
            for depth in range(len(self.levels)):
                key = leaf.values[: depth + 1]
                domain = self._per_level[depth].get(key)
                if domain is None:
                    domain = _Domain(values=key)
                    self._per_level[depth][key] = domain
                    if parent is not None:
                        parent.children.append(domain)
                parent = domain
            assert parent is not None
            parent.leaf = leaf

    @property
    def _hostname_lowest(self) -> bool:
        return bool(self.levels) and self.levels[-1] == HOSTNAME_LABEL

    def has_level(self, level: str) -> bool:
        return level in self.levels

    def checkpoint(self) -> dict[tuple[str, ...], dict[str, int]]:
        """The usage assumed so far (to restore when a workload's placement fails halfway)."""
        return {k: dict(v) for k, v in self._assumed.items()}

    def restore(self, mark: Mapping[tuple[str, ...], Mapping[str, int]]) -> None:
        self._assumed = {k: dict(v) for k, v in mark.items()}

    # --- phase 1: how many pods fit where ------------------------------------------------------

    def _fill(self, workers: Request, leader: Request | None) -> None:
        for domains in self._per_level:
            for domain in domains.values():
                domain.state = domain.with_leader = domain.leader = 0
        for domain in self._per_level[-1].values():
            leaf = domain.leaf
            if leaf is None:
                continue
            pod, node = {"spec": {"tolerations": list(workers.tolerations)}}, {"spec": {"taints": leaf.taints}}
            if untolerated_taint(pod, node) is not None:
                continue
            if self._hostname_lowest and any(
                leaf.labels.get(k) != v for k, v in workers.node_selector.items()
            ):
                continue
            free = _minus(leaf.free, self._assumed.get(leaf.values, {}))
            domain.state = count_in(free, workers.per_pod)
            if leader is not None and count_in(free, leader.per_pod) > 0:
                domain.leader = 1
                free = _minus(free, leader.per_pod)
            domain.with_leader = count_in(free, workers.per_pod)
        for depth in range(len(self.levels) - 2, -1, -1):
            for domain in self._per_level[depth].values():
                domain.state = sum(c.state for c in domain.children)
                difference = min((c.state - c.with_leader for c in domain.children), default=0)
                domain.with_leader = domain.state - difference
                domain.leader = max((c.leader for c in domain.children), default=0)

    # --- phase 2: choose the domains -----------------------------------------------------------

    @staticmethod
    def _sorted_with_leader(domains: Sequence[_Domain]) -> list[_Domain]:
        return sorted(domains, key=lambda d: (-d.leader, -d.with_leader, d.values))

    @staticmethod
    def _sorted(domains: Sequence[_Domain]) -> list[_Domain]:
        return sorted(domains, key=lambda d: (-d.state, d.values))

    @staticmethod
    def _best_fit(domains: Sequence[_Domain], needed: int, with_leader: bool) -> _Domain:
        """The first domain with the least room that still fits `needed`."""
        def room(d: _Domain) -> int:
            return d.with_leader if with_leader else d.state

        best = domains[0]
        for domain in domains:
            if needed <= room(domain) < room(best):
                best = domain
        return best

    def _not_fit(self, fitting: int, total: int) -> str:
        if fitting <= 0:
            return f'topology "{self.name}" doesn\'t allow to fit any of {total} pod(s)'
        return f'topology "{self.name}" allows to fit only {fitting} out of {total} pod(s)'

    def _fit_level(
        self, depth: int, count: int, leaders: int, *, required: bool, unconstrained: bool
    ) -> tuple[int, list[_Domain], str]:
        domains = list(self._per_level[depth].values())
        if not domains:
            return 0, [], f"no topology domains at level: {self.levels[depth]}"
        ordered = self._sorted_with_leader(domains)
        top = ordered[0]
        if top.with_leader >= count and top.leader >= leaders:
            top = self._best_fit(ordered, count, leaders > 0)
        if top.with_leader >= count and top.leader >= leaders:
            return depth, [top], ""
        if required:
            return 0, [], self._not_fit(top.state, count)
        if depth > 0 and not unconstrained:
            return self._fit_level(depth - 1, count, leaders, required=required,
                                   unconstrained=unconstrained)  # fmt: skip
        chosen: list[_Domain] = []
        remaining, remaining_leaders, index = count, leaders, 0
        while remaining_leaders > 0 and index < len(ordered) and ordered[index].leader > 0:
            domain = ordered[index]
            if domain.with_leader >= remaining:
                domain = self._best_fit(ordered[index:], remaining, True)
            chosen.append(domain)
            remaining_leaders -= domain.leader
            remaining -= domain.with_leader
            index += 1
        if remaining_leaders > 0:
            return 0, [], self._not_fit(leaders - remaining_leaders, count)
        rest = self._sorted(ordered[index:])
        index = 0
        while remaining > 0 and index < len(rest) and rest[index].state > 0:
            domain = rest[index]
            if domain.state >= remaining:
                domain = self._best_fit(rest[index:], remaining, False)
            chosen.append(domain)
            remaining -= domain.state
            index += 1
        if remaining > 0:
            return 0, [], self._not_fit(count - remaining, count)
        return depth, chosen, ""

    def _take(self, domains: Sequence[_Domain], count: int, leaders: int) -> list[_Domain]:
        """Give `count` workers (and `leaders` leaders) to `domains` in order, the best fit last;
        each chosen domain's state/leader become what it was given."""
        out: list[_Domain] = []
        remaining, remaining_leaders = count, leaders
        for index, candidate in enumerate(domains):
            domain = candidate
            if remaining_leaders > 0:
                if domain.with_leader >= remaining and domain.leader >= remaining_leaders:
                    domain = self._best_fit(domains[index:], remaining, True)
                if domain.with_leader >= remaining and domain.leader >= remaining_leaders:
                    domain.state, domain.leader = remaining, remaining_leaders
                    out.append(domain)
                    return out
                given = min(domain.with_leader, remaining)
                domain.leader = min(domain.leader, remaining_leaders)
                domain.state = given
                remaining_leaders -= domain.leader
                remaining -= given
                out.append(domain)
                continue
            if domain.state >= remaining:
                domain = self._best_fit(domains[index:], remaining, False)
            domain.leader = 0
            if domain.state >= remaining:
                domain.state = remaining
                out.append(domain)
                return out
            remaining -= domain.state
            out.append(domain)
        return out

    def _assignment(self, domains: Sequence[_Domain], counts: Sequence[int]) -> dict[str, Any]:
        start = len(self.levels) - 1 if self._hostname_lowest else 0
        pairs = sorted(zip((d.values for d in domains), counts, strict=True))
        return {"levels": self.levels[start:],
                "domains": [{"values": list(v[start:]), "count": c} for v, c in pairs if c > 0]}

    def _assume(self, domains: Sequence[_Domain], counts: Sequence[int], per_pod: Units) -> None:
        for domain, count in zip(domains, counts, strict=True):
            used = self._assumed.setdefault(domain.values, {})
            for resource, amount in per_pod.items():
                used[resource] = used.get(resource, 0) + amount * count

    def place(self, workers: Request, leader: Request | None = None) -> Placement:
        """Place one pod set, or a group's workers with its leader, in this topology."""
        level = workers.level or self.levels[-1]
        if level not in self.levels:
            return Placement({}, f"no requested topology level: {level}")
        leaders = 1 if leader is not None else 0
        self._fill(workers, leader)
        depth, chosen, failure = self._fit_level(
            self.levels.index(level), workers.count, leaders,
            required=workers.required, unconstrained=workers.unconstrained,
        )
        if failure:
            return Placement({}, failure)
        chosen = self._take(chosen, workers.count, leaders)
        while depth + 1 < len(self.levels):
            lower = self._sorted([c for d in chosen for c in d.children])
            chosen = self._take(lower, workers.count, leaders)
            depth += 1
        result: dict[str, dict[str, Any]] = {}
        worker_domains = [d for d in chosen if d.state > 0]
        worker_counts = [d.state for d in worker_domains]
        if leader is not None:
            leader_domains = [d for d in chosen if d.leader > 0]
            leader_counts = [d.leader for d in leader_domains]
            result[leader.name] = self._assignment(leader_domains, leader_counts)
            self._assume(leader_domains, leader_counts, leader.per_pod)
        result[workers.name] = self._assignment(worker_domains, worker_counts)
        self._assume(worker_domains, worker_counts, workers.per_pod)
        return Placement(result)


def leader_and_workers(requests: Sequence[Request]) -> tuple[Request | None, Request]:
    """Kueue's rule for a group of two pod sets: the one with fewer pods is the leader."""
    workers = requests[0]
    if len(requests) < 2:
        return None, workers
    leader = requests[1]
    if leader.count > workers.count:
        leader, workers = workers, leader
    return leader, workers


def place_all(topology: Topology, requests: Sequence[Request]) -> Placement:
    """Place every pod set of one workload on one flavor: pod sets of one group together, the
    others one by one, in order; the first failure ends it."""
    order: list[str] = []
    groups: dict[str, list[Request]] = {}
    for index, request in enumerate(requests):
        key = request.group if request.group is not None else f"#{index}"
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append(request)
    out: dict[str, dict[str, Any]] = {}
    for key in order:
        leader, workers = leader_and_workers(groups[key])
        placed = topology.place(workers, leader)
        if placed.failure:
            return Placement(out, placed.failure, tuple(r.name for r in groups[key]))
        out.update(placed.assignments)
    return Placement(out)
