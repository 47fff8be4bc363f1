"""The training operator against the real store: pods, services, conditions, suspend and resume."""

from __future__ import annotations

from typing import Any

from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from tests.twin.twin_fixtures import (
    PODS,
    PYTORCHJOBS,
    SERVICES,
    all_running,
    fast,
    pods,
    running,
    wait,
)

ZONE = "topology.kubernetes.io/zone"
JOB = "llm-finetune"


def stored_job(cluster: Any) -> dict[str, Any]:
    return cluster.store.get(PYTORCHJOBS, JOB, namespace="ml")


def condition(obj: dict[str, Any], kind: str) -> str | None:
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind]
    return found[0]["status"] if found else None


def zone_of(cluster: Any, pod: dict[str, Any]) -> str:
    return cluster.store.get(lookup("nodes"), pod["spec"]["nodeName"])["metadata"]["labels"][ZONE]


def test_creates_pods_services_and_conditions() -> None:
    with running(fast("seed-degraded")) as cluster:
        wait(cluster, all_running(cluster, 5))
        names = sorted(p["metadata"]["name"] for p in pods(cluster))
        assert names == [f"{JOB}-master-0"] + [f"{JOB}-worker-{i}" for i in range(4)]
        services = cluster.store.list(SERVICES, namespace="ml")[0]
        assert sorted(s["metadata"]["name"] for s in services) == names
        assert all(s["spec"]["clusterIP"] == "None" for s in services)
        wait(cluster, lambda: condition(stored_job(cluster), "Running") == "True")
        assert condition(stored_job(cluster), "Created") == "True"
        master = cluster.store.get(PODS, f"{JOB}-master-0", namespace="ml")
        env = {e["name"]: e["value"] for e in master["spec"]["containers"][0]["env"]}
        assert env["MASTER_ADDR"] == f"{JOB}-master-0" and env["WORLD_SIZE"] == "5"
        # the incident: the CPU-only master without a GPU toleration lands in the CPU zone
        assert zone_of(cluster, master) == "us-east-1b"


def test_template_edit_alone_moves_nothing() -> None:
    with running(fast("seed-degraded")) as cluster:
        wait(cluster, all_running(cluster, 5))
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(cluster)}
        patch = {
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"template": {"spec": {"nodeSelector": {ZONE: "us-east-1a"}}}}
                }
            }
        }
        cluster.store.patch(PYTORCHJOBS, JOB, patch, namespace="ml", patch_type=PatchType.MERGE)
        # let the operator see the edit
        wait(cluster, cluster.idle)
        after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(cluster)}
        assert after == before
        master = cluster.store.get(PODS, f"{JOB}-master-0", namespace="ml")
        assert "nodeSelector" not in master["spec"]


def test_suspend_deletes_pods_and_services_and_resume_uses_the_patched_template() -> None:
    with running(fast("seed-degraded")) as cluster:
        wait(cluster, all_running(cluster, 5))
        fix = {
            "spec": {
                "runPolicy": {"suspend": True},
                "pytorchReplicaSpecs": {"Master": {"template": {"spec": {
                    "nodeSelector": {ZONE: "us-east-1a"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"training.kubeflow.org/job-name": JOB}}}]}},
                }}}},
            }
        }  # fmt: skip
        cluster.store.patch(PYTORCHJOBS, JOB, fix, namespace="ml", patch_type=PatchType.MERGE)
        wait(
            cluster,
            lambda: not pods(cluster) and not cluster.store.list(SERVICES, namespace="ml")[0],
        )
        wait(cluster, lambda: condition(stored_job(cluster), "Suspended") == "True")
        assert condition(stored_job(cluster), "Running") == "False"
        cluster.store.patch(PYTORCHJOBS, JOB, {"spec": {"runPolicy": {"suspend": False}}}, namespace="ml",
                            patch_type=PatchType.MERGE)  # fmt: skip
        wait(cluster, all_running(cluster, 5))
        wait(cluster, lambda: condition(stored_job(cluster), "Suspended") == "False")
        master = cluster.store.get(PODS, f"{JOB}-master-0", namespace="ml")
        assert master["spec"]["nodeSelector"] == {ZONE: "us-east-1a"}
        assert {zone_of(cluster, p) for p in pods(cluster)} == {"us-east-1a"}
        assert len(cluster.store.list(SERVICES, namespace="ml")[0]) == 5


def test_a_deleted_pod_is_recreated_after_it_is_gone() -> None:
    with running(fast("seed-degraded")) as cluster:
        wait(cluster, all_running(cluster, 5))
        old = cluster.store.get(PODS, f"{JOB}-worker-2", namespace="ml")["metadata"]["uid"]
        cluster.store.delete(PODS, f"{JOB}-worker-2", namespace="ml")
        wait(cluster, lambda: any(
            p["metadata"]["name"] == f"{JOB}-worker-2" and p["metadata"]["uid"] != old
            and p["status"].get("phase") == "Running" for p in pods(cluster)))  # fmt: skip


MPI = {
    "apiVersion": "kubeflow.org/v2beta1",
    "kind": "MPIJob",
    "metadata": {"name": "mpi", "namespace": "ml"},
    "spec": {
        "runPolicy": {"suspend": False},
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"spec": {"containers": [{"name": "mpi", "image": "x"}]}}},
            "Worker": {"replicas": 2, "template": {"spec": {
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                "containers": [{"name": "mpi", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
        },
    },
}  # fmt: skip


def test_mpijob_v2beta1_launcher_job_workers_suspend_and_resume() -> None:
    with running(fast("seed-degraded")) as cluster:
        cluster.store.delete(PYTORCHJOBS, JOB, namespace="ml")
        wait(cluster, lambda: not pods(cluster))
        mpijobs = lookup("mpijobs", group="kubeflow.org", version="v2beta1")
        cluster.store.create(mpijobs, MPI)
        wait(cluster, all_running(cluster, 3))
        # (a pod the operator raced into existence while the PyTorchJob was deleted may still be
        # terminating: the garbage collector removes it)
        names = sorted(
            p["metadata"]["name"]
            for p in pods(cluster)
            if not p["metadata"].get("deletionTimestamp")
        )
        assert names[1:] == ["mpi-worker-0", "mpi-worker-1"]
        assert names[0].startswith("mpi-launcher-")
        launcher = cluster.store.get(lookup("jobs", group="batch"), "mpi-launcher", namespace="ml")
        assert launcher["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"
        pin = {"spec": {"runPolicy": {"suspend": True}, "mpiReplicaSpecs": {"Launcher": {"template": {"spec": {
            "nodeSelector": {ZONE: "us-east-1a"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}}}}}  # fmt: skip
        cluster.store.patch(mpijobs, "mpi", pin, namespace="ml", patch_type=PatchType.MERGE)
        wait(cluster, lambda: not pods(cluster))
        cluster.store.patch(mpijobs, "mpi", {"spec": {"runPolicy": {"suspend": False}}}, namespace="ml",
                            patch_type=PatchType.MERGE)  # fmt: skip
        wait(cluster, all_running(cluster, 3))
        launcher_pod = next(
            p for p in pods(cluster) if p["metadata"]["name"].startswith("mpi-launcher-")
        )
        assert launcher_pod["spec"]["nodeSelector"] == {ZONE: "us-east-1a"}
        assert zone_of(cluster, launcher_pod) == "us-east-1a"


def test_a_job_succeeds_after_its_steps_and_is_never_restarted() -> None:
    with running(fast("seed-degraded"), speed=20) as cluster:
        cluster.store.patch(PYTORCHJOBS, JOB, {"metadata": {"annotations": {"twin.zonemedic.io/steps": "3"}}},
                            namespace="ml", patch_type=PatchType.MERGE)  # fmt: skip
        wait(cluster, lambda: condition(stored_job(cluster), "Succeeded") == "True")
        assert condition(stored_job(cluster), "Running") == "False"
        assert cluster.runtime.steps("ml", JOB) == 3
        assert {p["status"]["phase"] for p in pods(cluster)} == {"Succeeded"}
        assert "completionTime" in stored_job(cluster)["status"]
        # a finished job is not resumed: deleting a pod creates nothing
        cluster.store.delete(PODS, f"{JOB}-worker-0", namespace="ml")
        wait(cluster, lambda: len(pods(cluster)) == 4)
        wait(cluster, cluster.idle)
        assert len(pods(cluster)) == 4
