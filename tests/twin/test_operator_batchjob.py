"""batch/v1 Job controller and the immutable-template admission rule, against the real store."""

from __future__ import annotations

import pytest

from agent.twin.apierror import ApiError
from agent.twin.operator_batchjob import compress_indexes
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from tests.twin.twin_fixtures import fast, pods, running, wait

JOBS = lookup("jobs", group="batch")


def batch_job(
    name: str, *, completions: int = 2, parallelism: int = 1, run_seconds: str = "0.1"
) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "template": {
                "metadata": {"annotations": {"twin.zonemedic.io/run-seconds": run_seconds}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]},
            },
        },
    }


def test_job_runs_pods_to_completion() -> None:
    with running(fast("seed-degraded")) as cluster:
        cluster.store.create(JOBS, batch_job("once"))
        wait(cluster, lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in (cluster.store.get(JOBS, "once", namespace="ml").get("status") or {}).get("conditions", [])))  # fmt: skip
        job = cluster.store.get(JOBS, "once", namespace="ml")
        assert job["status"]["succeeded"] == 2
        mine = pods(cluster, selector="job-name=once")
        assert len(mine) == 2 and all(p["metadata"]["name"].startswith("once-") for p in mine)
        assert {p["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] for p in mine} == {
            job["metadata"]["uid"]
        }


def test_template_is_immutable_like_the_real_api() -> None:
    with running(fast("seed-degraded")) as cluster:
        cluster.store.create(JOBS, batch_job("fixed", run_seconds="100"))
        patch = {
            "spec": {
                "template": {
                    "spec": {"nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"}}
                }
            }
        }
        with pytest.raises(ApiError) as err:
            cluster.store.patch(JOBS, "fixed", patch, namespace="ml", patch_type=PatchType.MERGE)
        assert err.value.code == 422
        assert err.value.reason == "Invalid"
        assert 'Job.batch "fixed" is invalid: spec.template' in err.value.message
        assert "field is immutable" in err.value.message
        unchanged = cluster.store.get(JOBS, "fixed", namespace="ml")
        assert "nodeSelector" not in unchanged["spec"]["template"]["spec"]


def test_suspended_job_deletes_pods_and_accepts_scheduling_edits() -> None:
    with running(fast("seed-degraded")) as cluster:
        cluster.store.create(JOBS, batch_job("pausable", run_seconds="100"))
        wait(cluster, lambda: len(pods(cluster, selector="job-name=pausable")) == 1)
        cluster.store.patch(
            JOBS,
            "pausable",
            {"spec": {"suspend": True}},
            namespace="ml",
            patch_type=PatchType.MERGE,
        )
        wait(cluster, lambda: not pods(cluster, selector="job-name=pausable"))
        wait(
            cluster,
            lambda: (
                "startTime" not in cluster.store.get(JOBS, "pausable", namespace="ml")["status"]
            ),
        )
        patch = {
            "spec": {
                "template": {
                    "spec": {"nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"}}
                }
            }
        }
        cluster.store.patch(JOBS, "pausable", patch, namespace="ml", patch_type=PatchType.MERGE)
        with pytest.raises(ApiError):  # the image is not a scheduling directive
            cluster.store.patch(JOBS, "pausable", {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "y"}]}}}},
                                namespace="ml", patch_type=PatchType.MERGE)  # fmt: skip
        cluster.store.patch(
            JOBS,
            "pausable",
            {"spec": {"suspend": False}},
            namespace="ml",
            patch_type=PatchType.MERGE,
        )
        wait(cluster, lambda: len(pods(cluster, selector="job-name=pausable")) == 1)
        (pod,) = pods(cluster, selector="job-name=pausable")
        assert pod["spec"]["nodeSelector"] == {"topology.kubernetes.io/zone": "us-east-1a"}


def test_indexed_job_pods_carry_their_completion_index() -> None:
    with running(fast("seed-degraded")) as cluster:
        job = batch_job("indexed", completions=3, parallelism=2, run_seconds="0.2")
        job["spec"]["completionMode"] = "Indexed"
        cluster.store.create(JOBS, job)
        wait(cluster, lambda: len(pods(cluster, selector="job-name=indexed")) == 2)
        first = pods(cluster, selector="job-name=indexed")
        assert sorted(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
                      for p in first) == ["0", "1"]  # the lowest indexes first, up to parallelism
        for pod in first:
            index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            assert pod["metadata"]["name"].startswith(f"indexed-{index}-")
            assert pod["spec"]["hostname"] == f"indexed-{index}"
            (env,) = pod["spec"]["containers"][0]["env"]
            assert env == {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                "apiVersion": "v1",
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}
        wait(cluster, lambda: (cluster.store.get(JOBS, "indexed", namespace="ml").get("status")
                               or {}).get("completedIndexes") == "0-2")
        status = cluster.store.get(JOBS, "indexed", namespace="ml")["status"]
        assert status["succeeded"] == 3 and status["active"] == 0
        assert any(c["type"] == "Complete" and c["status"] == "True" for c in status["conditions"])
        indexes = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                         for p in pods(cluster, selector="job-name=indexed"))
        assert indexes == ["0", "1", "2"]  # one succeeded pod per index, none run twice


@pytest.mark.parametrize(("indexes", "text"), [
    (set(), ""), ({0}, "0"), ({0, 1, 2}, "0-2"), ({0, 2, 3, 5}, "0,2-3,5")])
def test_completed_indexes_are_compressed(indexes: set[int], text: str) -> None:
    assert compress_indexes(indexes) == text
