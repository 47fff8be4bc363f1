"""The training model for JobSets on the whole twin: a TrainJob's or a plain JobSet's torch gang
split over two GPU zones trains at the inter-zone rate; an initializer holds no rank; an MPI
launcher away from its nodes is blocked by the zone policies and crash-loops."""

from __future__ import annotations

from typing import Any

import pytest

from agent.twin import jobset_children as js
from agent.twin.cluster import TwinCluster
from agent.twin.training import JobPhase
from tests.twin.twin_fixtures import fast, pods, wait


def gang(cluster: TwinCluster, name: str) -> list[dict[str, Any]]:
    return [p for p in pods(cluster, selector=f"{js.JOBSET_NAME}={name}")
            if p["status"].get("phase") == "Running"]


@pytest.mark.parametrize(("scenario", "name"), [("trainjob", "llm-pretrain"),
                                                ("jobset", "pytorch-ddp")])
def test_a_split_torch_gang_trains_at_the_inter_zone_rate(scenario: str, name: str) -> None:
    with TwinCluster(fast(scenario)) as cluster:
        wait(cluster, lambda: cluster.runtime.job_state("ml", name).phase is JobPhase.TRAINING,
             timeout=20)
        state = cluster.runtime.job_state("ml", name)
        ranks = gang(cluster, name)
        assert sorted(p["metadata"]["name"] for p in ranks) == list(state.participants)
        assert len(ranks) == 4
        assert {cluster.dataplane.zone_of(p) for p in ranks} == {"us-east-1a", "us-east-1b"}
        for pod in ranks:
            assert 0.35 <= cluster.runtime.pod_utilization("ml", pod["metadata"]["name"]) <= 0.45
        initializers = [p for p in pods(cluster, selector=f"{js.JOBSET_NAME}={name},"
                                                         f"{js.REPLICATED_JOB}=dataset-initializer")]
        assert len(initializers) == (1 if scenario == "trainjob" else 0)
        for pod in initializers:
            assert pod["status"]["phase"] == "Succeeded"  # ran before the nodes, outside the gang
            assert cluster.runtime.activity(pod) is None


def test_the_mpi_launcher_away_from_its_nodes_is_blocked_and_crash_loops() -> None:
    with TwinCluster(fast("trainjob-mpi")) as cluster:
        def launcher() -> dict[str, Any] | None:
            found = pods(cluster, selector=f"{js.JOBSET_NAME}=mpi-pretrain,"
                                           f"{js.REPLICATED_JOB}=launcher")
            return found[0] if found else None

        def restarted() -> bool:
            pod = launcher()
            return pod is not None and any(int(cs.get("restartCount", 0)) >= 1 for cs in
                                           pod["status"].get("containerStatuses") or [])

        wait(cluster, restarted, timeout=20)
        pod = launcher()
        assert pod is not None and cluster.dataplane.zone_of(pod) == "us-east-1b"
        nodes = [p["metadata"]["name"] for p in pods(
            cluster, selector=f"{js.JOBSET_NAME}=mpi-pretrain,{js.REPLICATED_JOB}=node")]
        drops = {(k.source_pod, k.destination_pod) for k, v in cluster.runtime.drops().items()
                 if k.reason == "POLICY_DENIED" and v > 0}
        assert drops == {(pod["metadata"]["name"], n) for n in nodes}  # ssh to every node
        state = cluster.runtime.job_state("ml", "mpi-pretrain")
        assert state.phase in (JobPhase.BLOCKED, JobPhase.WAITING)  # never training
        assert pod["metadata"]["name"] not in state.participants
        for name in nodes:
            assert cluster.runtime.pod_utilization("ml", name) <= 0.01
        activity = cluster.runtime.activity(pod)
        assert activity is not None and activity.crashed is not None
        peer, port, _ = activity.crashed
        assert peer in nodes and port == 22
