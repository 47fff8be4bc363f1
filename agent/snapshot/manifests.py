"""Parse single Kubernetes manifests (plain dicts) into model objects: Node, Namespace, Pod, ...

Called by `agent.snapshot.collection` once per item. Checks types of every field it reads and
raises `ManifestError(field, problem)`; the caller adds the file and item index. A pod's labels
are copied once (shallow) so the rest of its document can be freed and the pods' data stays close
together in memory; nothing else is copied. `PodParts` lets a caller whose pods share sub-objects
(the runtime's watch cache) parse each shared containers list and owner-reference list once. It
does not parse network policies (that is `agent.policy.parse_policy`) and reads no files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.model.cluster import (
    GPU_RESOURCE,
    ContainerPort,
    DeclaredCoordinator,
    Namespace,
    Node,
    OwnedObject,
    OwnerRef,
    Pod,
    PodPhase,
    Taint,
    TrainingJobObject,
)
from agent.model.descriptor import PodTemplate, TemplateLayout, dig, env_port
from agent.model.kueue import PodSetTopology
from agent.model.network import Protocol
from agent.model.ownership import ownership_of
from agent.model.workload import KUEUE, JobKind, WorkloadKind, workload
from agent.parsing.numbers import NumberError, parse_int

_EMPTY: dict[str, Any] = {}
MAX_GPUS = 1_000_000  # GPUs on one node or in one container: far above any real value
_PHASES = {p.value: p for p in PodPhase}
_STR_ONLY = frozenset({str})
_PROTOCOLS = {p.value: p for p in Protocol if p is not Protocol.ANY}


class ManifestError(Exception):
    """A field of a manifest is missing or has the wrong type (`field` is a dotted path)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def _type(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _map(obj: Mapping[str, Any], key: str, *, where: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return _EMPTY
    if not isinstance(value, dict):
        raise ManifestError(f"{where}{key}", f"expected a mapping, got {_type(value)}")
    return value


def _list(obj: Mapping[str, Any], key: str, *, where: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(f"{where}{key}", f"expected a list, got {_type(value)}")
    return value


def _opt_str(obj: Mapping[str, Any], key: str, *, where: str) -> str | None:
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ManifestError(f"{where}{key}", f"expected a string, got {_type(value)}")


def _req_str(obj: Mapping[str, Any], key: str, *, where: str) -> str:
    value = obj.get(key)
    if isinstance(value, str) and value:
        return value
    if value is None or value == "":
        raise ManifestError(f"{where}{key}", "required")
    raise ManifestError(f"{where}{key}", f"expected a string, got {_type(value)}")


def _bool(obj: Mapping[str, Any], key: str, *, where: str) -> bool:
    value = obj.get(key)
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise ManifestError(f"{where}{key}", f"expected true or false, got {_type(value)}")


def _labels(meta: Mapping[str, Any], key: str = "labels") -> Mapping[str, str]:
    value = meta.get(key)
    if value is None:
        return _EMPTY
    if not isinstance(value, dict):
        raise ManifestError(f"metadata.{key}", f"expected a mapping, got {_type(value)}")
    for k, v in value.items():
        if not isinstance(v, str) or not isinstance(k, str):
            raise ManifestError(f"metadata.{key}.{k}", f"expected a string value, got {_type(v)}")
    return value


def _count(value: object, where: str) -> int:
    """An integer resource quantity such as nvidia.com/gpu ('2', 2): ASCII digits, 0 to MAX_GPUS."""
    try:
        return parse_int(value, field=where, minimum=0, maximum=MAX_GPUS)
    except NumberError as exc:
        raise ManifestError(where, str(exc).removeprefix(f"{where}: ")) from None


def metadata(item: Mapping[str, Any], *, namespaced: bool) -> tuple[Mapping[str, Any], str, str]:
    """(metadata, namespace, name); namespace is '' for cluster-scoped objects."""
    meta = _map(item, "metadata", where="")
    name = _req_str(meta, "name", where="metadata.")
    namespace = (_opt_str(meta, "namespace", where="metadata.") or "default") if namespaced else ""
    return meta, namespace, name


def _owners(meta: Mapping[str, Any]) -> tuple[OwnerRef, ...]:
    refs = _list(meta, "ownerReferences", where="metadata.")
    if not refs:
        return ()
    out = []
    for i, ref in enumerate(refs):
        where = f"metadata.ownerReferences[{i}]."
        if not isinstance(ref, dict):
            raise ManifestError(where[:-1], f"expected a mapping, got {_type(ref)}")
        out.append(
            OwnerRef(
                kind=_req_str(ref, "kind", where=where),
                name=_req_str(ref, "name", where=where),
                api_version=_opt_str(ref, "apiVersion", where=where) or "",
                controller=_bool(ref, "controller", where=where),
            )
        )
    return tuple(out)


def parse_node(item: Mapping[str, Any]) -> Node:
    meta, _, name = metadata(item, namespaced=False)
    spec = _map(item, "spec", where="")
    status = _map(item, "status", where="")
    allocatable = _map(status, "allocatable", where="status.")
    gpus = allocatable.get(GPU_RESOURCE)
    taints = []
    for i, t in enumerate(_list(spec, "taints", where="spec.")):
        where = f"spec.taints[{i}]."
        if not isinstance(t, dict):
            raise ManifestError(where[:-1], f"expected a mapping, got {_type(t)}")
        taints.append(
            Taint(
                key=_req_str(t, "key", where=where),
                effect=_opt_str(t, "effect", where=where) or "",
                value=_opt_str(t, "value", where=where) or "",
            )
        )
    return Node(
        name=name,
        labels=_labels(meta),
        gpu_allocatable=0 if gpus is None else _count(gpus, f"status.allocatable.{GPU_RESOURCE}"),
        unschedulable=_bool(spec, "unschedulable", where="spec."),
        taints=tuple(taints),
    )


def parse_namespace(item: Mapping[str, Any]) -> Namespace:
    meta, _, name = metadata(item, namespaced=False)
    return Namespace(name=name, labels=_labels(meta))


def _container_gpus(container: Mapping[str, Any], where: str) -> int:
    resources = _map(container, "resources", where=where)
    if not resources:
        return 0
    requests = _map(resources, "requests", where=f"{where}resources.")
    value = requests.get(GPU_RESOURCE)
    if value is not None:
        return _count(value, f"{where}resources.requests.{GPU_RESOURCE}")
    limits = _map(resources, "limits", where=f"{where}resources.")
    value = limits.get(GPU_RESOURCE)  # extended resources: requests default to limits
    if value is not None:
        return _count(value, f"{where}resources.limits.{GPU_RESOURCE}")
    return 0


def _container_ports(container: Mapping[str, Any], where: str) -> list[ContainerPort]:
    out = []
    for j, port in enumerate(_list(container, "ports", where=where)):
        pwhere = f"{where}ports[{j}]."
        if not isinstance(port, dict):
            raise ManifestError(pwhere[:-1], f"expected a mapping, got {_type(port)}")
        number = port.get("containerPort")
        if isinstance(number, bool) or not isinstance(number, int) or not 0 < number < 65536:
            raise ManifestError(f"{pwhere}containerPort", f"expected a port number, got {number!r}")
        protocol = port.get("protocol", "TCP")
        if protocol not in _PROTOCOLS:
            raise ManifestError(f"{pwhere}protocol", f"expected TCP, UDP or SCTP, got {protocol!r}")
        out.append(
            ContainerPort(
                port=number,
                name=_opt_str(port, "name", where=pwhere),
                protocol=_PROTOCOLS[protocol],
            )
        )
    return out


class PodParts:
    """Parsed sub-objects that pods share, for `parse_pod(parts=...)`.

    The watch cache hands the containers (slimmed: names, ports, GPU requests) and the owner
    references of a job's pods as one shared object each, so their parsed forms (GPUs requested
    and ports; owner references) are computed once per object, recognised by identity. An entry
    holds its object, so an identity is never reused while it is remembered; the objects must
    never be mutated (the cache never does). Equal port tuples are shared by value (`ports`).
    Bounded: forgotten when `capacity` entries are held. Not thread-safe."""

    def __init__(self, capacity: int = 50_000) -> None:
        self.capacity = capacity
        self.ports: dict[tuple[ContainerPort, ...], tuple[ContainerPort, ...]] = {}
        self._containers: dict[int, tuple[object, int, tuple[ContainerPort, ...]]] = {}
        self._owners: dict[int, tuple[object, tuple[OwnerRef, ...]]] = {}

    def containers(self, spec: Mapping[str, Any]) -> tuple[int, tuple[ContainerPort, ...]]:
        """(GPUs the containers request, their ports) of a pod spec."""
        raw = spec.get("containers")
        found = self._containers.get(id(raw))
        if found is not None and found[0] is raw:
            return found[1], found[2]
        gpus, ports = _containers(spec, self.ports)
        if raw is not None:
            if len(self._containers) >= self.capacity:
                self._containers.clear()
                self.ports.clear()
            self._containers[id(raw)] = (raw, gpus, ports)
        return gpus, ports

    def owners(self, meta: Mapping[str, Any]) -> tuple[OwnerRef, ...]:
        """The owner references of a pod's metadata."""
        raw = meta.get("ownerReferences")
        if not raw:
            return _owners(meta)
        found = self._owners.get(id(raw))
        if found is not None and found[0] is raw:
            return found[1]
        owners = _owners(meta)
        if len(self._owners) >= self.capacity:
            self._owners.clear()
        self._owners[id(raw)] = (raw, owners)
        return owners


def _containers(
    spec: Mapping[str, Any],
    shared: dict[tuple[ContainerPort, ...], tuple[ContainerPort, ...]] | None,
) -> tuple[int, tuple[ContainerPort, ...]]:
    """(GPUs requested, ports) of a pod spec's containers; equal port tuples shared."""
    gpus = 0
    ports: list[ContainerPort] = []
    for i, container in enumerate(_list(spec, "containers", where="spec.")):
        where = f"spec.containers[{i}]."
        if not isinstance(container, dict):
            raise ManifestError(where[:-1], f"expected a mapping, got {_type(container)}")
        gpus += _container_gpus(container, where)
        if "ports" in container:
            ports.extend(_container_ports(container, where))
    port_tuple = tuple(ports)
    if shared is not None and port_tuple:
        port_tuple = shared.setdefault(port_tuple, port_tuple)
    return gpus, port_tuple


def parse_pod(
    item: Mapping[str, Any],
    *,
    shared: dict[tuple[ContainerPort, ...], tuple[ContainerPort, ...]] | None = None,
    parts: PodParts | None = None,
) -> Pod:
    """A Pod. Equal port tuples are shared through `shared` (pods of a job declare the same);
    with `parts`, shared containers and owner references are parsed once (see `PodParts`).

    A pod whose fields all have their usual types takes a short path (the same checks, made on
    the values at hand); any other goes through the field-by-field checks that name what is
    wrong, so both give the same pod or the same `ManifestError`."""
    meta = item.get("metadata")
    spec = item.get("spec", _EMPTY)
    status = item.get("status", _EMPTY)
    if type(meta) is dict and type(spec) is dict and type(status) is dict:
        name = meta.get("name")
        namespace = meta.get("namespace")
        labels = meta.get("labels", _EMPTY)
        node_name = spec.get("nodeName")
        account = spec.get("serviceAccountName")
        legacy = spec.get("serviceAccount")
        phase = status.get("phase", "Pending")
        if (
            type(name) is str and name
            and (namespace is None or type(namespace) is str)
            and type(labels) is dict and _all_str(labels)
            and (node_name is None or type(node_name) is str)
            and (account is None or type(account) is str)
            and (legacy is None or type(legacy) is str)
            and type(phase) is str and phase in _PHASES
            and "initContainers" not in spec
        ):  # fmt: skip
            gpus, ports = _containers(spec, shared) if parts is None else parts.containers(spec)
            return Pod(
                namespace=namespace or "default",
                name=name,
                labels=dict(labels),  # a fresh dict beside the Pod: better locality
                node_name=node_name or None,
                phase=_PHASES[phase],
                gpu_request=gpus,
                ports=ports,
                service_account=account or legacy or "default",
                owners=_owners(meta) if parts is None else parts.owners(meta),
            )
    return parse_pod_checked(item, shared=shared, parts=parts)


def _all_str(labels: dict[Any, Any]) -> bool:
    """Every key and value of a label map is a string (checked at C speed)."""
    return not labels or (_STR_ONLY.issuperset(map(type, labels))
                          and _STR_ONLY.issuperset(map(type, labels.values())))  # fmt: skip


def parse_pod_checked(
    item: Mapping[str, Any],
    *,
    shared: dict[tuple[ContainerPort, ...], tuple[ContainerPort, ...]] | None,
    parts: PodParts | None,
) -> Pod:
    """`parse_pod`, each field checked in turn (naming the first that is wrong)."""
    meta, namespace, name = metadata(item, namespaced=True)
    spec = _map(item, "spec", where="")
    status = _map(item, "status", where="")
    gpus, port_tuple = _containers(spec, shared) if parts is None else parts.containers(spec)
    init_gpus = 0
    for i, container in enumerate(_list(spec, "initContainers", where="spec.")):
        where = f"spec.initContainers[{i}]."
        if not isinstance(container, dict):
            raise ManifestError(where[:-1], f"expected a mapping, got {_type(container)}")
        init_gpus = max(init_gpus, _container_gpus(container, where))
    phase_text = status.get("phase", "Pending")
    phase = _PHASES.get(phase_text) if isinstance(phase_text, str) else None
    if phase is None:
        raise ManifestError("status.phase", f"unknown pod phase {phase_text!r}")
    node_name = _opt_str(spec, "nodeName", where="spec.") or None
    service_account = (
        _opt_str(spec, "serviceAccountName", where="spec.")
        or _opt_str(spec, "serviceAccount", where="spec.")
        or "default"
    )
    return Pod(
        namespace=namespace,
        name=name,
        labels=dict(_labels(meta)),  # a fresh dict beside the Pod: better locality
        node_name=node_name,
        phase=phase,
        gpu_request=max(gpus, init_gpus),
        ports=port_tuple,
        service_account=service_account,
        owners=_owners(meta) if parts is None else parts.owners(meta),
    )


def parse_owned_object(item: Mapping[str, Any], kind: str) -> OwnedObject:
    meta, namespace, name = metadata(item, namespaced=True)
    return OwnedObject(kind=kind, namespace=namespace, name=name, owners=_owners(meta),
                       ownership=ownership_of(item))


def _parent(item: Mapping[str, Any], path: tuple[str, ...]) -> tuple[Mapping[str, Any], str]:
    """The mapping holding the last key of `path` (each step checked to be a mapping), and the
    dotted prefix naming it in errors (`spec.runPolicy.`)."""
    node, where = item, ""
    for step in path[:-1]:
        node = _map(node, step, where=where)
        where = f"{where}{step}."
    return node, where


def parse_training_job(item: Mapping[str, Any], kind: JobKind) -> TrainingJobObject:
    """A training job object, its suspend and managedBy read where its kind's descriptor says."""
    found = workload(kind)
    meta, namespace, name = metadata(item, namespaced=True)
    suspension = found.suspension
    suspend_in, suspend_at = _parent(item, suspension.suspend)
    manager_in, manager_at = _parent(item, suspension.managed_by)
    status = _map(item, "status", where="")
    finished = False
    for i, cond in enumerate(_list(status, "conditions", where="status.")):
        where = f"status.conditions[{i}]."
        if not isinstance(cond, dict):
            raise ManifestError(where[:-1], f"expected a mapping, got {_type(cond)}")
        kind_of = _opt_str(cond, "type", where=where)
        if kind_of in found.conditions.finished and cond.get("status") == "True":
            finished = True
    gang: tuple[str, ...] = ()
    outside: frozenset[str] = frozenset()
    ports: dict[str, int] = {}
    if found.templates.layout is TemplateLayout.REPLICATED_JOBS and found.materialised is None:
        templates = found.templates.templates(item)
        gang = tuple(t.replica for t in templates if t.in_gang)
        outside = frozenset(t.replica for t in templates if not t.in_gang)
        for t in templates:
            port = env_port(t.template, found.coordinator.port_env)
            if t.in_gang and port is not None:
                ports[t.replica] = port
    gang_templates = found.templates.gang_templates(item)
    topology = {t.replica: request for t in gang_templates
                if (request := pod_set_topology(t)).requested or request.group is not None}  # fmt: skip
    return TrainingJobObject(
        kind=kind,
        namespace=namespace,
        name=name,
        api_version=str(item.get("apiVersion", "")),
        labels=_labels(meta),
        suspend=_bool(suspend_in, suspension.suspend[-1], where=suspend_at),
        managed_by=_opt_str(manager_in, suspension.managed_by[-1], where=manager_at),
        finished=finished,
        owners=_owners(meta),
        gang=gang,
        outside=outside,
        coordinator=_declared_coordinator(item, found),
        ports=ports,
        topology=topology,
        pod_sets=tuple(t.replica for t in gang_templates),
        pod_counts={t.replica: t.count for t in gang_templates if t.count is not None},
        ownership=ownership_of(item),
    )


def pod_set_topology(template: PodTemplate) -> PodSetTopology:
    """The Topology Aware Scheduling request a pod template's annotations carry (Kueue's
    `podset-required-topology`, `-preferred-topology`, `-unconstrained-topology`,
    `podset-group-name`); annotations that are not strings are `ManifestError`s."""
    meta = template.template.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping):
        return PodSetTopology()
    where = ".".join(str(p) for p in template.path) + ".metadata.annotations."

    def text(key: str) -> str | None:
        value = annotations.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise ManifestError(f"{where}{key}", f"expected a string, got {_type(value)}")
        return value or None

    return PodSetTopology(
        required=text(KUEUE.topology_annotation),
        preferred=text(KUEUE.preferred_annotation),
        unconstrained=(text(KUEUE.unconstrained_annotation) or "").lower() == "true",
        group=text(KUEUE.group_annotation),
    )


def _declared_coordinator(item: Mapping[str, Any], found: WorkloadKind) -> DeclaredCoordinator | None:
    """The coordinator the object names where its kind's descriptor says (JobSet
    `spec.coordinator{replicatedJob, jobIndex, podIndex}`), None when it names none."""
    path = found.coordinator.declared
    if path is None:
        return None
    value = dig(item, path)
    where = ".".join(path)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ManifestError(where, f"expected a mapping, got {_type(value)}")
    indexes = []
    for key in ("jobIndex", "podIndex"):
        raw = value.get(key, 0)
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            raise ManifestError(f"{where}.{key}", f"expected a non-negative integer, got {raw!r}")
        indexes.append(raw)
    replica = _req_str(value, "replicatedJob", where=f"{where}.")
    return DeclaredCoordinator(replica, indexes[0], indexes[1])
