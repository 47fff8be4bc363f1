"""Zones of pods and the zone-mirroring pod label.

A pod's zone is its node's `topology.kubernetes.io/zone` label. Zone-boundary policies select on a
pod label that mirrors the node zone; `mirror_label_keys` finds it from the `pod_zone_label`
setting: a key, `""` (none), or `auto`: every pod label key whose value, on the scheduled pods
carrying it, is always a zone of the cluster and equals the pod's node zone on more of them than
not, with at least two distinct values in the cluster. A minority of pods may lie (their label
names another zone, e.g. put back by a GitOps sync after the pod moved): the diagnosis reports
them (`zone_label_mismatch`). Called by `agent.diagnosis`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agent.model.cluster import ZONE_LABEL, Node, Pod

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
