"""Pods, services and env the twin's training operator builds for each Kubeflow kind."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.twin.operator_kinds import (
    KINDS,
    MPI_V2,
    desired_launcher_job,
    desired_pods,
    desired_services,
)
from tests.support import objects


def operator_job(
    kind: str,
    version: str,
    specs: dict[str, int],
    *,
    container: str = "main",
    ports: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Job `j` of `kind` at `version` as it is created: `specs` maps replica type to replicas."""
    k = next(x for x in KINDS.values() if x.kind == kind and x.version == version)
    pod_spec = {"containers": [{"name": container, "image": "img", "ports": ports or []}]}
    return objects.training_job(
        kind, "j", api_version=k.api_version, uid="u-1", status=False,
        replicas={rtype: objects.replica(n, pod_spec, labels={"app": "train"}) for rtype, n in specs.items()},
    )


def by_name(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs}


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for c in pod["spec"]["containers"] for e in c.get("env", [])}


@pytest.mark.parametrize(
    ("kind", "specs", "names", "master"),
    [
        (
            "PyTorchJob",
            {"Master": 1, "Worker": 2},
            ["j-master-0", "j-worker-0", "j-worker-1"],
            "j-master-0",
        ),
        ("PyTorchJob", {"Worker": 2}, ["j-worker-0", "j-worker-1"], "j-worker-0"),
        (
            "TFJob",
            {"Chief": 1, "PS": 1, "Worker": 2},
            ["j-chief-0", "j-ps-0", "j-worker-0", "j-worker-1"],
            "j-chief-0",
        ),
        ("TFJob", {"Worker": 2}, ["j-worker-0", "j-worker-1"], "j-worker-0"),
        (
            "MPIJob",
            {"Launcher": 1, "Worker": 2},
            ["j-launcher-0", "j-worker-0", "j-worker-1"],
            "j-launcher-0",
        ),
        ("XGBoostJob", {"Master": 1, "Worker": 1}, ["j-master-0", "j-worker-0"], "j-master-0"),
        ("PaddleJob", {"Master": 1, "Worker": 1}, ["j-master-0", "j-worker-0"], "j-master-0"),
        ("JAXJob", {"Worker": 2}, ["j-worker-0", "j-worker-1"], "j-worker-0"),
    ],
)
def test_v1_pod_names_labels_and_owner(
    kind: str, specs: dict[str, int], names: list[str], master: str
) -> None:
    k = next(x for x in KINDS.values() if x.kind == kind and x.version == "v1")
    j = operator_job(kind, "v1", specs)
    pods = by_name(desired_pods(k, j))
    assert sorted(pods) == sorted(names)
    for name, pod in pods.items():
        labels = pod["metadata"]["labels"]
        rtype, index = name.split("-")[1], name.split("-")[2]
        assert labels["training.kubeflow.org/job-name"] == "j"
        assert labels["training.kubeflow.org/replica-type"] == rtype
        assert labels["training.kubeflow.org/replica-index"] == index
        assert labels["training.kubeflow.org/operator-name"] == k.operator_name
        assert labels["app"] == "train"  # template labels kept
        assert (labels.get("training.kubeflow.org/job-role") == "master") is (name == master)
        (owner,) = pod["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "kubeflow.org/v1",
            "kind": kind,
            "name": "j",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    services = by_name(desired_services(k, j))
    assert sorted(services) == sorted(names)
    assert all(s["spec"]["clusterIP"] == "None" for s in services.values())


def test_pytorch_env_and_port() -> None:
    k = KINDS[("v1", "pytorchjobs")]
    pods = by_name(
        desired_pods(k, operator_job("PyTorchJob", "v1", {"Master": 1, "Worker": 2}, container="pytorch"))
    )
    assert env_of(pods["j-master-0"]) | {} == {
        "MASTER_ADDR": "j-master-0",
        "MASTER_PORT": "23456",
        "WORLD_SIZE": "3",
        "RANK": "0",
        "PYTHONUNBUFFERED": "1",
    }
    assert env_of(pods["j-worker-1"])["RANK"] == "2"
    custom = operator_job(
        "PyTorchJob",
        "v1",
        {"Master": 1, "Worker": 1},
        container="pytorch",
        ports=[{"name": "pytorchjob-port", "containerPort": 29500}],
    )
    pods = by_name(desired_pods(k, custom))
    assert env_of(pods["j-worker-0"])["MASTER_PORT"] == "29500"
    assert desired_services(k, custom)[0]["spec"]["ports"][0]["port"] == 29500


def test_tf_config() -> None:
    k = KINDS[("v1", "tfjobs")]
    pods = by_name(
        desired_pods(k, operator_job("TFJob", "v1", {"Chief": 1, "Worker": 2}, container="tensorflow"))
    )
    config = json.loads(env_of(pods["j-worker-1"])["TF_CONFIG"])
    assert config["task"] == {"type": "worker", "index": 1}
    assert config["cluster"] == {
        "chief": ["j-chief-0.ml.svc:2222"],
        "worker": ["j-worker-0.ml.svc:2222", "j-worker-1.ml.svc:2222"],
    }


def test_replica_type_case_is_accepted() -> None:
    k = KINDS[("v1", "pytorchjobs")]
    j = operator_job("PyTorchJob", "v1", {"Master": 1})
    j["spec"]["pytorchReplicaSpecs"] = {"master": j["spec"]["pytorchReplicaSpecs"]["Master"]}
    assert [p["metadata"]["name"] for p in desired_pods(k, j)] == ["j-master-0"]


def test_mpi_v2beta1_launcher_job_workers_and_service() -> None:
    j = operator_job("MPIJob", "v2beta1", {"Launcher": 1, "Worker": 2})
    pods = by_name(desired_pods(MPI_V2, j))
    assert sorted(pods) == ["j-worker-0", "j-worker-1"]
    labels = pods["j-worker-1"]["metadata"]["labels"]
    assert labels["training.kubeflow.org/job-role"] == "worker"
    assert labels["training.kubeflow.org/replica-index"] == "1"
    assert "training.kubeflow.org/replica-type" not in labels
    assert (
        pods["j-worker-0"]["metadata"]["ownerReferences"][0]["apiVersion"] == "kubeflow.org/v2beta1"
    )
    launcher = desired_launcher_job(j)
    assert launcher is not None
    assert launcher["metadata"]["name"] == "j-launcher"
    assert (
        launcher["spec"]["template"]["metadata"]["labels"]["training.kubeflow.org/job-role"]
        == "launcher"
    )
    assert [s["metadata"]["name"] for s in desired_services(MPI_V2, j)] == ["j"]
