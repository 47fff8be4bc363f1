"""Parse Kueue manifests (Topology, ResourceFlavor, ClusterQueue, LocalQueue, Workload) into the model.

Called by `agent.snapshot.collection` for each Kueue item of a dump and by the runtime's mirror
for each cached one (the slim forms keep the fields read here). Reads the kueue.x-k8s.io/v1beta1
shapes (v1alpha1 for a v0.13 Topology: the same fields). Checks the type of every field it reads
and raises `ManifestError(field, problem)`. `kueue_objects` gathers parsed objects into a
`KueueObjects`. It reads no files and decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agent.model.descriptor import PodTemplate
from agent.model.kueue import (
    ClusterQueue,
    DomainAssignment,
    FlavorQuota,
    KueueFlavor,
    KueueObjects,
    KueueTopology,
    KueueWorkload,
    LocalQueue,
    PodSetAssignment,
    PodSetTopology,
)
from agent.model.workload import KueueKindName
from agent.snapshot.manifests import ManifestError, metadata, pod_set_topology

KueueObject = KueueTopology | KueueFlavor | ClusterQueue | LocalQueue | KueueWorkload

_SUFFIXES = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2.0**10, "Mi": 2.0**20,
             "Gi": 2.0**30, "Ti": 2.0**40, "m": 1e-3}  # fmt: skip


def _type(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _map(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(f"{where}{key}", f"expected a mapping, got {_type(value)}")
    return value


def _items(obj: Mapping[str, Any], key: str, where: str) -> list[tuple[str, Mapping[str, Any]]]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(f"{where}{key}", f"expected a list, got {_type(value)}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ManifestError(f"{where}{key}[{i}]", f"expected a mapping, got {_type(item)}")
        out.append((f"{where}{key}[{i}].", item))
    return out


def _text(obj: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str | None:
    value = obj.get(key)
    if value is None or value == "":
        if required:
            raise ManifestError(f"{where}{key}", "missing")
        return None
    if not isinstance(value, str):
        raise ManifestError(f"{where}{key}", f"expected a string, got {_type(value)}")
    return value


def quantity(value: object, where: str) -> float:
    """A Kubernetes quantity (`8`, `"8"`, `"500m"`, `"16Gi"`) as a number."""
    if isinstance(value, bool):
        raise ManifestError(where, f"expected a quantity, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        for suffix in sorted(_SUFFIXES, key=len, reverse=True):
            if text.endswith(suffix) and text[: -len(suffix)]:
                text, scale = text[: -len(suffix)], _SUFFIXES[suffix]
                break
        else:
            scale = 1.0
        try:
            return float(text) * scale
        except ValueError:
            pass
    raise ManifestError(where, f"expected a quantity, got {value!r}")


def parse_topology(item: Mapping[str, Any]) -> KueueTopology:
    _, _, name = metadata(item, namespaced=False)
    spec = _map(item, "spec", "")
    levels = tuple(str(_text(level, "nodeLabel", where, required=True))
                   for where, level in _items(spec, "levels", "spec."))  # fmt: skip
    return KueueTopology(name=name, levels=levels)


def parse_flavor(item: Mapping[str, Any]) -> KueueFlavor:
    _, _, name = metadata(item, namespaced=False)
    spec = _map(item, "spec", "")
    labels = _map(spec, "nodeLabels", "spec.")
    if not all(isinstance(v, str) for v in labels.values()):
        raise ManifestError("spec.nodeLabels", "expected string values")
    return KueueFlavor(name=name, topology=_text(spec, "topologyName", "spec."),
                       node_labels=dict(labels))  # fmt: skip


def parse_cluster_queue(item: Mapping[str, Any]) -> ClusterQueue:
    _, _, name = metadata(item, namespaced=False)
    spec = _map(item, "spec", "")
    reserved: dict[tuple[str, str], float] = {}
    status = _map(item, "status", "")
    for where, usage in _items(status, "flavorsReservation", "status."):
        flavor = str(_text(usage, "name", where, required=True))
        for rwhere, res in _items(usage, "resources", where):
            resource = str(_text(res, "name", rwhere, required=True))
            reserved[(flavor, resource)] = quantity(res.get("total", 0), f"{rwhere}total")
    flavors: list[str] = []
    quotas: list[FlavorQuota] = []
    for where, group in _items(spec, "resourceGroups", "spec."):
        for fwhere, entry in _items(group, "flavors", where):
            fname = str(_text(entry, "name", fwhere, required=True))
            flavors.append(fname)
            for rwhere, res in _items(entry, "resources", fwhere):
                resource = str(_text(res, "name", rwhere, required=True))
                quotas.append(FlavorQuota(
                    fname, resource, quantity(res.get("nominalQuota", 0), f"{rwhere}nominalQuota"),
                    reserved.get((fname, resource), 0.0)))  # fmt: skip
    return ClusterQueue(name=name, flavors=tuple(dict.fromkeys(flavors)), quotas=tuple(quotas))


def parse_local_queue(item: Mapping[str, Any]) -> LocalQueue:
    _, namespace, name = metadata(item, namespaced=True)
    spec = _map(item, "spec", "")
    return LocalQueue(namespace=namespace, name=name,
                      cluster_queue=str(_text(spec, "clusterQueue", "spec.", required=True)))  # fmt: skip


def _assignment(entry: Mapping[str, Any], where: str) -> PodSetAssignment:
    flavors = _map(entry, "flavors", where)
    if not all(isinstance(v, str) for v in flavors.values()):
        raise ManifestError(f"{where}flavors", "expected string values")
    topology = _map(entry, "topologyAssignment", where)
    twhere = f"{where}topologyAssignment."
    levels = topology.get("levels") or []
    if not isinstance(levels, list) or not all(isinstance(v, str) for v in levels):
        raise ManifestError(f"{twhere}levels", "expected a list of strings")
    domains = []
    for dwhere, domain in _items(topology, "domains", twhere):
        values = domain.get("values") or []
        count = domain.get("count", 0)
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ManifestError(f"{dwhere}values", "expected a list of strings")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ManifestError(f"{dwhere}count", f"expected a non-negative integer, got {count!r}")
        domains.append(DomainAssignment(tuple(values), count))
    return PodSetAssignment(name=str(_text(entry, "name", where, required=True)),
                            flavors=dict(flavors), levels=tuple(levels), domains=tuple(domains))  # fmt: skip


def _pod_set(where: str, entry: Mapping[str, Any]) -> tuple[str, int, PodSetTopology]:
    """A Workload PodSet: its name, pod count (default 1) and its template's TAS request."""
    name = str(_text(entry, "name", where, required=True))
    count = entry.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ManifestError(f"{where}count", f"expected a non-negative integer, got {count!r}")
    template = _map(entry, "template", where)
    path = (*where.rstrip(".").split("."), "template")
    return name, count, pod_set_topology(PodTemplate(name, path, template, count))


def parse_workload(item: Mapping[str, Any]) -> KueueWorkload:
    meta, namespace, name = metadata(item, namespaced=True)
    spec = _map(item, "spec", "")
    pod_sets = [_pod_set(where, p) for where, p in _items(spec, "podSets", "spec.")]
    status = _map(item, "status", "")
    active = spec.get("active", True)
    if not isinstance(active, bool):
        raise ManifestError("spec.active", f"expected a boolean, got {_type(active)}")
    admitted = any(cond.get("type") == "Admitted" and cond.get("status") == "True"
                   for _, cond in _items(status, "conditions", "status."))  # fmt: skip
    admission = _map(status, "admission", "status.")
    owner_kind = owner_name = None
    for where, ref in _items(meta, "ownerReferences", "metadata."):
        if ref.get("controller") is True:
            owner_kind = _text(ref, "kind", where, required=True)
            owner_name = _text(ref, "name", where, required=True)
    return KueueWorkload(
        namespace=namespace, name=name, queue=_text(spec, "queueName", "spec.") or "",
        active=active, admitted=admitted,
        cluster_queue=_text(admission, "clusterQueue", "status.admission."),
        assignments=tuple(_assignment(entry, where) for where, entry
                          in _items(admission, "podSetAssignments", "status.admission.")),
        pod_sets=tuple(n for n, _, _ in pod_sets),
        owner_kind=owner_kind, owner_name=owner_name,
        counts={n: c for n, c, _ in pod_sets},
        requests={n: t for n, _, t in pod_sets if t.requested or t.group is not None},
    )  # fmt: skip


PARSERS: Mapping[KueueKindName, Callable[[Mapping[str, Any]], KueueObject]] = {
    KueueKindName.TOPOLOGY: parse_topology,
    KueueKindName.RESOURCE_FLAVOR: parse_flavor,
    KueueKindName.CLUSTER_QUEUE: parse_cluster_queue,
    KueueKindName.LOCAL_QUEUE: parse_local_queue,
    KueueKindName.WORKLOAD: parse_workload,
}


def parse_kueue_object(item: Mapping[str, Any], kind: KueueKindName) -> KueueObject:
    """One Kueue object of `kind`, parsed."""
    return PARSERS[kind](item)


def kueue_objects(parsed: Iterable[KueueObject]) -> KueueObjects:
    """The `KueueObjects` holding these parsed objects (a later one of the same name wins)."""
    topologies: dict[str, KueueTopology] = {}
    flavors: dict[str, KueueFlavor] = {}
    queues: dict[str, ClusterQueue] = {}
    local: dict[tuple[str, str], LocalQueue] = {}
    workloads: dict[tuple[str, str], KueueWorkload] = {}
    for obj in parsed:
        if isinstance(obj, KueueTopology):
            topologies[obj.name] = obj
        elif isinstance(obj, KueueFlavor):
            flavors[obj.name] = obj
        elif isinstance(obj, ClusterQueue):
            queues[obj.name] = obj
        elif isinstance(obj, LocalQueue):
            local[(obj.namespace, obj.name)] = obj
        else:
            workloads[(obj.namespace, obj.name)] = obj
    return KueueObjects(topologies=topologies, flavors=flavors, cluster_queues=queues,
                        local_queues=local, workloads=workloads)  # fmt: skip
