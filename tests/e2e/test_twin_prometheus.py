"""End to end: a real Prometheus scrapes the twin; the incident, the fix by hand, the hard block.

The twin serves the Kubernetes API over HTTP (driven here by the official `kubernetes` client) and
its metrics endpoint (scraped every second by `/usr/bin/prometheus`). The per-job utilization
query is the agent's own (`agent.sources.prometheus`), verbatim.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from agent.diagnosis.egress import EgressIndex, JobEnds
from agent.model.egress import EgressExporter, MeasuredEgress
from agent.model.job import JobRef
from agent.model.workload import JobKind
from agent.settings import EgressSettings, PrometheusSettings
from agent.sources.egress import EgressMeter
from agent.sources.prometheus import PrometheusSource
from agent.twin import kubeconfig
from agent.twin.cluster import TwinCluster
from agent.twin.training import bytes_sent_per_step
from tests.support.prometheus import requires_prometheus, running_prometheus
from tests.support.waiting import wait
from tests.twin.twin_fixtures import fast

pytestmark = [pytest.mark.prometheus, requires_prometheus]

KINDS = "PyTorchJob|TFJob|MPIJob|XGBoostJob|PaddleJob|JAXJob"
PER_JOB_UTILIZATION = (
    'avg by (namespace, created_by_name) (DCGM_FI_DEV_GPU_UTIL{pod!=""} * on (namespace, pod) '
    "group_left (created_by_name) max by (namespace, pod, created_by_name) "
    f'(kube_pod_info{{created_by_kind=~"{KINDS}"}}))'
)
ZONE = "topology.kubernetes.io/zone"
JOB = "llm-finetune"


def job_utilization(result: list[dict[str, Any]]) -> float | None:
    for sample in result:
        if sample["metric"].get("created_by_name") == JOB:
            return float(sample["value"][1])
    return None


def between(low: float, high: float) -> Any:
    def check(result: list[dict[str, Any]]) -> bool:
        value = job_utilization(result)
        return value is not None and low <= value <= high

    return check


class Twin:
    def __init__(self, cluster: TwinCluster, api: client.ApiClient, prometheus: Any) -> None:
        self.cluster = cluster
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.prometheus = prometheus

    def pods(self) -> list[Any]:
        return list(self.core.list_namespaced_pod("ml").items)

    def zones(self) -> set[str]:
        nodes = {n.metadata.name: n.metadata.labels[ZONE] for n in self.core.list_node().items}
        return {nodes[p.spec.node_name] for p in self.pods()}


def twin_with_prometheus(tmp_path: Path, scenario: str) -> Iterator[Twin]:
    with TwinCluster(fast(scenario)) as cluster:
        api = cluster.serve_api()
        path = kubeconfig.write(tmp_path / "kubeconfig", api.url)
        api_client = config.new_client_from_config(config_file=str(path))
        target = cluster.metrics.url.removeprefix("http://")
        with running_prometheus(tmp_path, scrape_targets=[target], scrape_interval="1s") as prom:
            try:
                yield Twin(cluster, api_client, prom)
            finally:
                api_client.close()


@pytest.fixture
def degraded(tmp_path: Path) -> Iterator[Twin]:
    yield from twin_with_prometheus(tmp_path, "seed-degraded")


@pytest.fixture
def blocked(tmp_path: Path) -> Iterator[Twin]:
    yield from twin_with_prometheus(tmp_path, "seed-blocked")


def test_split_job_reads_about_40_percent_and_the_fix_brings_it_to_about_85(degraded: Twin) -> None:
    degraded.prometheus.wait_for(PER_JOB_UTILIZATION, between(35, 45), timeout=30)
    assert degraded.zones() == {"us-east-1a", "us-east-1b"}

    # The fix by hand, as an operator would do it with the Python client (merge patch).
    job = degraded.custom.get_namespaced_custom_object("kubeflow.org", "v1", "ml", "pytorchjobs", JOB)
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    tolerations = [*master.get("tolerations", []), {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    patch = {
        "metadata": {"resourceVersion": job["metadata"]["resourceVersion"]},
        "spec": {
            "runPolicy": {"suspend": True},
            "pytorchReplicaSpecs": {"Master": {"template": {"spec": {
                "nodeSelector": {ZONE: "us-east-1a"},
                "tolerations": tolerations,
                "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "topologyKey": ZONE,
                    "labelSelector": {"matchLabels": {"training.kubeflow.org/job-name": JOB}},
                }]}},
            }}}},
        },
    }  # fmt: skip
    degraded.custom.patch_namespaced_custom_object("kubeflow.org", "v1", "ml", "pytorchjobs", JOB, patch)
    deadline = time.monotonic() + 20
    while degraded.pods() and time.monotonic() < deadline:  # Terminating pods included
        time.sleep(0.05)
    assert not degraded.pods()
    degraded.custom.patch_namespaced_custom_object(
        "kubeflow.org", "v1", "ml", "pytorchjobs", JOB, {"spec": {"runPolicy": {"suspend": False}}}
    )
    degraded.prometheus.wait_for(PER_JOB_UTILIZATION, between(80, 90), timeout=30)
    assert degraded.zones() == {"us-east-1a"}
    assert len(degraded.pods()) == 5


def test_blocked_job_reads_near_zero_and_shows_policy_drops(blocked: Twin) -> None:
    blocked.prometheus.wait_for(
        'sum(hubble_drop_total{reason=~"POLICY_DENIED|POLICY_DENY", destination_pod="llm-finetune-master-0"})',
        lambda r: bool(r) and float(r[0]["value"][1]) > 0,
        timeout=30,
    )
    result = blocked.prometheus.wait_for(
        PER_JOB_UTILIZATION, lambda r: job_utilization(r) is not None, timeout=30
    )
    value = job_utilization(result)
    assert value is not None and value < 5
    # the workers crash-loop: restarts show in kube-state-metrics
    blocked.prometheus.wait_for(
        'sum(kube_pod_container_status_restarts_total{namespace="ml"})',
        lambda r: bool(r) and float(r[0]["value"][1]) > 0,
        timeout=30,
    )


def test_measured_egress_of_the_split_job_matches_the_traffic_model(degraded: Twin) -> None:
    """The agent's egress meter, on the real Prometheus scraping the twin's Beyla counters,
    attributes to the split job the bytes its two zone-crossing ring pairs send: the model's
    per-rank all-reduce bytes per step over the step time, twice (once the rate window holds
    only training: a rate over a window longer than the series reads lower)."""
    degraded.prometheus.wait_for(
        'count(beyla_network_flow_bytes_total{k8s_src_owner_name="llm-finetune"})',
        lambda r: bool(r) and float(r[0]["value"][1]) == 5, timeout=30)
    state = degraded.cluster.runtime.job_state("ml", JOB)
    assert state.timing is not None
    training = degraded.cluster.scenario.model.training
    expected = 2 * bytes_sent_per_step(len(state.participants), training.gradient_bytes) / (
        state.timing.step)
    url = degraded.prometheus.url
    meter = EgressMeter(PrometheusSource(PrometheusSettings(url=url, retries=0)),
                        EgressSettings(window=timedelta(seconds=10)))
    ends = JobEnds("ml", frozenset(state.participants), frozenset({JOB}))
    found: list[MeasuredEgress] = []

    def measured() -> bool:
        time.sleep(0.5)  # a scrape interval between two looks
        report = meter.fetch(datetime.now(UTC))
        job = EgressIndex(report).job(ends) if report is not None else None
        found[:] = [job] if job is not None else []
        return bool(found) and found[0].flows == 2 and (
            abs(found[0].bytes_per_second - expected) < 0.1 * expected)

    wait(measured, timeout=40, what=f"llm-finetune's two pairs measured near {expected:.3g} B/s "
                                    f"(last: {found})")
    assert found[0].exporter is EgressExporter.BEYLA


@pytest.fixture
def trainjob(tmp_path: Path) -> Iterator[Twin]:
    yield from twin_with_prometheus(tmp_path, "trainjob")


def test_a_split_trainjob_reads_about_40_percent_through_its_jobset(trainjob: Twin) -> None:
    """The agent's own source: the TrainJob's pods are its JobSet's batch Jobs' (created_by_kind
    Job), found by the JobSet-name pod label the twin's kube-state-metrics exports."""
    source = PrometheusSource(PrometheusSettings(url=trainjob.prometheus.url, retries=0))

    def utilization() -> float | None:
        report = source.fetch(datetime.now(UTC))
        found = report.for_job(JobRef(JobKind.TRAINJOB, "ml", "llm-pretrain"))
        return found.now if found is not None and found.now is not None and 35 <= found.now <= 45 else None

    now = wait(utilization, timeout=40, what="the TrainJob's utilization near 40%")
    assert 35 <= now <= 45
    report = source.fetch(datetime.now(UTC))
    # recorded under the JobSet's kind and name (Prometheus cannot see the JobSet's owner)
    assert JobRef(JobKind.JOBSET, "ml", "llm-pretrain") in report.jobs
