"""Zones of pods and the zone-mirroring pod label.

A pod's zone is its node's `topology.kubernetes.io/zone` label. Zone-boundary policies select on a
pod label that mirrors the node zone; `mirror_label_keys` finds it from the `pod_zone_label`
setting: a key, `""` (none), or `auto`: every pod label key whose value, on the scheduled pods
carrying it, is always a zone of the cluster and equals the pod's node zone on more of them than
not, with at least two distinct values in the cluster. A minority of pods may lie (their label
names another zone, e.g. put back by a GitOps sync after the pod moved): the diagnosis reports
them (`zone_label_mismatch`).

Labels still to come (`awaited_labels`): the zone-mirroring label is written after the bind (a
binding webhook or the node's agent stamps the node's zone on the pod before its containers
start), so a verdict computed between the bind and that write is not the one the policies will
give. The keys a job's verdict depends on are the zone-mirroring keys its policies read: the
mirror keys, and every pod label key a selector compares with a zone name (`zone_keys`: found from
the policies alone, before any pod carries it). A bound pod awaits them while it has not started
(phase Pending) and does not carry each with its node's zone; once it runs, what it carries is
what the policies see (a label that lies then is the pod's own problem, reported as such).
Called by `agent.diagnosis`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agent.model.cluster import ZONE_LABEL, Node, Pod, PodPhase

AUTO = "auto"


def pod_zone(pod: Pod, nodes: Mapping[str, Node]) -> str | None:
    """The zone of the pod's node, or None (unscheduled, unknown node, unlabelled node)."""
    if pod.node_name is None:
        return None
    node = nodes.get(pod.node_name)
    return None if node is None else node.zone


def detect_mirror_label_keys(pods: Iterable[Pod], nodes: Mapping[str, Node]) -> tuple[str, ...]:
    """Label keys that mirror the node zone (see the module docstring)."""
    node_zone = {name: n.zone for name, n in nodes.items()}
    zones = {z for z in node_zone.values() if z is not None}
    rejected: set[str] = {ZONE_LABEL}
    values: dict[str, set[str]] = {}
    agree: dict[str, int] = {}
    lie: dict[str, int] = {}
    for pod in pods:
        if pod.node_name is None:
            continue
        zone = node_zone.get(pod.node_name)
        if zone is None:
            continue
        for key, value in pod.labels.items():
            if key in rejected:
                continue
            if value not in zones:
                rejected.add(key)
                values.pop(key, None)
                continue
            values.setdefault(key, set()).add(value)
            if value == zone:
                agree[key] = agree.get(key, 0) + 1
            else:
                lie[key] = lie.get(key, 0) + 1
    return tuple(
        sorted(
            k
            for k, seen in values.items()
            if len(seen) >= 2 and agree.get(k, 0) > lie.get(k, 0)
        )
    )


def mirror_label_keys(
    setting: str, *, pods: Iterable[Pod], nodes: Mapping[str, Node]
) -> tuple[str, ...]:
    """Resolve the `pod_zone_label` setting (a key, "" for none, or "auto") to label keys."""
    if setting == AUTO:
        return detect_mirror_label_keys(pods, nodes)
    if setting == "":
        return ()
    return (setting,)


def zone_keys(
    values: Mapping[str, Iterable[str]], *, zones: Iterable[str], mirror_keys: Iterable[str],
    readable: Iterable[str],
) -> tuple[str, ...]:
    """The zone-mirroring keys a job's policies read: of the pod label keys its policies'
    selectors compare (`values`: key -> the values compared), those that are mirror keys or that
    a selector compares with a zone name; only keys the dataplane's identities keep (`readable`)
    can change what a selector matches."""
    zone_set = frozenset(zones)
    mirrors = frozenset(mirror_keys)
    keep = frozenset(readable)
    return tuple(sorted(
        key for key, compared in values.items()
        if key in keep and (key in mirrors or not zone_set.isdisjoint(compared))
    ))


def awaited_labels(
    pods: Iterable[Pod], *, keys: Iterable[str], node_zone: Mapping[str, str | None]
) -> tuple[str, ...]:
    """The bound, not yet started pods that do not carry every key of `keys` with their node's
    zone: their zone-mirroring labels are still to come (see the module docstring)."""
    wanted = tuple(keys)
    if not wanted:
        return ()
    out: list[str] = []
    for pod in pods:
        if pod.node_name is None or pod.phase is not PodPhase.PENDING:
            continue
        zone = node_zone.get(pod.node_name)
        if zone is not None and any(pod.labels.get(k) != zone for k in wanted):
            out.append(pod.name)
    return tuple(out)
