"""Twin scenarios: YAML files (zones, nodes, taints, namespaces, policies, jobs, model parameters).

Called by `cluster.TwinCluster` (to seed the store) and by `zonemedic twin up --scenario NAME`.
`load_scenario(name)` reads `agent/twin/scenarios/<name>.yaml` or a path, or generates a large
cluster for `generated:nodes=100,zones=3,jobs=10,workers=4,policies=3,seed=1`. Pure apart from
reading the file: it returns plain Kubernetes objects and model settings and creates nothing.

A scenario file holds:
- `name`, `description`, `seed` (the scheduler's tie-break seed);
- `trainer_release`: the Kubeflow Trainer release the twin serves (v2.1, v2.2 or v2.3, the
  default): its TrainJob CRD (v2.1 `podTemplateOverrides`, v2.2+ `runtimePatches`) and webhooks;
- `model`: `pod_start_seconds`, `pod_stop_seconds`, `intra_zone` / `inter_zone`
  (`{rtt_ms, gbps}`), `training` (`compute_seconds`, `gradient_bytes`, `connect_attempts`,
  `connect_retry_seconds`), `pod_zone_label` (a label the twin stamps with the node's zone when a
  pod starts), `utilization_jitter`, `crash_backoff_seconds`, `crash_backoff_max_seconds`;
- `nodes`: groups `{name: "gpu-a-{i}", count, zone, region, cpu, memory, gpus, gpu_model, taints,
  labels}`;
- `namespaces`: `{name, labels}`;
- `objects`: any Kubernetes objects the twin serves (policies, training jobs, ...), created in order;
- `groups`: generic training groups that are not Kubeflow jobs (groups.py: `name`, `namespace`,
  `selector`, `coordinator`, `workers`, `ports`, the keys of the agent's `diagnosis.groups`);
- `kueue`: `true` (or `{frameworks: [kubeflow.org/pytorchjob, batch/job, ...]}`, the integrations
  it manages; default all the twin has) to run Kueue (kueue.py): its kinds are served and its
  webhooks suspend queued jobs. Kueue objects (ResourceFlavor, Topology, ClusterQueue,
  LocalQueue) go in `objects`, before the jobs.
Jobs may carry the annotations `twin.zonemedic.io/compute-seconds`, `.../gradient-bytes` and
`.../steps` (succeed after that many training steps).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from agent.errors import InputError
from agent.twin.crds import DEFAULT_RELEASE, TrainerRelease
from agent.twin.groups import GroupError, TrainingGroup, parse_groups
from agent.twin.kueue_jobs import FRAMEWORKS
from agent.twin.scenario_registry import GENERATED_PREFIX, scenario_names
from agent.twin.training import Link, TrainingParams, ZoneModel

Obj = dict[str, Any]
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
DEFAULT_GPU_MODEL = "NVIDIA A100-SXM4-80GB"
GPU_MODEL_ANNOTATION = "twin.zonemedic.io/gpu-model"


class ScenarioError(InputError):
    """A scenario name or file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class ModelSettings:
    """Timings and network/training parameters of the twin (model seconds; `--speed` scales)."""

    pod_start_seconds: float = 2.0
    pod_stop_seconds: float = 1.0  # from deletionTimestamp until the containers have exited
    zones: ZoneModel = field(default_factory=ZoneModel)
    training: TrainingParams = field(default_factory=TrainingParams)
    pod_zone_label: str | None = None  # a label the twin stamps with the node's zone at start
    utilization_jitter: float = 0.01  # +- fraction added per sample
    crash_backoff_seconds: float = 10.0
    crash_backoff_max_seconds: float = 300.0
    drop_event_interval: float = 120.0  # Cilium's drop event emitter: one Event per interval


@dataclass(frozen=True)
class KueueSettings:
    """Kueue runs in the twin; `frameworks` are the integrations it manages."""

    frameworks: tuple[str, ...] = FRAMEWORKS


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    seed: int
    model: ModelSettings
    nodes: list[Obj]
    namespaces: list[Obj]
    objects: list[Obj]
    groups: list[TrainingGroup] = field(default_factory=list)
    trainer_release: TrainerRelease = DEFAULT_RELEASE
    kueue: KueueSettings | None = None
    gitops: GitOpsSettings | None = None


@dataclass(frozen=True)
class GitOpsSettings:
    """A simulated GitOps sync (`agent.twin.gitops_sync`): the objects whose
    `argocd.argoproj.io/instance` label names `application`, applied again every
    `interval_seconds` (model seconds)."""

    application: str
    interval_seconds: float


def _fail(where: str, message: str) -> ScenarioError:
    return ScenarioError(f"{where}: {message}")


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(where, f"expected a mapping, got {type(value).__name__}")
    return value


def _number(data: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(f"{where}.{key}", f"expected a number, got {value!r}")
    if value < 0:
        raise _fail(f"{where}.{key}", f"must not be negative, got {value!r}")
    return float(value)


def _link(data: object, default: Link, where: str) -> Link:
    raw = _mapping(data, where)
    rtt_ms = _number(raw, "rtt_ms", default.rtt_seconds * 1000, where)
    gbps = _number(raw, "gbps", default.bandwidth_bytes_per_second * 8 / 1e9, where)
    if gbps == 0:
        raise _fail(f"{where}.gbps", "must be positive")
    return Link(rtt_ms / 1000, gbps * 1e9 / 8)


_MODEL_KEYS = {
    "pod_start_seconds", "pod_stop_seconds", "intra_zone", "inter_zone", "training", "pod_zone_label",
    "utilization_jitter", "crash_backoff_seconds", "crash_backoff_max_seconds",
    "drop_event_interval",
}  # fmt: skip
_TRAINING_KEYS = {"compute_seconds", "gradient_bytes", "connect_attempts", "connect_retry_seconds"}


def parse_model(data: object, where: str = "model") -> ModelSettings:
    raw = _mapping(data, where)
    unknown = sorted(set(raw) - _MODEL_KEYS)
    if unknown:
        raise _fail(
            f"{where}.{unknown[0]}", f"unknown key (known: {', '.join(sorted(_MODEL_KEYS))})"
        )
    base = ModelSettings()
    tr = _mapping(raw.get("training"), f"{where}.training")
    bad = sorted(set(tr) - _TRAINING_KEYS)
    if bad:
        raise _fail(f"{where}.training.{bad[0]}", "unknown key")
    t0 = TrainingParams()
    training = TrainingParams(
        compute_seconds=_number(tr, "compute_seconds", t0.compute_seconds, f"{where}.training"),
        gradient_bytes=_number(tr, "gradient_bytes", t0.gradient_bytes, f"{where}.training"),
        connect_attempts=max(
            1, int(_number(tr, "connect_attempts", t0.connect_attempts, f"{where}.training"))
        ),
        connect_retry_seconds=_number(
            tr, "connect_retry_seconds", t0.connect_retry_seconds, f"{where}.training"
        ),
    )
    label = raw.get("pod_zone_label")
    if label is not None and not isinstance(label, str):
        raise _fail(f"{where}.pod_zone_label", f"expected a label key, got {label!r}")
    return ModelSettings(
        pod_start_seconds=_number(raw, "pod_start_seconds", base.pod_start_seconds, where),
        pod_stop_seconds=_number(raw, "pod_stop_seconds", base.pod_stop_seconds, where),
        zones=ZoneModel(
            intra=_link(raw.get("intra_zone"), base.zones.intra, f"{where}.intra_zone"),
            inter=_link(raw.get("inter_zone"), base.zones.inter, f"{where}.inter_zone"),
        ),
        training=training,
        pod_zone_label=label or None,
        utilization_jitter=_number(raw, "utilization_jitter", base.utilization_jitter, where),
        crash_backoff_seconds=_number(
            raw, "crash_backoff_seconds", base.crash_backoff_seconds, where
        ),
        crash_backoff_max_seconds=_number(
            raw, "crash_backoff_max_seconds", base.crash_backoff_max_seconds, where
        ),
        drop_event_interval=_number(raw, "drop_event_interval", base.drop_event_interval, where),
    )


def make_node(
    name: str,
    *,
    zone: str,
    region: str = "region-1",
    cpu: str = "32",
    memory: str = "128Gi",
    gpus: int = 0,
    gpu_model: str = DEFAULT_GPU_MODEL,
    taints: list[Obj] | None = None,
    labels: Mapping[str, str] | None = None,
    address: str = "10.0.0.1",
) -> Obj:
    """A Ready node object as kubelet would register it."""
    all_labels = {
        HOSTNAME_LABEL: name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        ZONE_LABEL: zone,
        REGION_LABEL: region,
    }
    capacity: Obj = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "500Gi"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
        all_labels[GPU_PRODUCT_LABEL] = gpu_model.replace(" ", "-")
        all_labels["nvidia.com/gpu.count"] = str(gpus)
    all_labels.update(labels or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": all_labels,
            "annotations": {GPU_MODEL_ANNOTATION: gpu_model} if gpus else {},
        },
        "spec": {"taints": list(taints or []), "providerID": f"twin://{zone}/{name}"},
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status"},
            ],
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.machine").hex,
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.system")),
                "bootID": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.boot")),
                "kernelVersion": "6.1.0-twin",
                "osImage": "Twin Linux 1.0",
                "containerRuntimeVersion": "containerd://1.7.0",
                "kubeletVersion": "v1.32.0",
                "kubeProxyVersion": "v1.32.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }  # fmt: skip


_NODE_KEYS = {
    "name",
    "count",
    "zone",
    "region",
    "cpu",
    "memory",
    "gpus",
    "gpu_model",
    "taints",
    "labels",
}


def _nodes(groups: object, where: str) -> list[Obj]:
    if not isinstance(groups, list):
        raise _fail(where, "expected a list of node groups")
    out: list[Obj] = []
    for gi, group in enumerate(groups):
        at = f"{where}[{gi}]"
        g = _mapping(group, at)
        unknown = sorted(set(g) - _NODE_KEYS)
        if unknown:
            raise _fail(
                f"{at}.{unknown[0]}", f"unknown key (known: {', '.join(sorted(_NODE_KEYS))})"
            )
        if not isinstance(g.get("name"), str) or not isinstance(g.get("zone"), str):
            raise _fail(at, "a node group needs a name (with {i} when count > 1) and a zone")
        count = int(_number(g, "count", 1, at))
        for i in range(count):
            name = str(g["name"]).replace("{i}", str(i))
            out.append(
                make_node(
                    name,
                    zone=str(g["zone"]),
                    region=str(g.get("region", "region-1")),
                    cpu=str(g.get("cpu", "32")),
                    memory=str(g.get("memory", "128Gi")),
                    gpus=int(_number(g, "gpus", 0, at)),
                    gpu_model=str(g.get("gpu_model", DEFAULT_GPU_MODEL)),
                    taints=list(g.get("taints") or []),
                    labels=dict(g.get("labels") or {}),
                    address=f"10.{len(out) // 250}.{len(out) % 250}.{10 + len(out) % 200}",
                )
            )
    names = [n["metadata"]["name"] for n in out]
    if len(set(names)) != len(names):
        raise _fail(where, "node names repeat (use {i} in the name of a group with count > 1)")
    return out


def _namespaces(items: object, where: str) -> list[Obj]:
    out = []
    for i, item in enumerate(items or []) if isinstance(items, list) else []:
        ns = _mapping(item, f"{where}[{i}]")
        if not isinstance(ns.get("name"), str):
            raise _fail(f"{where}[{i}].name", "a namespace needs a name")
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": ns["name"],
                    "labels": {
                        "kubernetes.io/metadata.name": ns["name"],
                        **(ns.get("labels") or {}),
                    },
                },
            }
        )
    if items is not None and not isinstance(items, list):
        raise _fail(where, "expected a list of namespaces")
    return out


def parse_kueue(data: object, where: str) -> KueueSettings | None:
    if data is None or data is False:
        return None
    if data is True:
        return KueueSettings()
    raw = _mapping(data, where)
    unknown = sorted(set(raw) - {"frameworks"})
    if unknown:
        raise _fail(f"{where}.{unknown[0]}", "unknown key (known: frameworks)")
    frameworks = raw.get("frameworks", list(FRAMEWORKS))
    if not isinstance(frameworks, list) or not all(isinstance(f, str) for f in frameworks):
        raise _fail(f"{where}.frameworks", "expected a list of integration names")
    bad = [f for f in frameworks if f not in FRAMEWORKS]
    if bad:
        raise _fail(f"{where}.frameworks",
                    f"unknown integration {bad[0]!r} (known: {', '.join(FRAMEWORKS)})")
    return KueueSettings(tuple(frameworks))


def parse_gitops(data: object, where: str) -> GitOpsSettings | None:
    if data is None:
        return None
    raw = _mapping(data, where)
    unknown = sorted(set(raw) - {"application", "interval_seconds"})
    if unknown:
        raise _fail(f"{where}.{unknown[0]}", "unknown key (known: application, interval_seconds)")
    application = raw.get("application")
    if not isinstance(application, str) or not application:
        raise _fail(f"{where}.application", "expected the Argo CD application's name")
    interval = _number(raw, "interval_seconds", 120, where)
    if interval <= 0:
        raise _fail(f"{where}.interval_seconds", "must be positive")
    return GitOpsSettings(application, interval)


def parse_scenario(data: object, *, name: str, where: str) -> Scenario:
    raw = _mapping(data, where)
    known = {"name", "description", "seed", "model", "nodes", "namespaces", "objects", "groups",
             "trainer_release", "kueue", "gitops"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise _fail(f"{where}: {unknown[0]}", f"unknown key (known: {', '.join(sorted(known))})")
    objects = raw.get("objects") or []
    if not isinstance(objects, list):
        raise _fail(f"{where}: objects", "expected a list of Kubernetes objects")
    for i, obj in enumerate(objects):
        o = _mapping(obj, f"{where}: objects[{i}]")
        if (
            not o.get("apiVersion")
            or not o.get("kind")
            or not (o.get("metadata") or {}).get("name")
        ):
            raise _fail(f"{where}: objects[{i}]", "needs apiVersion, kind and metadata.name")
    try:
        groups = parse_groups(raw.get("groups"), f"{where}: groups")
    except GroupError as exc:
        raise ScenarioError(str(exc)) from exc
    release = raw.get("trainer_release", DEFAULT_RELEASE.value)
    if release not in {r.value for r in TrainerRelease}:
        known_releases = ", ".join(r.value for r in TrainerRelease)
        raise _fail(f"{where}: trainer_release",
                    f"unknown Kubeflow Trainer release {release!r} (known: {known_releases})")
    return Scenario(
        name=str(raw.get("name", name)),
        description=str(raw.get("description", "")),
        seed=int(_number(raw, "seed", 1, where)),
        model=parse_model(raw.get("model"), f"{where}: model"),
        nodes=_nodes(raw.get("nodes") or [], f"{where}: nodes"),
        namespaces=_namespaces(raw.get("namespaces"), f"{where}: namespaces"),
        objects=[dict(o) for o in objects],
        groups=groups,
        trainer_release=TrainerRelease(release),
        kueue=parse_kueue(raw.get("kueue"), f"{where}: kueue"),
        gitops=parse_gitops(raw.get("gitops"), f"{where}: gitops"),
    )


def load_scenario(name: str) -> Scenario:
    """A packaged scenario by name, a YAML file by path, or `generated:key=value,...`."""
    if name == GENERATED_PREFIX or name.startswith(GENERATED_PREFIX + ":"):
        return generate_from_spec(name.partition(":")[2])
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        text, where = path.read_text(encoding="utf-8"), str(path)
    else:
        folder = resources.files("agent.twin") / "scenarios"
        source = folder / f"{name}.yaml"
        if not source.is_file():
            known = ", ".join([*scenario_names(), GENERATED_PREFIX + ":nodes=N,..."])
            raise ScenarioError(f"unknown scenario {name!r} (known: {known})")
        text, where = source.read_text(encoding="utf-8"), f"scenarios/{name}.yaml"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{where}: invalid YAML: {exc}") from exc
    return parse_scenario(data, name=path.stem, where=where)


# --- the generator for large clusters ------------------------------------------------------------

GENERATOR_DEFAULTS = {"nodes": 100, "zones": 3, "jobs": 10, "workers": 4, "policies": 3, "seed": 1}


def generate_from_spec(spec: str) -> Scenario:
    params = dict(GENERATOR_DEFAULTS)
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in params:
            raise ScenarioError(
                f"generated scenario: bad parameter {part!r} (known: {', '.join(params)}; "
                "e.g. generated:nodes=100,zones=3,jobs=10)"
            )
        try:
            params[key] = int(value)
        except ValueError as exc:
            raise ScenarioError(
                f"generated scenario: {key} must be an integer, got {value!r}"
            ) from exc
        if params[key] < 0 or (key in ("nodes", "zones") and params[key] < 1):
            raise ScenarioError(f"generated scenario: {key} is out of range: {value}")
    return generate_scenario(**params)


def pytorch_job(
    name: str,
    namespace: str,
    *,
    workers: int,
    gpus_per_worker: int = 1,
    master_tolerates_gpu: bool = False,
    labels: Mapping[str, str] | None = None,
    zone: str | None = None,
) -> Obj:
    """A PyTorchJob with a CPU-only master and GPU workers, like the incident's; with `zone`, every
    replica is pinned there (the master tolerating the GPU taint): a co-located, healthy job."""
    gpu_toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    master_spec: Obj = {
        "containers": [
            {
                "name": "pytorch",
                "image": "registry.example.com/train:1.0",
                "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
                "resources": {"requests": {"cpu": "2", "memory": "8Gi"}},
            }
        ]
    }
    if master_tolerates_gpu:
        master_spec["tolerations"] = [gpu_toleration]
    worker_spec: Obj = {
        "containers": [
            {
                "name": "pytorch",
                "image": "registry.example.com/train:1.0",
                "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
                "resources": {
                    "requests": {
                        "cpu": "4",
                        "memory": "32Gi",
                        "nvidia.com/gpu": str(gpus_per_worker),
                    },
                    "limits": {"nvidia.com/gpu": str(gpus_per_worker)},
                },
            }
        ],
        "tolerations": [gpu_toleration],
    }
    if zone is not None:
        master_spec["tolerations"] = [gpu_toleration]
        for spec in (master_spec, worker_spec):
            spec["nodeSelector"] = {ZONE_LABEL: zone}
    template_labels = {"app": name, **(labels or {})}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runPolicy": {"suspend": False},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure",
                           "template": {"metadata": {"labels": template_labels}, "spec": master_spec}},
                "Worker": {"replicas": workers, "restartPolicy": "OnFailure",
                           "template": {"metadata": {"labels": template_labels}, "spec": worker_spec}},
            },
        },
    }  # fmt: skip


def generate_scenario(
    *, nodes: int, zones: int, jobs: int, workers: int, policies: int, seed: int
) -> Scenario:
    """A large cluster: per zone a share of GPU nodes (tainted) and CPU nodes; jobs spread over
    namespaces, every other one co-located in one zone (healthy) and the rest left to the
    scheduler (most end up split); `policies` CiliumNetworkPolicies per namespace allowing the
    job port."""
    rng = random.Random(seed)
    zone_names = [f"zone-{chr(ord('a') + i)}" if i < 26 else f"zone-{i}" for i in range(zones)]
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    node_objs = []
    for i in range(nodes):
        zone = zone_names[i % zones]
        gpu = i % 2 == 0
        node_objs.append(
            make_node(
                f"{'gpu' if gpu else 'cpu'}-{zone}-{i}",
                zone=zone,
                gpus=8 if gpu else 0,
                cpu="96" if gpu else "32",
                memory="1Ti" if gpu else "128Gi",
                taints=[gpu_taint] if gpu else [],
                address=f"10.{i // 250}.{i % 250}.{10 + i % 200}",
            )
        )
    team_count = max(1, min(jobs, 10))
    namespaces = [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": f"team-{t}", "labels": {"kubernetes.io/metadata.name": f"team-{t}", "team": str(t)}}}
        for t in range(team_count)
    ]  # fmt: skip
    objects: list[Obj] = []
    for t in range(team_count):
        for p in range(policies):
            objects.append(
                {
                    "apiVersion": "cilium.io/v2",
                    "kind": "CiliumNetworkPolicy",
                    "metadata": {"name": f"allow-training-{p}", "namespace": f"team-{t}"},
                    "spec": {
                        "endpointSelector": {"matchLabels": {"team-policy": str(p)}},
                        "ingress": [{"fromEndpoints": [{}], "toPorts": [
                            {"ports": [{"port": "23456", "protocol": "TCP"}]}]}],
                    },
                }
            )  # fmt: skip
    for j in range(jobs):
        objects.append(
            pytorch_job(
                f"train-{j}",
                f"team-{j % team_count}",
                workers=workers,
                master_tolerates_gpu=rng.random() < 0.5,
                labels={"team-policy": str(j % policies)} if policies else None,
                zone=zone_names[j % zones] if j % 2 == 0 else None,  # every other job co-located
            )
        )
    return Scenario(
        name=f"generated:nodes={nodes},zones={zones},jobs={jobs}",
        description="generated large cluster",
        seed=seed,
        model=ModelSettings(),
        nodes=node_objs,
        namespaces=namespaces,
        objects=objects,
    )
