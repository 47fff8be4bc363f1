"""The flows a change can change, beyond the jobs' required flows: those of the pods it touches.

Called by the what-if (`agent.diagnosis.whatif.blast_radius`) and by the policy-side fix's proof
(`agent.diagnosis.policy_fix`). A flow's verdict is egress at its source AND ingress at its
destination, and a policy decides only the hops of the endpoints it selects; so a change can
change a flow only when one of its ends is touched:
- selected, before or after the change, by a policy the change adds, removes or rewrites;
- a pod the change relabels, moves, re-accounts or adds;
- every pod, when the change alters what identities are made of (the dataplane, its label
  filter, a namespace's labels).
The flows considered for those pods: from each touched pod to every pod of the cluster, and from
every pod to each touched pod, on each port the destination declares (its containers' ports,
each with its protocol). Pods the policies cannot tell apart before and after alike (and that
declare the same ports) are checked once per group pair, as the diagnosis groups them
(`agent.diagnosis.reachability`); every pod pair whose verdict changes is counted, and the first
`FLOWS_LISTED` are listed. A group pair is evaluated only when the change reaches one of its hops
(`_reaches`: the source's egress or the destination's ingress decided by a changed policy
selecting it, per `Subject.decides`, or either end's class changing); one whose only reachable hop
is the destination's ingress compares the two ingress hops (`PolicySet.hop_allows`); full
verdicts are built only for the flows listed. Ports no pod declares are not considered here (the jobs' required
flows, ranges included, are checked by the what-if itself). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from agent.diagnosis.pod_shapes import PodShapes, pod_shapes
from agent.diagnosis.reachability import Reachability
from agent.model.cluster import ZONE_LABEL, ClusterState, Pod
from agent.model.job import Job
from agent.model.network import Endpoint, FlowVerdict, PortRange
from agent.policy import PolicySet
from agent.topology.flows import required_flows

FLOWS_LISTED = 1000
PodKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Cluster:
    """One side of a comparison: a cluster state and its policies."""

    state: ClusterState
    policies: PolicySet


@dataclass(frozen=True, slots=True)
class FlowChange:
    """One pod-pair flow whose verdict changes. `job`: the job whose required flow it is (None:
    a flow to a declared port between touched pods and others, `agent.diagnosis.flow_universe`)."""

    job: str | None
    source: str
    destination: str
    ports: PortRange
    before: FlowVerdict
    after: FlowVerdict


@dataclass(frozen=True, slots=True)
class TouchedFlows:
    """The declared-port flows of the touched pods: how many pod-pair flows were checked, how
    many changed, and the first `FLOWS_LISTED` of those."""

    touched: int
    checked: int
    changed: int
    listed: tuple[FlowChange, ...]


def _key(pod: Pod) -> PodKey:
    return (pod.namespace, pod.name)


def _changed_policies(before: PolicySet, after: PolicySet) -> frozenset[str]:
    """The ids of the policies (readable or not) that differ between the two sets."""
    old = {p.id: p for p in before.policies}
    new = {p.id: p for p in after.policies}
    out = {i for i in old.keys() | new.keys() if old.get(i) != new.get(i)}
    lost_old = {u.id: u for u in before.unreadable}
    lost_new = {u.id: u for u in after.unreadable}
    out |= {i for i in lost_old.keys() | lost_new.keys() if lost_old.get(i) != lost_new.get(i)}
    return frozenset(out)


def _identities(policies: PolicySet) -> tuple[str, str]:
    """What identities are made of under `policies`: the dataplane and its label filter."""
    return (policies.dataplane.kind.value, policies.identity.description)


def _selected_by(policies: PolicySet, endpoint: Endpoint, changed: frozenset[str]) -> bool:
    """True when a policy of `changed` selects `endpoint` (or, unreadable, may select it)."""
    if changed & policies.selecting(endpoint):
        return True
    return any(u.id in changed for u in policies.uncertain(endpoint))


GroupKey = tuple[int | None, int, tuple[PortRange, ...]]
# a group's evaluator keys (before, None for an added pod; after) and its declared ports
EvalKey = tuple[int | None, int, tuple[PortRange, ...]]
SourceKey = tuple[int | None, int]  # a source's evaluator keys (before, None for an added pod; after)


@dataclass(frozen=True, slots=True)
class Groups:
    """Every pod present after the change, by (class before or None for a pod the change adds,
    class after, declared ports), split into touched (`hot`) and untouched (`cold`) pods. The
    classes are those of one grouping over both sides' selector keys (`reach`), so a class's
    endpoint stands for its pods under either policy set."""

    reach: Reachability
    hot: Mapping[GroupKey, list[Pod]]
    cold: Mapping[GroupKey, list[Pod]]
    classes: Mapping[PodKey, int]  # each pod's class after the change
    changed: frozenset[str]  # the ids of the policies the change adds, removes or rewrites
    everything: bool  # the change alters identities: every pod is touched

    def touched(self) -> set[PodKey]:
        return {_key(p) for pods in self.hot.values() for p in pods}


def group_pods(before: Cluster, after: Cluster, *, shapes: PodShapes | None = None) -> Groups:
    """The pods of `after` grouped, and which the change touches (see the module docstring).
    `shapes`: the state's pods by shape, already held; used when the change keeps the state and
    reads no label key they do not (else, for a change that keeps the state, they are found
    here: one pod classified per shape, the same groups)."""
    keys = before.policies.pod_label_keys() | after.policies.pod_label_keys()
    reach = Reachability(after.policies, after.state.namespaces, label_keys=keys)
    same_state = after.state is before.state
    if same_state:  # one pod classified per shape (the shapes found here unless held)
        if shapes is None or not shapes.fits(after.state, keys):
            shapes = pod_shapes(after.state, keys)
        return _group_shapes(before, after, reach, shapes)
    old_pods = {} if same_state else {_key(p): p for p in before.state.pods}
    everything = (_identities(before.policies) != _identities(after.policies)
                  or before.state.namespaces != after.state.namespaces)  # fmt: skip
    changed = _changed_policies(before.policies, after.policies)
    port_sets: dict[int, tuple[PortRange, ...]] = {}  # by id: the pods hold their tuples
    selected: dict[tuple[int | None, int], bool] = {}
    hot: dict[GroupKey, list[Pod]] = {}
    cold: dict[GroupKey, list[Pod]] = {}
    class_of, endpoint = reach.class_of, reach.endpoint
    classes: dict[PodKey, int] = {}
    for pod in after.state.pods:
        was = pod if same_state else old_pods.get(_key(pod))
        now = classes[(pod.namespace, pod.name)] = class_of(pod)
        then = now if was is pod else (None if was is None else class_of(was))
        ports = port_sets.get(id(pod.ports))
        if ports is None:
            ports = port_sets[id(pod.ports)] = tuple(sorted(
                {PortRange.single(p.port, p.protocol) for p in pod.ports},
                key=lambda r: (r.first, r.protocol.value)))  # fmt: skip
        group = (then, now, ports)
        hit = everything or (was is not pod and was != pod)
        if not hit and changed:
            pair = (then, now)
            found = selected.get(pair)
            if found is None:
                found = selected[pair] = (
                    (then is not None and _selected_by(before.policies, endpoint(then), changed))
                    or _selected_by(after.policies, endpoint(now), changed))  # fmt: skip
            hit = found
        (hot if hit else cold).setdefault(group, []).append(pod)
    return Groups(reach, hot, cold, classes, changed, everything)


def _declared(pod: Pod) -> tuple[PortRange, ...]:
    return tuple(sorted({PortRange.single(p.port, p.protocol) for p in pod.ports},
                        key=lambda r: (r.first, r.protocol.value)))  # fmt: skip


def _group_shapes(before: Cluster, after: Cluster, reach: Reachability,
                  shapes: PodShapes) -> Groups:  # fmt: skip
    """`group_pods` for a change that keeps the state: one pod classified per shape (a shape's
    pods share every key the classes read, so they share class, ports and whether touched)."""
    everything = (_identities(before.policies) != _identities(after.policies)
                  or before.state.namespaces != after.state.namespaces)  # fmt: skip
    changed = _changed_policies(before.policies, after.policies)
    selected: dict[int, bool] = {}
    class_of: list[int] = []
    # each group's shapes, in the order the groups first come (a group's pods in state order)
    grouped: dict[tuple[bool, GroupKey], list[int]] = {}
    for shape, pod in enumerate(shapes.first):
        now = reach.class_of(pod)
        class_of.append(now)
        hit = everything
        if not hit and changed:
            found = selected.get(now)
            if found is None:
                endpoint = reach.endpoint(now)
                found = selected[now] = (_selected_by(before.policies, endpoint, changed)
                                         or _selected_by(after.policies, endpoint, changed))  # fmt: skip
            hit = found
        grouped.setdefault((hit, (now, now, _declared(pod))), []).append(shape)
    hot: dict[GroupKey, list[Pod]] = {}
    cold: dict[GroupKey, list[Pod]] = {}
    pods, members = shapes.pods, shapes.members
    for (hit, group), of in grouped.items():
        indices = members[of[0]] if len(of) == 1 else sorted(
            i for shape in of for i in members[shape])  # fmt: skip
        (hot if hit else cold)[group] = list(map(pods.__getitem__, indices))
    classes = dict(zip(shapes.keys, map(class_of.__getitem__, shapes.shape_of), strict=True))
    return Groups(reach, hot, cold, classes, changed, everything)


def warm_selectors(policies: PolicySet, state: ClusterState, shapes: PodShapes) -> int:
    """Intern, in `policies`' caches, the endpoint of each pod shape's class as `group_pods`
    builds it for a change that reads no new selector key, with the policies selecting it (what
    every what-if on those policies asks first); how many classes. Changes no answer."""
    reach = Reachability(policies, state.namespaces, label_keys=policies.pod_label_keys())
    classes = {reach.class_of(pod) for pod in shapes.first}
    for cid in classes:
        endpoint = reach.endpoint(cid)
        policies.selecting(endpoint)
        policies.uncertain(endpoint)
    return len(classes)


def reached_jobs(before: Cluster, after: Cluster, groups: Groups, jobs: Iterable[Job], *,
                 mirror_keys: Sequence[str], zones: Sequence[str]) -> list[Job] | None:  # fmt: skip
    """For a policy change on one state: the jobs whose verdict it can change, those with a pod
    some changed policy selects as placed now or moved to any zone (the zone-mirroring labels and
    the node topology label set to it, as the diagnosis's counterfactual co-location moves them);
    a job none selects keeps every flow's verdict in every placement. None: every job (the change
    alters identities, or touches a policy that cannot be read)."""
    lost = {u.id for u in (*before.policies.unreadable, *after.policies.unreadable)}
    if groups.everything or groups.changed & lost:
        return None
    subjects = [(policies, subject.selector) for policies in (before.policies, after.policies)
                for p in policies.policies if p.id in groups.changed
                for subject in p.subjects if subject.selector is not None]  # fmt: skip
    moving = (*mirror_keys, ZONE_LABEL)
    seen: dict[int, bool] = {}

    def reached(cid: int) -> bool:
        found = seen.get(cid)
        if found is None:
            endpoint = groups.reach.endpoint(cid)
            found = False
            for policies, selector in subjects:
                labels = policies.identity_of(endpoint)
                placements = [labels] + [{**labels, **{k: z for k in moving if k in labels}}
                                         for z in zones]  # fmt: skip
                if any(selector.matches(placed) for placed in placements):
                    found = True
                    break
            seen[cid] = found
        return found

    get = groups.classes.get
    out: list[Job] = []
    for job in jobs:
        for pod in job.pods:
            cid = get((pod.namespace, pod.name))
            if cid is not None and (seen[cid] if cid in seen else reached(cid)):
                out.append(job)
                break
    return out


_ABSENT = FlowVerdict(allowed=False)


def _reaches(before: Cluster, after: Cluster, groups: Groups) -> dict[GroupKey, tuple[bool, bool]]:
    """For each touched group: whether the change can change a verdict of its pods' flows as
    sources, as destinations. A hop is decided by the blocks selecting its endpoint that decide
    that direction (`Subject.decides`), reading of the far end only its class: so a pod whose
    class stays (and whose identities stay) changes its flows' verdicts as a source only when a
    changed policy deciding egress selects it, before or after (or an unreadable changed one
    may), and as a destination likewise for ingress; a pod whose class changes (or that the
    change adds), both. A flow with neither end reached in its role keeps its verdict."""
    endpoint = groups.reach.endpoint
    changed = groups.changed
    found: dict[int, tuple[bool, bool]] = {}
    out: dict[GroupKey, tuple[bool, bool]] = {}
    for gkey in groups.hot:
        then, now, _ = gkey
        if groups.everything or then != now:
            out[gkey] = (True, True)
            continue
        known = found.get(now)
        if known is None:
            e = endpoint(now)
            sets = (before.policies, after.policies)
            unsure = any(u.id in changed for p in sets for u in p.uncertain(e))
            known = found[now] = (
                unsure or any(changed & p.deciding(e, egress=True) for p in sets),
                unsure or any(changed & p.deciding(e, egress=False) for p in sets))  # fmt: skip
        out[gkey] = known
    return out


def touched_flows(
    before: Cluster, after: Cluster, groups: Groups, *, owner: Mapping[PodKey, str] | None = None
) -> TouchedFlows:
    """Every declared-port flow with a touched end, checked before and after (see the module
    docstring). A pod the change adds has no flow before: its flows are listed when allowed
    after (`before` denied, no hop). `owner`: the job a pod belongs to; a flow between two pods
    of one job is listed with that job, any other with none."""
    endpoint = groups.reach.endpoint
    hot, cold = groups.hot, groups.cold
    checked = changed = 0
    listed: list[FlowChange] = []
    owner = owner or {}
    check_before, check_after = before.policies.check_keys, after.policies.check_keys
    # each class's evaluator key under either set, found once (not hashed again per check)
    keys_before: dict[int, int] = {}
    keys_after: dict[int, int] = {}

    def key(known: dict[int, int], policies: PolicySet, cid: int) -> int:
        found = known.get(cid)
        if found is None:
            found = known[cid] = policies.equivalence_key(endpoint(cid))
        return found

    # groups the evaluator cannot tell apart (the same keys before and after, the same declared
    # ports) are compared once: each side's groups, by those keys, with their pod counts
    def collapse(side: Mapping[GroupKey, list[Pod]]) -> tuple[dict[EvalKey, int],
                                                             dict[GroupKey, EvalKey]]:  # fmt: skip
        sizes: dict[EvalKey, int] = {}
        of: dict[GroupKey, EvalKey] = {}
        for gkey, pods in side.items():
            old = None if gkey[0] is None else key(keys_before, before.policies, gkey[0])
            ekey = of[gkey] = (old, key(keys_after, after.policies, gkey[1]), gkey[2])
            sizes[ekey] = sizes.get(ekey, 0) + len(pods)
        return sizes, of

    hot_sizes, hot_of = collapse(hot)
    cold_sizes, cold_of = collapse(cold)
    # whether the change reaches the touched pods' hops as sources, as destinations
    reaches: dict[EvalKey, tuple[bool, bool]] = {}
    moved = {hot_of[g] for g in hot if groups.everything or g[0] != g[1]}  # its class changes
    for gkey, (as_src, as_dst) in _reaches(before, after, groups).items():
        was_src, was_dst = reaches.get(hot_of[gkey], (False, False))
        reaches[hot_of[gkey]] = (was_src or as_src, was_dst or as_dst)

    # as a source an entry is its keys alone (a source's declared ports play no part); each
    # entry with its pod count and whether the change reaches its hops in that role
    def sources(sizes: Mapping[EvalKey, int], *, touched: bool) -> dict[SourceKey, list[int]]:
        out: dict[SourceKey, list[int]] = {}
        for ekey, n in sizes.items():
            entry = out.setdefault((ekey[0], ekey[1]), [0, 0])
            entry[0] += n
            entry[1] |= touched and reaches[ekey][0]
        return out

    def destinations(sizes: Mapping[EvalKey, int], *, touched: bool) -> dict[EvalKey, list[int]]:
        return {ekey: [n, touched and reaches[ekey][1], touched and ekey in moved]
                for ekey, n in sizes.items()}  # fmt: skip

    hot_dst = destinations(hot_sizes, touched=True)
    cold_dst = destinations(cold_sizes, touched=False)
    # the verdicts (before, after) of each evaluator pair and port range that change
    # the entry pairs with a port whose verdict changes (their verdicts found when listed)
    flips: dict[tuple[bool, SourceKey, bool, EvalKey], list[tuple[FlowVerdict, FlowVerdict]] | None] = {}

    def compare(source: tuple[bool, SourceKey, int, int], dhot: bool,
                dests: Mapping[EvalKey, list[int]]) -> None:  # fmt: skip
        nonlocal checked, changed
        shot, skey, ns, sreach = source
        for dkey, (nd, dreach, dmoved) in dests.items():
            # a pod is never its own peer: the destination entry's pods are among the source
            # entry's when they are of one side with the same keys
            pairs = ns * nd - (nd if shot == dhot and skey == (dkey[0], dkey[1]) else 0)
            if not pairs:
                continue
            checked += pairs * len(dkey[2])
            if not (sreach or dreach):
                continue  # neither hop can change: the verdict stays (counted, not evaluated)
            any_flip = False
            for ports in dkey[2]:
                if sreach or dmoved:
                    was = (skey[0] is not None and dkey[0] is not None
                           and check_before(skey[0], dkey[0], ports).allowed)  # fmt: skip
                    flip = was != check_after(skey[1], dkey[1], ports).allowed
                else:
                    # only the destination's ingress hop can change (the source's egress hop,
                    # and what it reads of the destination, stay): it decides when egress allows
                    assert skey[0] is not None and dkey[0] is not None, "unmoved pods were there"
                    flip = (before.policies.hop_allows(skey[0], dkey[0], ports, egress=False)
                            != after.policies.hop_allows(skey[1], dkey[1], ports, egress=False)
                            and before.policies.hop_allows(skey[0], dkey[0], ports, egress=True))  # fmt: skip
                if flip:
                    changed += pairs
                    any_flip = True
            if any_flip:
                flips[(shot, skey, dhot, dkey)] = None

    for skey, (ns, sreach) in sources(hot_sizes, touched=True).items():  # to every pod
        compare((True, skey, ns, sreach), True, hot_dst)
        compare((True, skey, ns, sreach), False, cold_dst)
    for skey, (ns, sreach) in sources(cold_sizes, touched=False).items():  # to touched pods
        compare((False, skey, ns, sreach), True, hot_dst)

    def listing(spods: list[Pod], dpods: list[Pod], dkey: GroupKey,
                verdicts: list[tuple[FlowVerdict, FlowVerdict]]) -> None:  # fmt: skip
        for ports, (was, now) in zip(dkey[2], verdicts, strict=True):
            if was.allowed == now.allowed:
                continue
            for s in spods:
                if len(listed) >= FLOWS_LISTED:
                    return
                for d in dpods:
                    if s is d:
                        continue
                    if len(listed) >= FLOWS_LISTED:
                        return
                    job = owner.get(_key(s))
                    job = job if job is not None and job == owner.get(_key(d)) else None
                    listed.append(FlowChange(job, f"{s.namespace}/{s.name}",
                                             f"{d.namespace}/{d.name}", ports, was, now))  # fmt: skip

    def verdicts(ekey: tuple[bool, SourceKey, bool, EvalKey]
                 ) -> list[tuple[FlowVerdict, FlowVerdict]]:  # fmt: skip
        found = flips[ekey]
        if found is None:
            _, skey, _, dkey = ekey
            found = flips[ekey] = [
                (_ABSENT if skey[0] is None or dkey[0] is None
                 else check_before(skey[0], dkey[0], ports), check_after(skey[1], dkey[1], ports))
                for ports in dkey[2]]  # fmt: skip
        return found

    if flips:  # the changed flows listed group pair by group pair, in the groups' order
        every = [*((True, k, v) for k, v in hot.items()), *((False, k, v) for k, v in cold.items())]
        for skey_g, spods in hot.items():
            for dhot, dkey_g, dpods in every:
                src = hot_of[skey_g]
                ekey = (True, (src[0], src[1]), dhot, (hot_of if dhot else cold_of)[dkey_g])
                if ekey in flips and len(listed) < FLOWS_LISTED:
                    listing(spods, dpods, dkey_g, verdicts(ekey))
        for skey_g, spods in cold.items():
            for dkey_g, dpods in hot.items():
                src = cold_of[skey_g]
                ekey = (False, (src[0], src[1]), True, hot_of[dkey_g])
                if ekey in flips and len(listed) < FLOWS_LISTED:
                    listing(spods, dpods, dkey_g, verdicts(ekey))
    listed.sort(key=lambda c: (c.source, c.destination, c.ports.first, c.ports.protocol.value))
    touched = sum(len(v) for v in hot.values())
    return TouchedFlows(touched, checked, changed, tuple(listed))


class _Classes:
    """Each pod's (class before, class after), found once; None for a pod the change deletes.
    The class after is that of the pod of the same namespace and name after the change (a moved
    job's pods carry new labels)."""

    def __init__(self, before: Reachability, after: Reachability,
                 present: dict[tuple[str, str], Pod]) -> None:
        self._before, self._after, self._present = before, after, present
        self._known: dict[int, tuple[int, int] | None] = {}

    def groups(self, pods: tuple[Pod, ...]) -> dict[tuple[int, int], list[Pod]]:
        """The pods still there after the change, by (class before, class after)."""
        out: dict[tuple[int, int], list[Pod]] = {}
        known = self._known
        for pod in pods:
            if id(pod) in known:
                key = known[id(pod)]
            else:
                now = self._present.get((pod.namespace, pod.name))
                key = known[id(pod)] = (
                    None if now is None
                    else (self._before.class_of(pod), self._after.class_of(now))
                )
            if key is not None:
                group = out.get(key)
                if group is None:
                    out[key] = [pod]
                else:
                    group.append(pod)
        return out


def reachabilities(before: Cluster, after: Cluster) -> tuple[Reachability, Reachability]:
    """The class grouping of each side (its own policies' label keys)."""
    return (Reachability(before.policies, before.state.namespaces,
                         label_keys=before.policies.pod_label_keys()),
            Reachability(after.policies, after.state.namespaces,
                         label_keys=after.policies.pod_label_keys()))  # fmt: skip


def required_flow_changes(
    before: Cluster, after: Cluster, jobs: Iterable[Job], *,
    reach: tuple[Reachability, Reachability] | None = None,
) -> tuple[list[FlowChange], int]:  # fmt: skip
    """The required flows (pod pairs) whose verdict changes, and how many pod pairs were checked.
    Pods the policies cannot tell apart, before and after alike, are checked once per class pair
    (`Reachability`, the diagnosis's own grouping); only pairs whose verdict changes are listed."""
    reach_before, reach_after = reach or reachabilities(before, after)
    classes = _Classes(reach_before, reach_after,
                       {(p.namespace, p.name): p for p in after.state.pods})
    changes: list[FlowChange] = []
    checked = 0
    for job in jobs:
        label = str(job.ref)
        for rule in required_flows(job):
            sources = classes.groups(rule.sources)
            destinations = classes.groups(rule.destinations)
            for src_key, src_pods in sources.items():
                for dst_key, dst_pods in destinations.items():
                    # a pod is never its own peer: only a group pair of one key can share pods
                    shared = (len({id(p) for p in src_pods} & {id(p) for p in dst_pods})
                              if src_key == dst_key else 0)  # fmt: skip
                    checked += len(src_pods) * len(dst_pods) - shared
                    old = reach_before.verdict(src_key[0], dst_key[0], rule.ports)
                    new = reach_after.verdict(src_key[1], dst_key[1], rule.ports)
                    if old.allowed == new.allowed:
                        continue
                    changes.extend(
                        FlowChange(label, f"{s.namespace}/{s.name}", f"{d.namespace}/{d.name}",
                                   rule.ports, old, new)
                        for s in src_pods for d in dst_pods if s is not d
                    )  # fmt: skip
    changes.sort(key=lambda c: (c.job, c.source, c.destination, c.ports.first, c.ports.last))
    return changes, checked
