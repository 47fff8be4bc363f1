"""What the Kubeflow Trainer (v2) builds for a TrainJob: the JobSet, and for MPI the hostfile
ConfigMap and SSH Secret.

Called by the twin's Trainer controller (`operator_trainjob`) and its admission hook. Pure: the
TrainJob and its (Cluster)TrainingRuntime in, objects out. It follows kubeflow/trainer:
- the runtime's `template` (a JobSet template) is the base; the JobSet has the TrainJob's name
  and namespace and a controller ownerReference to it; its labels and annotations are the
  template's, then (v2.1) the TrainJob's `spec.labels` / `spec.annotations`, or (v2.2+) each
  runtime patch's `trainingRuntimeSpec.template.metadata`, in order;
- overrides, by release: v2.1 `podTemplateOverrides` (each a strategic merge patch of the
  targeted replicated jobs' pod templates, in order); v2.2+ `runtimePatches` (each entry's
  `trainingRuntimeSpec.template.spec` strategically merged into the JobSet spec, in list order,
  replicated jobs by name, the runtime's order kept);
- the replicated job labelled `trainer.kubeflow.org/trainjob-ancestor-step: trainer` is the
  trainer: `replicas` 1, `parallelism` = `completions` = its node count (the runtime's
  `mlPolicy.numNodes`, then the TrainJob's `trainer.numNodes`; for MPI the `node` job counts
  the nodes), the `node` container gets the TrainJob's image, command, args, env and
  `resourcesPerNode` (strategically merged into its resources);
- torch: env `PET_NNODES`, `PET_NPROC_PER_NODE` (the TrainJob's, else `auto`, or the CPU count
  when the nodes have no GPU), `PET_NODE_RANK` (from the completion-index annotation),
  `PET_MASTER_ADDR=<trainjob>-node-0-0.<trainjob>`, `PET_MASTER_PORT=29500`, and container
  port 29500 on the trainer container;
- MPI (OpenMPI): Secret `<trainjob>-mpi-ssh-auth` mounted in the node and launcher containers at
  `sshAuthMountPath`, ConfigMap `<trainjob>-mpi-hostfile` (`<trainjob>-node-0-<i>.<trainjob>
  slots=<numProcPerNode>` per node) mounted at /etc/mpi on the launcher, whose env points at
  it (`OMPI_MCA_orte_default_hostfile`, ...);
- initializers (`dataset-initializer`, `model-initializer`): `replicas` 1, `STORAGE_URI` and the
  TrainJob's env;
- `spec.suspend` is the TrainJob's.
It does not talk to the store and does not decide when to build.
"""

from __future__ import annotations

import base64
import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.twin import patch as patching
from agent.twin.crds import TrainerRelease

Obj = dict[str, Any]

API_VERSION = "trainer.kubeflow.org/v1alpha1"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER = "trainer"
DATASET_INITIALIZER = "dataset-initializer"
MODEL_INITIALIZER = "model-initializer"
INITIALIZERS = (DATASET_INITIALIZER, MODEL_INITIALIZER)
NODE = "node"
LAUNCHER = "launcher"
TRAINER_PORT = 29500
COMPLETION_INDEX_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
TORCH_RESERVED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                      "PET_MASTER_PORT")  # fmt: skip
MPI_RESERVED_ENV = ("OMPI_MCA_orte_default_hostfile", "OMPI_MCA_plm_rsh_args",
                    "OMPI_MCA_orte_keep_fqdn_hostnames", "OMPI_MCA_orte_set_default_slots")  # fmt: skip
HOSTFILE_DIR = "/etc/mpi"
# The JobSet spec's strategic merge keys (replicated jobs and their dependencies by name) on top
# of the pod spec's.
JOBSET_MERGE_KEYS = {**patching.BUILTIN_MERGE_KEYS, "replicatedJobs": "name", "dependsOn": "name",
                     "schedulingGates": "name"}  # fmt: skip


class BuildError(ValueError):
    """The TrainJob cannot be built from its runtime (the controller records it as an Event)."""


@dataclass(frozen=True)
class Built:
    """The objects the Trainer applies for one TrainJob."""

    jobset: Obj
    extra: tuple[Obj, ...] = field(default=())


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = obj.get("metadata") or {}
    return found


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = obj.get("spec") or {}
    return found


def runtime_ref(trainjob: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of the runtime the TrainJob references (ClusterTrainingRuntime by default)."""
    ref = _spec(trainjob).get("runtimeRef") or {}
    return str(ref.get("kind") or "ClusterTrainingRuntime"), str(ref.get("name") or "")


def ml_policy(runtime: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = _spec(runtime).get("mlPolicy") or {}
    return found


def is_suspended(trainjob: Mapping[str, Any]) -> bool:
    return bool(_spec(trainjob).get("suspend"))


def owner_reference(trainjob: Mapping[str, Any]) -> Obj:
    return {"apiVersion": API_VERSION, "kind": "TrainJob", "name": _meta(trainjob).get("name"),
            "uid": _meta(trainjob).get("uid"), "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def ancestor(rjob: Mapping[str, Any]) -> str:
    labels = ((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}
    return str(labels.get(ANCESTOR, ""))


# --- overrides ------------------------------------------------------------------------------


def merge_runtime_patches(spec: Mapping[str, Any], patches: Sequence[Mapping[str, Any]]) -> Obj:
    """v2.2+: each runtime patch's JobSet spec strategically merged in list order; replicated
    jobs keep the runtime's order."""
    order = [str(r.get("name")) for r in spec.get("replicatedJobs") or []]
    merged: Obj = copy.deepcopy(dict(spec))
    for entry in patches:
        body = (((entry.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec"))
        if isinstance(body, Mapping):
            merged = patching.strategic_merge(merged, dict(body), keys=JOBSET_MERGE_KEYS)
    rank = {name: i for i, name in enumerate(order)}
    merged["replicatedJobs"] = sorted(merged.get("replicatedJobs") or [],
                                      key=lambda r: rank.get(str(r.get("name")), len(rank)))
    return merged


def merge_pod_template_overrides(
    spec: Mapping[str, Any], overrides: Sequence[Mapping[str, Any]]
) -> Obj:
    """v2.1: each override strategically merged into the pod template of the jobs it targets."""
    merged: Obj = copy.deepcopy(dict(spec))
    for override in overrides:
        targets = {str(t.get("name")) for t in override.get("targetJobs") or []}
        body: Obj = {}
        metadata = override.get("metadata") or {}
        picked = {k: metadata[k] for k in ("labels", "annotations") if metadata.get(k)}
        if picked:
            body["metadata"] = picked
        if override.get("spec"):
            body["spec"] = override["spec"]
        for rjob in merged.get("replicatedJobs") or []:
            if rjob.get("name") not in targets:
                continue
            job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
            job_spec["template"] = patching.strategic_merge(job_spec.get("template") or {}, body,
                                                            keys=JOBSET_MERGE_KEYS)
    return merged


def propagated_metadata(
    trainjob: Mapping[str, Any], runtime: Mapping[str, Any], release: TrainerRelease
) -> tuple[dict[str, str], dict[str, str]]:
    """The JobSet's labels and annotations: the runtime template's, then the TrainJob's."""
    tmeta = (_spec(runtime).get("template") or {}).get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    annotations = dict(tmeta.get("annotations") or {})
    if release.runtime_patches:
        for entry in _spec(trainjob).get("runtimePatches") or []:
            pmeta = (((entry.get("trainingRuntimeSpec") or {}).get("template") or {})
                     .get("metadata") or {})  # fmt: skip
            labels.update(pmeta.get("labels") or {})
            annotations.update(pmeta.get("annotations") or {})
    else:
        labels.update(_spec(trainjob).get("labels") or {})
        annotations.update(_spec(trainjob).get("annotations") or {})
    return labels, annotations


# --- env and containers ---------------------------------------------------------------------


def _upsert(items: list[Obj], item: Obj, key: str) -> None:
    for i, existing in enumerate(items):
        if existing.get(key) == item.get(key):
            items[i] = item
            return
    items.append(item)


def _upsert_env(container: Obj, env: Sequence[Mapping[str, Any]]) -> None:
    current: list[Obj] = container.setdefault("env", [])
    for item in env:
        _upsert(current, dict(item), "name")


def _containers(rjob: Obj) -> list[Obj]:
    job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
    pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
    found: list[Obj] = pod_spec.setdefault("containers", [])
    return found


def _pod_spec(rjob: Obj) -> Obj:
    found: Obj = rjob.setdefault("template", {}).setdefault("spec", {}).setdefault(
        "template", {}).setdefault("spec", {})
    return found


def _container(rjob: Obj, name: str) -> Obj | None:
    return next((c for c in _containers(rjob) if c.get("name") == name), None)


def _quantity(value: Any) -> float:
    text = str(value)
    try:
        if text.endswith("m"):
            return float(text[:-1]) / 1000
        return float(text)
    except ValueError:
        return 0.0


def gpus(resources: Mapping[str, Any]) -> int:
    """GPUs per node in resource requirements (requests, else limits), as the Trainer counts."""
    for kind in ("requests", "limits"):
        for name, value in (resources.get(kind) or {}).items():
            if "gpu" in str(name).lower() and _quantity(value) > 0:
                return int(_quantity(value))
    return 0


def _cpus(resources: Mapping[str, Any]) -> int:
    requested = (resources.get("requests") or {}).get("cpu")
    if requested is not None and _quantity(requested) > 0:
        return int(_quantity(requested))
    limit = (resources.get("limits") or {}).get("cpu")
    return int(_quantity(limit)) if limit is not None else 0


def _torch_env(trainjob: Mapping[str, Any], nodes: int, resources: Mapping[str, Any]) -> list[Obj]:
    name = str(_meta(trainjob).get("name"))
    per_node = (_spec(trainjob).get("trainer") or {}).get("numProcPerNode")
    if per_node is not None:
        nproc = str(per_node)
    elif gpus(resources) == 0:
        nproc = str(max(1, _cpus(resources)))
    else:
        nproc = "auto"
    return [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": nproc},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_PATH}}},
        {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
    ]


def _add_port(container: Obj, port: int) -> None:
    ports: list[Obj] = container.setdefault("ports", [])
    if not any(p.get("containerPort") == port for p in ports):
        ports.append({"containerPort": port, "protocol": "TCP"})


def _volume(pod_spec: Obj, volume: Obj) -> None:
    _upsert(pod_spec.setdefault("volumes", []), volume, "name")


def _mount(container: Obj, name: str, path: str) -> None:
    _upsert(container.setdefault("volumeMounts", []), {"name": name, "mountPath": path},
            "mountPath")


def _merge_resources(base: Mapping[str, Any], override: Mapping[str, Any]) -> Obj:
    merged: Obj = patching.strategic_merge(dict(base), dict(override))
    return merged


# --- the build ------------------------------------------------------------------------------


def node_count(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> int:
    """The training nodes: the TrainJob's `trainer.numNodes`, else the runtime's policy's."""
    wanted = (_spec(trainjob).get("trainer") or {}).get("numNodes")
    if wanted is None:
        wanted = ml_policy(runtime).get("numNodes", 1)
    return int(wanted)


def build(
    trainjob: Mapping[str, Any], runtime: Mapping[str, Any], release: TrainerRelease
) -> Built:
    """The JobSet (and MPI's ConfigMap and Secret) for a TrainJob and its runtime."""
    name = str(_meta(trainjob).get("name"))
    namespace = str(_meta(trainjob).get("namespace") or "default")
    template = _spec(runtime).get("template") or {}
    spec: Obj = copy.deepcopy(dict(template.get("spec") or {}))
    if release.runtime_patches:
        spec = merge_runtime_patches(spec, _spec(trainjob).get("runtimePatches") or [])
    else:
        spec = merge_pod_template_overrides(spec, _spec(trainjob).get("podTemplateOverrides") or [])
    policy = ml_policy(runtime)
    mpi = policy.get("mpi")
    torch = "torch" in policy
    trainer = _spec(trainjob).get("trainer")
    nodes = node_count(trainjob, runtime)
    launcher_as_node = isinstance(mpi, Mapping) and bool(mpi.get("runLauncherAsNode"))
    extra: list[Obj] = []
    rjobs: list[Obj] = spec.get("replicatedJobs") or []
    if not rjobs:
        raise BuildError(f"runtime {_meta(runtime).get('name')!r} has no replicated jobs")
    subdomain = str((spec.get("network") or {}).get("subdomain") or name)
    for rjob in rjobs:
        step = ancestor(rjob)
        rname = str(rjob.get("name"))
        job_spec: Obj = rjob.setdefault("template", {}).setdefault("spec", {})
        count = int(job_spec.get("parallelism", 1))
        if step == TRAINER and policy:
            count = int(policy.get("numNodes", 1))
        if torch and step == TRAINER:
            count = nodes
        wanted = trainer.get("numNodes") if isinstance(trainer, Mapping) else None
        if isinstance(mpi, Mapping) and rname == NODE and wanted is not None:
            count = max(int(wanted) - 1, 1) if launcher_as_node else int(wanted)
        if step in (TRAINER, *INITIALIZERS):
            rjob["replicas"] = 1
        job_spec["parallelism"] = count
        job_spec["completions"] = count
        node = _container(rjob, NODE)
        if node is not None and isinstance(trainer, Mapping) and (
            step == TRAINER or (launcher_as_node and rname == NODE)
        ):
            if step == TRAINER:
                for key in ("image", "command", "args"):
                    if trainer.get(key) is not None:
                        node[key] = copy.deepcopy(trainer[key])
            if trainer.get("resourcesPerNode"):
                node["resources"] = _merge_resources(node.get("resources") or {},
                                                     trainer["resourcesPerNode"])
            _upsert_env(node, trainer.get("env") or [])
            if torch and step == TRAINER:
                _upsert_env(node, _torch_env(trainjob, count, node.get("resources") or {}))
                _add_port(node, TRAINER_PORT)
        if step in INITIALIZERS:
            source = (_spec(trainjob).get("initializer") or {}).get(
                "dataset" if step == DATASET_INITIALIZER else "model")
            init = _container(rjob, step)
            if init is not None and isinstance(source, Mapping):
                if source.get("storageUri") is not None:
                    _upsert_env(init, [{"name": "STORAGE_URI", "value": source["storageUri"]}])
                _upsert_env(init, source.get("env") or [])
    if isinstance(mpi, Mapping):
        extra.extend(_mpi(trainjob, rjobs, mpi=mpi, subdomain=subdomain))
    labels, annotations = propagated_metadata(trainjob, runtime, release)
    spec["suspend"] = is_suspended(trainjob)
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels,
                     "annotations": annotations, "ownerReferences": [owner_reference(trainjob)]},
        "spec": spec,
    }  # fmt: skip
    return Built(jobset, tuple(extra))


def _mpi(trainjob: Mapping[str, Any], rjobs: list[Obj], *, mpi: Mapping[str, Any],
         subdomain: str) -> list[Obj]:  # fmt: skip
    name = str(_meta(trainjob).get("name"))
    namespace = str(_meta(trainjob).get("namespace") or "default")
    launcher_as_node = bool(mpi.get("runLauncherAsNode"))
    per_node = (_spec(trainjob).get("trainer") or {}).get("numProcPerNode")
    slots = int(per_node if per_node is not None else mpi.get("numProcPerNode", 1))
    mount = str(mpi.get("sshAuthMountPath") or "/root/.ssh")
    secret = f"{name}-mpi-ssh-auth"
    hostfile = f"{name}-mpi-hostfile"
    lines: list[str] = []
    for rjob in rjobs:
        rname = str(rjob.get("name"))
        if rname not in (NODE, LAUNCHER):
            continue
        pod_spec = _pod_spec(rjob)
        _volume(pod_spec, {"name": "mpi-ssh-auth", "secret": {"secretName": secret,
                                                              "defaultMode": 0o400}})
        if rname == LAUNCHER:
            _volume(pod_spec, {"name": "mpi-hostfile", "configMap": {
                "name": hostfile, "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}]}})
        container = _container(rjob, NODE)
        if container is not None:
            _mount(container, "mpi-ssh-auth", mount)
            if rname == LAUNCHER:
                _mount(container, "mpi-hostfile", HOSTFILE_DIR)
                _upsert_env(container, [
                    {"name": "OMPI_MCA_orte_default_hostfile", "value": f"{HOSTFILE_DIR}/hostfile"},
                    {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                    {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slots)},
                    {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
                ])  # fmt: skip
        if rname == NODE or (launcher_as_node and rname == LAUNCHER):
            count = int(((rjob.get("template") or {}).get("spec") or {}).get("parallelism", 1))
            lines.extend(f"{name}-{rname}-0-{i}.{subdomain} slots={slots}" for i in range(count))
    owner = [owner_reference(trainjob)]
    key = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()
    return [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": hostfile, "namespace": namespace, "ownerReferences": owner},
         "data": {"hostfile": "".join(f"{line}\n" for line in lines)}},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/ssh-auth", "immutable": True,
         "metadata": {"name": secret, "namespace": namespace, "ownerReferences": owner},
         # a stand-in key pair (the Trainer generates an ECDSA P-521 key); nothing reads it
         "data": {"ssh-privatekey": _b64(f"twin-private-key-{key[:16]}"),
                  "ssh-publickey": _b64(f"ecdsa-sha2-nistp521 twin-{key[16:32]}")}},
    ]  # fmt: skip


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def replicated_job_names(runtime: Mapping[str, Any]) -> dict[str, set[str]]:
    """Replicated job name -> its containers' and init containers' names, in the runtime."""
    out: dict[str, set[str]] = {}
    for rjob in (_spec(runtime).get("template") or {}).get("spec", {}).get("replicatedJobs") or []:
        pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get(
            "spec") or {}
        out[str(rjob.get("name"))] = {str(c.get("name")) for c in
                                      [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]}
    return out
