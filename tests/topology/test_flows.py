"""Required flows per kind, expanded to pod pairs, and named-port resolution."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.flow import FlowRule
from agent.model.workload import JobKind
from agent.settings import GroupSpec
from agent.topology.flows import job_port, required_flows
from agent.topology.jobs import find_jobs
from tests.support.objects import job_pod, jobset, jobset_pod, node, pod, replicated_job
from tests.support.snapshots import load

N = [node("a1", "zone-a", gpus=8)]
R = "1024-65535"


def _pairs(rules: tuple[FlowRule, ...]) -> set[tuple[str, str, str, str]]:
    return {
        (s.name, d.name, str(r.ports), str(r.ports.protocol))
        for r in rules
        for s in r.sources
        for d in r.destinations
        if s is not d
    }


def _found_job(
    kind: str, replicas: list[tuple[str, int]], ports: list[tuple[str | None, int]] | None = None
) -> Any:
    items = [job_pod(kind, "j", t, i, node_name="a1", ports=ports) for t, i in replicas]
    (job,) = find_jobs(load(N + items).state)
    return job


def _all_pairs(names: list[str], port: str) -> set[tuple[str, str, str, str]]:
    return {(a, b, port, "TCP") for a in names for b in names if a != b}


@pytest.mark.parametrize(
    ("kind", "replicas", "ports", "expected"),
    [
        (
            "PyTorchJob",
            [("master", 0), ("worker", 0), ("worker", 1)],
            [("pytorchjob-port", 23456)],
            {
                ("j-worker-0", "j-master-0", "23456", "TCP"),
                ("j-worker-1", "j-master-0", "23456", "TCP"),
            }
            | _all_pairs(["j-master-0", "j-worker-0", "j-worker-1"], R),
        ),
        # the coordinator's own named port wins over the default
        (
            "PyTorchJob",
            [("master", 0), ("worker", 0)],
            [("pytorchjob-port", 29500)],
            {("j-worker-0", "j-master-0", "29500", "TCP")}
            | _all_pairs(["j-master-0", "j-worker-0"], R),
        ),
        (
            "XGBoostJob",
            [("master", 0), ("worker", 0)],
            None,
            {("j-worker-0", "j-master-0", "9999", "TCP")}
            | _all_pairs(["j-master-0", "j-worker-0"], R),
        ),
        # PaddleJob / JAXJob: no port of the known name: the coordinator's first container port
        (
            "PaddleJob",
            [("master", 0), ("worker", 0)],
            [("custom", 37777)],
            {("j-worker-0", "j-master-0", "37777", "TCP")}
            | _all_pairs(["j-master-0", "j-worker-0"], R),
        ),
        (
            "JAXJob",
            [("worker", 0), ("worker", 1)],
            None,
            {("j-worker-1", "j-worker-0", "6666", "TCP")}
            | _all_pairs(["j-worker-0", "j-worker-1"], R),
        ),
        # TFJob: every ordered pair except evaluators, on tfjob-port
        (
            "TFJob",
            [("chief", 0), ("ps", 0), ("worker", 0), ("evaluator", 0)],
            [("tfjob-port", 2222)],
            _all_pairs(["j-chief-0", "j-ps-0", "j-worker-0"], "2222"),
        ),
        # MPIJob: launcher -> workers on 22; workers -> launcher and worker <-> worker on the range
        (
            "MPIJob",
            [("launcher", 0), ("worker", 0), ("worker", 1)],
            None,
            {
                ("j-launcher-0", "j-worker-0", "22", "TCP"),
                ("j-launcher-0", "j-worker-1", "22", "TCP"),
                ("j-worker-0", "j-launcher-0", R, "TCP"),
                ("j-worker-1", "j-launcher-0", R, "TCP"),
                ("j-worker-0", "j-worker-1", R, "TCP"),
                ("j-worker-1", "j-worker-0", R, "TCP"),
            },
        ),
        # a one-pod job needs nothing
        ("PyTorchJob", [("master", 0)], None, set()),
    ],
)
def test_flows_per_kind(
    kind: str,
    replicas: list[tuple[str, int]],
    ports: list[tuple[str | None, int]] | None,
    expected: set[tuple[str, str, str, str]],
) -> None:
    assert _pairs(required_flows(_found_job(kind, replicas, ports))) == expected


@pytest.mark.parametrize(
    ("ports", "group_ports", "expected"),
    [
        ([("rdzv", 29500)], [], {("w1", "c", "29500", "TCP"), ("w2", "c", "29500", "TCP")}),
        (
            [("rdzv", 29500), (None, 8080)],
            [7000],
            {("w1", "c", "7000", "TCP"), ("w2", "c", "7000", "TCP")},
        ),
        (
            [("rdzv", 29500), (None, 8080)],
            [],
            {(w, "c", p, "TCP") for w in ("w1", "w2") for p in ("29500", "8080")},
        ),
        ([], [], set()),
    ],
)
def test_group_flows(
    ports: list[tuple[str | None, int]],
    group_ports: list[int],
    expected: set[tuple[str, str, str, str]],
) -> None:
    spec = GroupSpec(
        name="g",
        selector={"app": "g"},
        coordinator={"role": "c"},
        workers={"role": "w"},
        ports=group_ports,
    )
    items = [
        pod("c", node_name="a1", labels={"app": "g", "role": "c"}, ports=ports),
        pod("w1", node_name="a1", labels={"app": "g", "role": "w"}),
        pod("w2", node_name="a1", labels={"app": "g", "role": "w"}),
    ]
    (job,) = find_jobs(load(N + items).state, [spec])
    assert _pairs(required_flows(job)) == expected


def test_job_port_defaults_without_coordinator() -> None:
    assert str(job_port(JobKind.TF, None)) == "2222"
    assert str(job_port(JobKind.MPI, None)) == "22"
    assert str(job_port(JobKind.PYTORCH, None)) == "23456"


def _jobset_job(items: list[dict[str, Any]]) -> Any:
    (job,) = find_jobs(load(N + items).state)
    return job


TORCH_RUNTIME = [replicated_job("dataset-initializer", step="dataset-initializer"),
                 replicated_job("node", nodes=3, gpus=1, step="trainer")]


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        # torch TrainJob: every node -> rank 0 on the Trainer's port 29500 (the trainer
        # container's port), collective all pairs; the initializer needs no flow
        ([jobset("t", TORCH_RUNTIME, trainjob=True),
          jobset_pod("t", "dataset-initializer", 0, 0, node_name="a1"),
          *(jobset_pod("t", "node", 0, i, node_name="a1", ports=[("", 29500)]) for i in range(3))],
         {("t-node-0-1-x01z", "t-node-0-0-x00z", "29500", "TCP"),
          ("t-node-0-2-x02z", "t-node-0-0-x00z", "29500", "TCP")}
         | _all_pairs(["t-node-0-0-x00z", "t-node-0-1-x01z", "t-node-0-2-x02z"], R)),
        # no declared port: the default 29500
        ([jobset("t", TORCH_RUNTIME, trainjob=True),
          *(jobset_pod("t", "node", 0, i, node_name="a1") for i in range(2))],
         {("t-node-0-1-x01z", "t-node-0-0-x00z", "29500", "TCP")}
         | _all_pairs(["t-node-0-0-x00z", "t-node-0-1-x01z"], R)),
        # MPI: launcher -> nodes on their ssh port, nodes -> launcher and node <-> node collective
        ([jobset("m", [replicated_job("node", nodes=2), replicated_job("launcher")], trainjob=True),
          jobset_pod("m", "launcher", 0, 0, node_name="a1"),
          *(jobset_pod("m", "node", 0, i, node_name="a1", ports=[("ssh", 2222)]) for i in range(2))],
         {("m-launcher-0-0-x00z", f"m-node-0-{i}-x0{i}z", "2222", "TCP") for i in range(2)}
         | {(f"m-node-0-{i}-x0{i}z", "m-launcher-0-0-x00z", R, "TCP") for i in range(2)}
         | _all_pairs(["m-node-0-0-x00z", "m-node-0-1-x01z"], R)),
        # a plain JobSet's declared coordinator on its first container port
        ([jobset("j", [replicated_job("workers", nodes=2)],
                 coordinator={"replicatedJob": "workers", "podIndex": 1}),
          *(jobset_pod("j", "workers", 0, i, node_name="a1", ports=[("", 1234)]) for i in range(2))],
         {("j-workers-0-0-x00z", "j-workers-0-1-x01z", "1234", "TCP")}
         | _all_pairs(["j-workers-0-0-x00z", "j-workers-0-1-x01z"], R)),
        # the master port the template's env sets wins over a first container port (metrics)
        ([jobset("j", [replicated_job("workers", nodes=2, spec={"containers": [
            {"name": "main", "env": [{"name": "MASTER_PORT", "value": "29400"}],
             "ports": [{"containerPort": 8080}]}]})]),
          *(jobset_pod("j", "workers", 0, i, node_name="a1", ports=[("", 8080)]) for i in range(2))],
         {("j-workers-0-1-x01z", "j-workers-0-0-x00z", "29400", "TCP")}
         | _all_pairs(["j-workers-0-0-x00z", "j-workers-0-1-x01z"], R)),
    ],
    ids=["torch-trainjob", "torch-default-port", "mpi-trainjob", "jobset-declared", "jobset-env-port"],
)
def test_jobset_gang_flows(items: list[dict[str, Any]], expected: set[tuple[str, str, str, str]]) -> None:
    assert _pairs(required_flows(_jobset_job(items))) == expected
