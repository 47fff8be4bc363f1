"""The `lab` scenario: the seed lab's generic group, split and blocked, then fixed by hand.

A coordinator Deployment lands in zone-b (it does not tolerate the GPU taint of zone-a's nodes), its
GPU worker Job in zone-a; the lab's zone policies deny every worker -> coordinator connection. The
diagnosis core (with the group declared as the scenario declares it) calls it zone_split_blocked
with target zone-a; the exporter's DCGM utilization reads near 0% until the coordinator's template
is patched through the API server (zone pin, GPU toleration, `zone: zone-a`), then recovers while
the workers keep running where they were.
"""

from __future__ import annotations

import copy
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families

from agent.diagnosis.diagnose import diagnose_cluster
from agent.model.verdict import Verdict
from agent.policy.evaluator import PolicySet
from agent.settings import DiagnosisSettings, GroupSpec
from agent.snapshot.collection import parse_snapshot
from agent.twin import kubeconfig
from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from agent.twin.scenario import Scenario, load_scenario
from agent.twin.training import TrainingParams
from agent.twin.training_runtime import ATTEMPTS_ANNOTATION, RETRY_ANNOTATION, retry_behaviour
from tests.twin.twin_fixtures import fast, pods, running, wait

NS = "ml-lab"
ZONE = "topology.kubernetes.io/zone"
SNAPSHOT_KINDS = (
    lookup("nodes"),
    lookup("namespaces"),
    lookup("pods"),
    lookup("ciliumnetworkpolicies", group="cilium.io"),
    lookup("deployments", group="apps"),
    lookup("replicasets", group="apps"),
    lookup("jobs", group="batch"),
)


def live(cluster: TwinCluster) -> list[dict[str, Any]]:
    return [p for p in pods(cluster, NS) if not p["metadata"].get("deletionTimestamp")]


def role(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"]["role"])


def node_zone(cluster: TwinCluster, pod: dict[str, Any]) -> str:
    node = cluster.store.get(lookup("nodes"), pod["spec"]["nodeName"])
    return str(node["metadata"]["labels"][ZONE])


def all_five_running(cluster: TwinCluster) -> bool:
    found = live(cluster)
    return len(found) == 5 and all(p["status"].get("phase") == "Running" for p in found)


def gpu_utilization(cluster: TwinCluster) -> dict[str, float]:
    """DCGM_FI_DEV_GPU_UTIL per pod of the lab, scraped from the twin's exporter."""
    with urllib.request.urlopen(cluster.metrics.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "DCGM_FI_DEV_GPU_UTIL" and sample.labels.get("namespace") == NS:
                out[sample.labels["pod"]] = sample.value
    return out


@pytest.fixture
def lab() -> Iterator[TwinCluster]:
    with running(fast("lab")) as cluster:
        wait(cluster, lambda: all_five_running(cluster))
        yield cluster


def test_the_lab_places_the_coordinator_in_zone_b_and_the_gpu_workers_in_zone_a(
    lab: TwinCluster,
) -> None:
    placed = {(role(p), p["metadata"]["labels"]["zone"], node_zone(lab, p)) for p in live(lab)}
    assert placed == {("coordinator", "zone-b", "zone-b"), ("worker", "zone-a", "zone-a")}
    assert sum(role(p) == "worker" for p in live(lab)) == 4


def test_the_diagnosis_calls_the_lab_a_blocked_split_group_with_target_zone_a(
    lab: TwinCluster,
) -> None:
    items = [o for rt in SNAPSHOT_KINDS for o in lab.store.list(rt)[0]]
    snapshot = parse_snapshot([("twin", orjson.dumps({"kind": "List", "items": items}))])
    groups = [GroupSpec(**g.as_config()) for g in load_scenario("lab").groups]
    settings = DiagnosisSettings(pod_zone_label="zone", groups=groups)
    findings = diagnose_cluster(
        snapshot.state, PolicySet(snapshot.policies), settings=settings
    ).findings
    (finding,) = [f for f in findings if f.job.name == "llm-pretrain"]
    assert finding.job.namespace == NS
    assert finding.verdict is Verdict.ZONE_SPLIT_BLOCKED
    assert finding.target_zone == "zone-a" and finding.remediable


def test_gpus_idle_while_blocked_and_recover_once_the_coordinator_moves_to_zone_a(
    lab: TwinCluster, tmp_path: Path
) -> None:
    workers_before = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in live(lab)
                      if role(p) == "worker"}  # fmt: skip
    wait(lab, lambda: set(gpu_utilization(lab)) == set(workers_before))
    blocked = gpu_utilization(lab)
    assert all(value < 5 for value in blocked.values()), blocked
    assert lab.runtime.drops(), "the workers' connection attempts are policy drops"

    server = lab.serve_api()
    api = config.new_client_from_config(
        config_file=str(kubeconfig.write(tmp_path / "kubeconfig", server.url))
    )
    try:
        apps = client.AppsV1Api(api)
        # The fix by hand, as the seed's engineers applied it: the coordinator alone moves.
        apps.patch_namespaced_deployment(
            "rendezvous",
            NS,
            {"spec": {"template": {
                "metadata": {"labels": {"zone": "zone-a"}},
                "spec": {
                    "nodeSelector": {ZONE: "zone-a"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                     "effect": "NoSchedule"}],
                },
            }}},
        )  # fmt: skip
    finally:
        api.close()

    def coordinator_moved() -> bool:
        found = live(lab)
        coordinators = [p for p in found if role(p) == "coordinator"]
        return (
            len(found) == 5
            and len(coordinators) == 1
            and coordinators[0]["status"].get("phase") == "Running"
            and coordinators[0]["metadata"]["labels"]["zone"] == "zone-a"
            and node_zone(lab, coordinators[0]) == "zone-a"
        )

    wait(lab, coordinator_moved)
    wait(lab, lambda: all(v >= 80 for v in gpu_utilization(lab).values()))
    recovered = gpu_utilization(lab)
    assert set(recovered) == set(workers_before) and min(recovered.values()) >= 80
    workers_after = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in live(lab)
                     if role(p) == "worker"}  # fmt: skip
    assert workers_after == workers_before  # the GPU workers were left running where they were


def _workers_template(scenario: Scenario) -> dict[str, Any]:
    (job,) = [o for o in scenario.objects if o["kind"] == "Job"]
    return job


def test_the_packaged_lab_workers_give_up_as_the_labs_do() -> None:
    """24 connection attempts 7.5 s apart (about 3 minutes), restartPolicy Never, backoffLimit 3."""
    job = _workers_template(load_scenario("lab"))
    template = job["spec"]["template"]
    assert template["spec"]["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 3
    assert retry_behaviour(template, TrainingParams()) == (24, 7.5)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [({}, (3, 5.0)),
     ({ATTEMPTS_ANNOTATION: "24", RETRY_ANNOTATION: "7.5"}, (24, 7.5)),
     ({ATTEMPTS_ANNOTATION: "0", RETRY_ANNOTATION: "-1"}, (1, 0.0)),
     ({ATTEMPTS_ANNOTATION: "many"}, (3, 5.0))],
)  # fmt: skip
def test_a_pods_retry_behaviour_comes_from_its_annotations_else_the_scenario(
    annotations: dict[str, str], expected: tuple[int, float]
) -> None:
    assert retry_behaviour({"metadata": {"annotations": annotations}}, TrainingParams()) == expected


def test_blocked_lab_workers_give_up_their_pods_fail_and_then_the_job() -> None:
    scenario = fast("lab")
    job = copy.deepcopy(_workers_template(scenario))
    job["spec"]["template"]["metadata"]["annotations"] = {ATTEMPTS_ANNOTATION: "2", RETRY_ANNOTATION: "0.1"}
    scenario = replace(scenario, objects=[job if o["kind"] == "Job" else o for o in scenario.objects])
    with running(scenario) as cluster:
        def failed() -> bool:
            found = cluster.store.get(lookup("jobs", group="batch"), "llm-workers", namespace=NS)
            return any(c["type"] == "Failed" and c["status"] == "True"
                       and c["reason"] == "BackoffLimitExceeded"
                       for c in found.get("status", {}).get("conditions") or [])  # fmt: skip

        wait(cluster, failed)
        # the Job controller removes what is still active; the failed pods stay
        wait(cluster, lambda: all(p["status"]["phase"] == "Failed" for p in pods(cluster, NS) if role(p) == "worker"))
        workers = [p for p in pods(cluster, NS) if role(p) == "worker"]
        assert len(workers) >= 4
        message = workers[0]["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
        assert "timed out after 2 attempts (network policy drop)" in message
        (coordinator,) = [p for p in live(cluster) if role(p) == "coordinator"]
        assert coordinator["status"]["phase"] == "Running"  # it waits for workers that are gone
