"""What the Trainer builds for a TrainJob: the override merge rules by release (v2.1
podTemplateOverrides, v2.2+ runtimePatches), node counts, resources, the torch env, MPI files."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from agent.twin.crds import TrainerRelease
from agent.twin.trainjob_build import (
    build,
    merge_pod_template_overrides,
    merge_runtime_patches,
)

ZONE = "topology.kubernetes.io/zone"
GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _rjob(name: str, *, ancestor: str | None = None, **pod_spec: Any) -> dict[str, Any]:
    meta = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}} if ancestor else {}
    spec = {"containers": [{"name": "node", "image": "base"}], **pod_spec}
    return {"name": name, "template": {"metadata": meta, "spec": {"template": {"spec": spec}}}}


SPEC = {"replicatedJobs": [
    _rjob("dataset-initializer", ancestor="dataset-initializer"),
    _rjob("node", ancestor="trainer", nodeSelector={"pool": "gpu"}, tolerations=[GPU]),
]}  # fmt: skip


def _patch(manager: str, **pod_spec: Any) -> dict[str, Any]:
    return {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": pod_spec}}}}]}}}}  # fmt: skip


def _node_spec(spec: dict[str, Any]) -> dict[str, Any]:
    node = next(r for r in spec["replicatedJobs"] if r["name"] == "node")
    found: dict[str, Any] = node["template"]["spec"]["template"]["spec"]
    return found


@pytest.mark.parametrize(
    ("patches", "selector", "tolerations", "affinity"),
    [
        # a map merges key by key; tolerations have no merge key and are replaced whole
        ([_patch("a.io/fix", nodeSelector={ZONE: "us-east-1a"})],
         {"pool": "gpu", ZONE: "us-east-1a"}, [GPU], None),
        ([_patch("a.io/fix", tolerations=[{"key": "x", "operator": "Exists"}])],
         {"pool": "gpu"}, [{"key": "x", "operator": "Exists"}], None),
        # entries merge in list order: the later one wins a key they both set
        ([_patch("a.io/one", nodeSelector={ZONE: "a"}), _patch("b.io/two", nodeSelector={ZONE: "b"})],
         {"pool": "gpu", ZONE: "b"}, [GPU], None),
        # null removes a key, as in any strategic merge patch
        ([_patch("a.io/fix", nodeSelector={"pool": None})], {}, [GPU], None),
        ([_patch("a.io/fix", affinity={"nodeAffinity": {"x": 1}})], {"pool": "gpu"}, [GPU],
         {"nodeAffinity": {"x": 1}}),
        ([], {"pool": "gpu"}, [GPU], None),
    ],
)
def test_runtime_patches_merge(
    patches: list[dict[str, Any]], selector: dict[str, str], tolerations: list[Any],
    affinity: Any,
) -> None:  # fmt: skip
    before = copy.deepcopy(SPEC)
    merged = merge_runtime_patches(SPEC, patches)
    node = _node_spec(merged)
    assert node.get("nodeSelector", {}) == selector
    assert node["tolerations"] == tolerations
    assert node.get("affinity") == affinity
    assert [r["name"] for r in merged["replicatedJobs"]] == ["dataset-initializer", "node"]
    assert before == SPEC


def test_runtime_patches_keep_the_runtime_order_and_merge_containers_by_name() -> None:
    patch = {"manager": "a.io/x", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "node", "securityContext": {"runAsUser": 1}}]}}}}}]}}}}
    merged = merge_runtime_patches(SPEC, [patch])
    assert [r["name"] for r in merged["replicatedJobs"]] == ["dataset-initializer", "node"]
    assert _node_spec(merged)["containers"] == [
        {"name": "node", "image": "base", "securityContext": {"runAsUser": 1}}]


@pytest.mark.parametrize(
    ("overrides", "selector", "labels"),
    [
        ([{"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {ZONE: "a"}}}],
         {"pool": "gpu", ZONE: "a"}, None),
        ([{"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {ZONE: "a"}}},
          {"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {ZONE: "b"}},
           "metadata": {"labels": {"team": "x"}}}],
         {"pool": "gpu", ZONE: "b"}, {"team": "x"}),
        ([{"targetJobs": [{"name": "dataset-initializer"}], "spec": {"nodeSelector": {ZONE: "a"}}}],
         {"pool": "gpu"}, None),
    ],
)
def test_pod_template_overrides_merge(
    overrides: list[dict[str, Any]], selector: dict[str, str], labels: Any
) -> None:
    merged = merge_pod_template_overrides(SPEC, overrides)
    node = next(r for r in merged["replicatedJobs"] if r["name"] == "node")
    assert node["template"]["spec"]["template"]["spec"]["nodeSelector"] == selector
    assert node["template"]["spec"]["template"].get("metadata", {}).get("labels") == labels


TORCH_RUNTIME = {"metadata": {"name": "torch"}, "spec": {
    "mlPolicy": {"numNodes": 1, "torch": {}},
    "template": {"metadata": {"labels": {"from": "runtime"}}, "spec": copy.deepcopy(SPEC)}}}


def _trainjob(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "llm", "namespace": "ml", "uid": "u-1"},
            "spec": {"runtimeRef": {"name": "torch"}, **spec}}


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def test_torch_build() -> None:
    trainjob = _trainjob(suspend=True, trainer={
        "numNodes": 4, "image": "train:2", "command": ["torchrun"], "env": [{"name": "A", "value": "1"}],
        "resourcesPerNode": {"requests": {"cpu": "8", "nvidia.com/gpu": "4"},
                             "limits": {"nvidia.com/gpu": "4"}}})
    built = build(trainjob, TORCH_RUNTIME, TrainerRelease.V2_3)
    jobset = built.jobset
    assert built.extra == ()
    assert jobset["metadata"]["name"] == "llm" and jobset["metadata"]["namespace"] == "ml"
    assert jobset["metadata"]["labels"] == {"from": "runtime"}
    assert jobset["metadata"]["ownerReferences"] == [{
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "llm",
        "uid": "u-1", "controller": True, "blockOwnerDeletion": True}]
    assert jobset["spec"]["suspend"] is True
    node = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "node")
    assert node["replicas"] == 1
    assert (node["template"]["spec"]["parallelism"], node["template"]["spec"]["completions"]) == (4, 4)
    (container,) = node["template"]["spec"]["template"]["spec"]["containers"]
    assert (container["image"], container["command"]) == ("train:2", ["torchrun"])
    assert container["resources"] == {"requests": {"cpu": "8", "nvidia.com/gpu": "4"},
                                      "limits": {"nvidia.com/gpu": "4"}}
    assert _env(container) == {
        "A": "1", "PET_NNODES": "4", "PET_NPROC_PER_NODE": "auto",
        "PET_NODE_RANK": {"fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}},
        "PET_MASTER_ADDR": "llm-node-0-0.llm", "PET_MASTER_PORT": "29500"}
    assert container["ports"] == [{"containerPort": 29500, "protocol": "TCP"}]
    init = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "dataset-initializer")
    assert init["template"]["spec"]["parallelism"] == 1
    assert "env" not in init["template"]["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(
    ("trainer", "nodes", "nproc"),
    [
        (None, 1, None),  # no trainer section: the runtime's numNodes, no torch env at all
        ({"numNodes": 2}, 2, "1"),  # no GPU and no CPU request: one process
        ({"numNodes": 2, "resourcesPerNode": {"requests": {"cpu": "6"}}}, 2, "6"),
        ({"numProcPerNode": 3}, 1, "3"),
    ],
)
def test_torch_node_count_and_processes(trainer: Any, nodes: int, nproc: str | None) -> None:
    spec = {"trainer": trainer} if trainer is not None else {}
    node = next(r for r in build(_trainjob(**spec), TORCH_RUNTIME, TrainerRelease.V2_3)
                .jobset["spec"]["replicatedJobs"] if r["name"] == "node")
    assert node["template"]["spec"]["parallelism"] == nodes
    env = _env(node["template"]["spec"]["template"]["spec"]["containers"][0])
    assert env.get("PET_NPROC_PER_NODE") == nproc
    assert env.get("PET_NNODES") == (str(nodes) if nproc else None)


def test_release_decides_which_override_field_is_read() -> None:
    fix = [_patch("a.io/fix", nodeSelector={ZONE: "a"})]
    override = [{"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {ZONE: "b"}}}]
    trainjob = _trainjob(runtimePatches=fix, podTemplateOverrides=override,
                         labels={"from": "trainjob"})
    v23 = _node_spec(build(trainjob, TORCH_RUNTIME, TrainerRelease.V2_3).jobset["spec"])
    v21_jobset = build(trainjob, TORCH_RUNTIME, TrainerRelease.V2_1).jobset
    assert v23["nodeSelector"][ZONE] == "a"
    assert _node_spec(v21_jobset["spec"])["nodeSelector"][ZONE] == "b"
    assert v21_jobset["metadata"]["labels"] == {"from": "trainjob"}  # v2.1 spec.labels


MPI_RUNTIME = {"metadata": {"name": "mpi"}, "spec": {
    "mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 2, "mpiImplementation": "OpenMPI",
                                        "sshAuthMountPath": "/home/mpiuser/.ssh"}},
    "template": {"spec": {"replicatedJobs": [
        _rjob("node"), _rjob("launcher", ancestor="trainer")]}}}}  # fmt: skip


def test_mpi_build() -> None:
    built = build(_trainjob(trainer={"numNodes": 3, "command": ["mpirun"]}), MPI_RUNTIME,
                  TrainerRelease.V2_2)
    rjobs = {r["name"]: r for r in built.jobset["spec"]["replicatedJobs"]}
    assert rjobs["node"]["template"]["spec"]["parallelism"] == 3
    assert rjobs["launcher"]["template"]["spec"]["parallelism"] == 1
    launcher = rjobs["launcher"]["template"]["spec"]["template"]["spec"]
    (container,) = launcher["containers"]
    assert container["command"] == ["mpirun"]
    assert _env(container) == {
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true", "OMPI_MCA_orte_set_default_slots": "2",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10"}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/home/mpiuser/.ssh", "/etc/mpi"}
    node = rjobs["node"]["template"]["spec"]["template"]["spec"]
    assert [v["name"] for v in node["volumes"]] == ["mpi-ssh-auth"]
    hostfile, secret = built.extra
    assert hostfile["metadata"]["name"] == "llm-mpi-hostfile"
    assert hostfile["data"]["hostfile"] == ("llm-node-0-0.llm slots=2\nllm-node-0-1.llm slots=2\n"
                                            "llm-node-0-2.llm slots=2\n")
    assert secret["metadata"]["name"] == "llm-mpi-ssh-auth" and secret["immutable"] is True
    assert base64.b64decode(secret["data"]["ssh-publickey"]).startswith(b"ecdsa-sha2-nistp521")
