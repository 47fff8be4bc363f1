"""The metrics endpoint, scraped over HTTP and parsed with prometheus_client's text parser."""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.twin.exporter import beyla_owner, label_name
from tests.twin.twin_fixtures import all_running, fast, running, wait
from tests.twin.waiting import eventually


def scrape(url: str) -> dict[str, list[Any]]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("topology.kubernetes.io/zone", "label_topology_kubernetes_io_zone"),
        ("training.kubeflow.org/job-name", "label_training_kubeflow_org_job_name"),
        ("app", "label_app"),
    ],
)
def test_label_names_like_kube_state_metrics(key: str, expected: str) -> None:
    assert label_name(key) == expected


def test_exporter_serves_dcgm_kube_state_and_network_metrics() -> None:
    with running(fast("seed-degraded")) as cluster:
        wait(cluster, all_running(cluster, 5))
        wait(cluster, lambda: cluster.runtime.job_state("ml", "llm-finetune").phase == "training")
        first = scrape(cluster.metrics.url)

        gpus = first["DCGM_FI_DEV_GPU_UTIL"]
        assert len(gpus) == 16  # 2 GPU nodes x 8 GPUs, held or not
        held = [s for s in gpus if s.labels["pod"]]
        assert sorted(s.labels["pod"] for s in held) == [
            f"llm-finetune-worker-{i}" for i in range(4)
        ]
        for s in held:
            assert s.labels["namespace"] == "ml" and s.labels["container"] == "pytorch"
            assert s.labels["modelName"] == "NVIDIA A100-SXM4-80GB"
            assert s.labels["Hostname"].startswith("gpu-a-") and s.labels["UUID"].startswith("GPU-")
            assert 35 <= s.value <= 45
        assert all(s.value == 0 for s in gpus if not s.labels["pod"])
        active = {s.labels["UUID"]: s.value for s in first["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]}
        assert all(0 <= v <= 1 for v in active.values())

        info = {s.labels["pod"]: s.labels for s in first["kube_pod_info"]}
        assert info["llm-finetune-worker-0"]["created_by_kind"] == "PyTorchJob"
        assert info["llm-finetune-worker-0"]["created_by_name"] == "llm-finetune"
        assert info["llm-finetune-master-0"]["node"].startswith("cpu-b-")
        zones = {
            s.labels["node"]: s.labels["label_topology_kubernetes_io_zone"]
            for s in first["kube_node_labels"]
        }
        assert zones["gpu-a-0"] == "us-east-1a" and zones["cpu-b-0"] == "us-east-1b"
        labels = {s.labels["pod"]: s.labels for s in first["kube_pod_labels"]}
        assert labels["llm-finetune-master-0"]["label_training_kubeflow_org_job_role"] == "master"
        assert labels["llm-finetune-worker-3"]["label_training_kubeflow_org_replica_index"] == "3"
        phases = {
            (s.labels["pod"], s.labels["phase"]): s.value for s in first["kube_pod_status_phase"]
        }
        assert phases[("llm-finetune-worker-0", "Running")] == 1
        assert phases[("llm-finetune-worker-0", "Pending")] == 0

        before = {s.labels["pod"]: s.value for s in first["container_network_transmit_bytes_total"]}
        second: dict[str, Any] = {}

        def counters_grew() -> bool:
            second.update(scrape(cluster.metrics.url))
            after = {
                s.labels["pod"]: s.value for s in second["container_network_transmit_bytes_total"]
            }
            return set(after) == set(before) == set(info) and all(
                after[p] > before[p] for p in after
            )

        assert eventually(counters_grew, timeout=10)
        assert "hubble_drop_total" not in second  # nothing is denied here


def test_beyla_counters_follow_the_traffic_model() -> None:
    """seed-degraded trains split: master in us-east-1b, workers in us-east-1a. Each participant
    sends its all-reduce bytes to its ring neighbour (participants in name order): the pair
    counter equals the sender's transmitted bytes, two pairs cross zones, and the inter-zone
    counter is their sum, with Beyla's labels."""
    with running(fast("seed-degraded")) as cluster:
        wait(cluster, lambda: cluster.runtime.job_state("ml", "llm-finetune").phase == "training")

        def flowing() -> dict[str, list[Any]] | None:
            found = scrape(cluster.metrics.url)
            flows = found.get("beyla_network_flow_bytes_total", [])
            return found if len(flows) == 5 and all(s.value > 0 for s in flows) else None

        assert eventually(lambda: flowing() is not None, timeout=10)
        found = flowing()
        assert found is not None
        flows = {(s.labels["k8s_src_name"], s.labels["k8s_dst_name"]): s
                 for s in found["beyla_network_flow_bytes_total"]}  # fmt: skip
        ring = ["llm-finetune-master-0", *(f"llm-finetune-worker-{i}" for i in range(4))]
        assert set(flows) == set(zip(ring, ring[1:] + ring[:1], strict=True))
        first = flows[("llm-finetune-master-0", "llm-finetune-worker-0")].labels
        assert first == {
            "k8s_cluster_name": "twin",
            "k8s_src_namespace": "ml", "k8s_src_name": "llm-finetune-master-0",
            "k8s_src_type": "Pod", "k8s_src_owner_name": "llm-finetune",
            "k8s_src_owner_type": "PyTorchJob",
            "k8s_dst_namespace": "ml", "k8s_dst_name": "llm-finetune-worker-0",
            "k8s_dst_type": "Pod", "k8s_dst_owner_name": "llm-finetune",
            "k8s_dst_owner_type": "PyTorchJob",
            "src_zone": "us-east-1b", "dst_zone": "us-east-1a",
        }  # fmt: skip
        sent = {s.labels["pod"]: s.value for s in found["container_network_transmit_bytes_total"]}
        for (src, _), sample in flows.items():
            assert sample.value == pytest.approx(sent[src], rel=0.01)
        crossing = {(s.labels["src_zone"], s.labels["dst_zone"]): s.value
                    for s in found["beyla_network_inter_zone_bytes_total"]}  # fmt: skip
        assert set(crossing) == {("us-east-1b", "us-east-1a"), ("us-east-1a", "us-east-1b")}
        assert crossing[("us-east-1b", "us-east-1a")] == pytest.approx(
            flows[("llm-finetune-master-0", "llm-finetune-worker-0")].value, rel=0.01)
        assert crossing[("us-east-1a", "us-east-1b")] == pytest.approx(
            flows[("llm-finetune-worker-3", "llm-finetune-master-0")].value, rel=0.01)


@pytest.mark.parametrize(
    ("owners", "expected"),
    [
        ([{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert"}],
         ("bert", "PyTorchJob")),
        ([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "lab-head-5d8f9c"}],
         ("lab-head", "Deployment")),
        ([{"apiVersion": "batch/v1", "kind": "Job", "name": "lab-workers"}],
         ("lab-workers", "Job")),
        ([{"apiVersion": "example.com/v1", "kind": "Rollout", "name": "r"},
          {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}], ("db", "StatefulSet")),
        ([], ("lonely-pod", "Pod")),
    ],
)  # fmt: skip
def test_owners_are_named_as_beyla_names_them(
    owners: list[dict[str, str]], expected: tuple[str, str]
) -> None:
    pod = {"metadata": {"name": "lonely-pod", "namespace": "ml", "ownerReferences": owners}}
    assert beyla_owner(pod) == expected


def test_unknown_path_is_404() -> None:
    with running(fast("seed-degraded")) as cluster, pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(cluster.metrics.url + "/nope", timeout=10)
    assert err.value.code == 404
    err.value.close()
