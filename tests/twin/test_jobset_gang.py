"""Who trains in a JobSet and who dials whom: torch rank 0, an MPI launcher, a declared
coordinator, initializers outside the gang, the ports."""

from __future__ import annotations

from typing import Any

import pytest

from agent.twin import jobset_children as js
from agent.twin.jobset_gang import gang
from agent.twin.training_runtime import Flow, flows_for
from tests.support import objects


def _rjob(name: str, *, parallelism: int = 1, replicas: int = 1, ancestor: str | None = None,
          container: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}} if ancestor else {}
    return {"name": name, "replicas": replicas, "template": {"metadata": meta, "spec": {
        "parallelism": parallelism, "completions": parallelism,
        "template": {"spec": {"containers": [container or {"name": "node"}]}}}}}  # fmt: skip


def _member(rjob: str, job: int, index: int) -> dict[str, Any]:
    """The pod of replicated job `rjob`, job `job`, completion index `index` of JobSet `t`."""
    return objects.pod(f"t-{rjob}-{job}-{index}-x", ns=None, phase=None, kind=False,
                       labels={js.REPLICATED_JOB: rjob, js.JOB_INDEX: str(job)},
                       annotations={"batch.kubernetes.io/job-completion-index": str(index)})


def _jobset(*rjobs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "t"}, "spec": {"replicatedJobs": list(rjobs), **spec}}


TORCH_NODE = {"name": "node", "env": [{"name": "PET_MASTER_PORT", "value": "29500"}]}


@pytest.mark.parametrize(
    ("jobset", "pods", "roles", "port", "expected"),
    [
        # torch: rank 0 is node job 0 completion index 0; the initializer is outside the gang
        (_jobset(_rjob("dataset-initializer", ancestor="dataset-initializer"),
                 _rjob("node", parallelism=3, container=TORCH_NODE)),
         [_member("dataset-initializer", 0, 0), _member("node", 0, 1), _member("node", 0, 0)],
         {"t-node-0-0-x": "master", "t-node-0-1-x": ""}, 29500, 3),
        # MPI: the launcher dials the nodes' ssh port; it holds no rank
        (_jobset(_rjob("node", parallelism=2, container={
            "name": "node", "ports": [{"name": "ssh", "containerPort": 2222}]}),
                 _rjob("launcher", ancestor="trainer")),
         [_member("launcher", 0, 0), _member("node", 0, 0), _member("node", 0, 1)],
         {"t-launcher-0-0-x": "launcher", "t-node-0-0-x": "", "t-node-0-1-x": ""}, 2222, 3),
        (_jobset(_rjob("node", parallelism=2), _rjob("launcher")), [_member("node", 0, 0)],
         {"t-node-0-0-x": ""}, 22, 3),
        # a plain JobSet with a declared coordinator, two jobs of two pods; its container port
        (_jobset(_rjob("workers", parallelism=2, replicas=2, container={
            "name": "jax", "ports": [{"containerPort": 1234}]}),
                 coordinator={"replicatedJob": "workers", "jobIndex": 1, "podIndex": 1}),
         [_member("workers", 0, 0), _member("workers", 1, 1)],
         {"t-workers-0-0-x": "", "t-workers-1-1-x": "master"}, 1234, 4),
        # no coordinator declared: the first replicated job's job 0 index 0; MASTER_PORT env
        (_jobset(_rjob("workers", parallelism=2, container={
            "name": "torch", "env": [{"name": "MASTER_PORT", "value": "3389"}]})),
         [_member("workers", 0, 0), _member("workers", 0, 1)],
         {"t-workers-0-0-x": "master", "t-workers-0-1-x": ""}, 3389, 2),
        (_jobset(_rjob("model-initializer")), [_member("model-initializer", 0, 0)], {}, 29500, 0),
    ],
)
def test_gang(jobset: dict[str, Any], pods: list[dict[str, Any]], roles: dict[str, str],
              port: int, expected: int) -> None:  # fmt: skip
    found = gang(jobset, pods)
    assert dict(found.roles) == roles
    assert (found.port, found.expected) == (port, expected)


@pytest.mark.parametrize(
    ("roles", "flows"),
    [
        # torch: every rank dials rank 0; the ring m -> a -> b -> m (b -> m is already there)
        ({"m": "master", "a": "", "b": ""},
         [Flow("a", "m", 9), Flow("b", "m", 9), Flow("m", "a", 9), Flow("a", "b", 9)]),
        # MPI: the launcher dials every node; the nodes form the ring
        ({"l": "launcher", "a": "", "b": "", "c": ""},
         [Flow("l", "a", 9), Flow("l", "b", 9), Flow("l", "c", 9), Flow("a", "b", 9),
          Flow("b", "c", 9), Flow("c", "a", 9)]),
        ({"m": "master"}, []),
        ({"a": "", "b": ""}, [Flow("a", "b", 9)]),
    ],
)
def test_flows(roles: dict[str, str], flows: list[Flow]) -> None:
    assert flows_for(roles, port=9) == flows
