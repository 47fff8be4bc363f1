"""Builders of Kubernetes manifests (plain dicts) for tests, and a one-call snapshot parser.

Used by tests of snapshot, topology, diagnosis and the diagnose command: tests describe a cluster as
manifests and run the real parser over them, as the command does.
"""

from __future__ import annotations

from typing import Any

import orjson

from agent.snapshot.collection import Snapshot, parse_snapshot

JOB_NAME = "training.kubeflow.org/job-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_ROLE = "training.kubeflow.org/job-role"
OPERATOR = "training.kubeflow.org/operator-name"

OPERATORS = {
    "PyTorchJob": "pytorchjob-controller",
    "TFJob": "tfjob-controller",
    "MPIJob": "mpijob-controller",
    "XGBoostJob": "xgboostjob-controller",
    "PaddleJob": "paddlejob-controller",
    "JAXJob": "jaxjob-controller",
}


def node(
    name: str, zone: str | None, *, gpus: int = 8, cordoned: bool = False, **labels: str
) -> dict[str, Any]:
    all_labels = {"kubernetes.io/hostname": name, **labels}
    if zone is not None:
        all_labels["topology.kubernetes.io/zone"] = zone
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"allocatable": {"cpu": "64"}},
    }
    if gpus:
        obj["status"]["allocatable"]["nvidia.com/gpu"] = str(gpus)
        obj["spec"]["taints"] = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    return obj


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}},
    }


def pod(
    name: str,
    *,
    ns: str = "ml",
    node_name: str | None = None,
    labels: dict[str, str] | None = None,
    gpus: int = 0,
    ports: list[tuple[str | None, int]] | list[tuple[str | None, int, str]] | None = None,
    phase: str | None = None,
    owner: tuple[str, str, str] | None = None,
    service_account: str | None = None,
) -> dict[str, Any]:
    """A pod; `owner` is (apiVersion, kind, name) of its controller; `ports` are (name, number)
    or (name, number, protocol)."""
    container: dict[str, Any] = {"name": "main", "image": "img"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if ports:
        container["ports"] = [
            {"containerPort": p[1], **({"name": p[0]} if p[0] else {}),
             **({"protocol": p[2]} if len(p) > 2 else {})}
            for p in ports
        ]
    spec: dict[str, Any] = {"containers": [container]}
    if node_name is not None:
        spec["nodeName"] = node_name
    if service_account is not None:
        spec["serviceAccountName"] = service_account
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner[0],
                "kind": owner[1],
                "name": owner[2],
                "uid": "u",
                "controller": True,
            }
        ]
    status = {"phase": phase or ("Running" if node_name else "Pending")}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def job_pod(
    kind: str,
    job: str,
    rtype: str,
    index: int,
    *,
    node_name: str | None,
    ns: str = "ml",
    gpus: int = 1,
    ports: list[tuple[str | None, int]] | list[tuple[str | None, int, str]] | None = None,
    extra: dict[str, str] | None = None,
    coordinator: bool = False,
    phase: str | None = None,
) -> dict[str, Any]:
    """A training-operator v1 pod named `<job>-<type>-<index>`."""
    labels = {
        JOB_NAME: job,
        OPERATOR: OPERATORS[kind],
        REPLICA_TYPE: rtype,
        REPLICA_INDEX: str(index),
        **(extra or {}),
    }
    if coordinator:
        labels[JOB_ROLE] = "master"
    return pod(
        f"{job}-{rtype}-{index}",
        ns=ns,
        node_name=node_name,
        labels=labels,
        gpus=gpus,
        ports=ports,
        phase=phase,
        owner=("kubeflow.org/v1", kind, job),
    )


def training_job(
    kind: str,
    name: str,
    *,
    ns: str = "ml",
    labels: dict[str, str] | None = None,
    run_policy: dict[str, Any] | None = None,
    conditions: list[str] | None = None,
    api_version: str = "kubeflow.org/v1",
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
        "spec": {"runPolicy": run_policy or {}},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions or []]},
    }


def cnp(
    name: str,
    spec: dict[str, Any],
    *,
    ns: str | None = "ml",
) -> dict[str, Any]:
    """A CiliumNetworkPolicy, or a CiliumClusterwideNetworkPolicy when `ns` is None."""
    meta: dict[str, Any] = {"name": name}
    if ns is not None:
        meta["namespace"] = ns
    kind = "CiliumNetworkPolicy" if ns is not None else "CiliumClusterwideNetworkPolicy"
    return {"apiVersion": "cilium.io/v2", "kind": kind, "metadata": meta, "spec": spec}


def zone_only(zone: str, *, key: str = "zone", ns: str | None = "ml") -> dict[str, Any]:
    """Pods labelled `key=zone` accept ingress only from pods with the same label."""
    return cnp(
        f"{zone}-only",
        {
            "endpointSelector": {"matchLabels": {key: zone}},
            "ingress": [{"fromEndpoints": [{"matchLabels": {key: zone}}]}],
        },
        ns=ns,
    )


def netpol(name: str, spec: dict[str, Any], *, ns: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def as_list(items: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def load(items: list[dict[str, Any]]) -> Snapshot:
    """Parse `items` with the real snapshot parser (as one JSON List file)."""
    return parse_snapshot([("test.json", as_list(items))])
