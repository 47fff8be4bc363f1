"""A twin cluster (served over HTTP, or as deploy/base's ServiceAccount with exactly its RBAC,
optionally scraped by a real Prometheus: both started by the one agent rig), a migrated SQLite
store, and an incident driven to `approved` through the store's public API, for remediation
tests, the tests' agent rig and the benchmark; with the readers those tests share (the seed job, the lab group and its pods, a second
worker Job placed outside the target zone)."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from agent.model.cluster import ZONE_LABEL
from agent.model.finding import Finding
from agent.model.incident import Actor, FindingRecord
from agent.model.job import JobRef
from agent.model.lifecycle import (
    DecisionOutcome,
    DecisionSource,
    IncidentStatus,
    RemediationActionKind,
)
from agent.model.workload import JobKind, workload
from agent.remediation.plan import Plan
from agent.remediation.remediator import Remediator
from agent.rig.rig import AgentRig
from agent.runtime.rediagnosis import ApiRediagnosis
from agent.settings import (
    DatabaseSettings,
    DiagnosisSettings,
    GroupSpec,
    KubernetesSettings,
    PrometheusSettings,
    RemediationSettings,
)
from agent.sources.kubeapi import KubeApi, build_api_client
from agent.sources.prometheus import PrometheusSource
from agent.store.engine import make_engine
from agent.store.migrate import upgrade
from agent.store.repository import IncidentStore, open_store
from agent.twin.access import read_manifests
from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from agent.twin.scenario import Scenario
from tests.support.prometheus import PROMETHEUS, PrometheusServer
from tests.twin.twin_fixtures import fast

ZONE = "topology.kubernetes.io/zone"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "base"
JOB = JobRef(JobKind.PYTORCH, "ml", "llm-finetune")
JOB_PATH = "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llm-finetune"
NS = "ml-lab"
LAB = JobRef(JobKind.GROUP, NS, "llm-pretrain")
GROUPS = DiagnosisSettings(groups=[GroupSpec(
    name="llm-pretrain", namespace=NS, selector={"app": "llm-pretrain"},
    coordinator={"role": "coordinator"}, workers={"role": "worker"}, ports=[29500],
)])  # fmt: skip
FAST = RemediationSettings(
    suspend_timeout=timedelta(seconds=15), schedule_timeout=timedelta(seconds=6),
    verify_window=timedelta(seconds=30), recovery_fraction=0.8,
    max_conflict_retries=3, poll_interval=timedelta(milliseconds=100),
)  # fmt: skip
# a kill walk's runs must not time out into a rollback on a loaded machine (the CI runs three
# workers on two cores): the waits' bounds are generous, the polls as fast as FAST's
PATIENT = replace(FAST, suspend_timeout=timedelta(seconds=90), schedule_timeout=timedelta(seconds=60))
# the store's retry budget during an outage: short, so a refused record gives up fast
OUTAGE_BUDGET = {"write_retry": timedelta(milliseconds=300), "busy_timeout": timedelta(milliseconds=100)}
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


@dataclass
class Lab:
    cluster: TwinCluster
    kubeconfig: Path
    api: KubeApi
    prometheus: Any | None  # tests.support.prometheus.PrometheusServer
    diagnose: ApiRediagnosis

    def source(self) -> PrometheusSource | None:
        if self.prometheus is None:
            return None
        return PrometheusSource(PrometheusSettings(
            url=self.prometheus.url, timeout=timedelta(seconds=5), retries=0,
            drop_duration=timedelta(seconds=20), baseline_offset=timedelta(hours=1),
        ))  # fmt: skip

    def remediator(self, store: IncidentStore, **kw: Any) -> Remediator:
        kw.setdefault("settings", FAST)
        kw.setdefault("prometheus", self.source())
        kw.setdefault("protected_namespaces", self.diagnose.settings.protected_namespaces)
        return Remediator(self.api, store, diagnose=self.diagnose, **kw)

    def writes(self) -> dict[str, int]:
        assert self.cluster.api is not None
        counts: dict[str, int] = self.cluster.api.accounting.snapshot()
        return {k: v for k, v in counts.items() if k.split(" ")[0] in WRITE_VERBS}

    def reset_accounting(self) -> None:
        assert self.cluster.api is not None
        self.cluster.api.accounting.reset()


class Terms:
    """A replica's leadership terms as a test drives them: it leads in term 0 at first; `lose()`
    ends the term, `lead()` starts the next one."""

    def __init__(self) -> None:
        self._term = 0
        self._leading = True

    def term(self) -> int | None:
        return self._term if self._leading else None

    def lose(self) -> None:
        self._leading = False

    def lead(self) -> None:
        self._term += 1
        self._leading = True


def deploy_namespace() -> str:
    """The namespace deploy/base's kustomization puts the agent in (its Lease is there)."""
    return str(yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["namespace"])


def deploy_rbac() -> list[dict[str, Any]]:
    """deploy/base's ServiceAccount and RBAC objects, in the kustomization's namespace (as
    kustomize renders them): what `TwinCluster.serve_api_as` loads to serve the agent's rights."""
    return read_manifests([DEPLOY / "serviceaccount.yaml", DEPLOY / "rbac.yaml"],
                          namespace=deploy_namespace())


def quick(name: str) -> Scenario:
    """A packaged scenario with fast pods and quick connection give-up (see twin_fixtures.fast)."""
    scenario = fast(name)
    return replace(scenario, model=replace(scenario.model, pod_stop_seconds=0.05))


@contextmanager
def running_lab(
    tmp_path: Path, scenario: str | Scenario, *, prometheus: bool = False,
    diagnosis: DiagnosisSettings | None = None, rbac: bool = False,
) -> Iterator[Lab]:  # fmt: skip
    """The twin serving `scenario`, started by the one agent rig in `tmp_path` (no agent: the
    tests build their remediator); with `rbac`, over TLS as the agent's ServiceAccount with
    exactly the rights deploy/base/rbac.yaml grants."""
    with AgentRig(tmp_path) as rig:
        loaded = quick(scenario) if isinstance(scenario, str) else scenario
        cluster = rig.start_twin(loaded, rbac=deploy_rbac() if rbac else None)
        api_client = build_api_client(KubernetesSettings(kubeconfig=str(rig.kubeconfig)))
        rig.callback(api_client.close)
        prom = (rig.start_prometheus(binary=Path(PROMETHEUS), server=PrometheusServer)
                if prometheus else None)  # fmt: skip
        api = KubeApi(api_client)
        yield Lab(cluster, rig.kubeconfig, api, prom, ApiRediagnosis(api, diagnosis or DiagnosisSettings()))


def migrated_template(directory: Path) -> Path:
    path = directory / "template.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine, DatabaseSettings())
    engine.dispose()
    return path


def new_store(
    template: Path, directory: Path, *, write_retry: timedelta = timedelta(seconds=5),
    busy_timeout: timedelta = timedelta(seconds=30),
) -> tuple[IncidentStore, str]:  # fmt: skip
    """A copy of the migrated template in `directory/incidents.db`, opened with these budgets."""
    path = directory / "incidents.db"
    shutil.copy(template, path)
    url = f"sqlite:///{path}"
    settings = DatabaseSettings(write_retry=write_retry, busy_timeout=busy_timeout)
    return open_store(settings, url=url), url


def settled_finding(lab: Lab, ref: JobRef = JOB, *, timeout: float = 45.0) -> Finding:
    """The job's finding once it is remediable in consecutive diagnoses over a quarter second
    (pods just bound flap while the twin stamps their zone labels)."""
    deadline = time.monotonic() + timeout
    streak = 0
    while time.monotonic() < deadline:
        finding = lab.diagnose(ref).finding
        streak = streak + 1 if finding is not None and finding.remediable else 0
        if streak >= 6 and finding is not None:
            return finding
        time.sleep(0.05)
    raise AssertionError(f"{ref} never settled split and remediable")


def approved_incident(
    lab: Lab, store: IncidentStore, *, ref: JobRef = JOB, utilization: float | None = None
) -> int:
    """Diagnose the job, record the finding, approve it from the CLI (the store's public API)."""
    finding = settled_finding(lab, ref)
    document = finding.to_dict()
    if ref.kind is not JobKind.GROUP:
        kind = workload(ref.kind)
        job = lab.api.json("GET", f"/apis/{kind.api_version}/namespaces/{ref.namespace}/{kind.plural}/{ref.name}")
        document["job"]["uid"] = job["metadata"]["uid"]
    now = datetime.now(UTC)
    record = FindingRecord.from_finding(document, cluster="twin", detected_at=now,
                                        utilization_now=utilization, gpus=4)  # fmt: skip
    incident = store.record_finding(record).incident
    decided = store.record_decision(
        incident.id, DecisionOutcome.APPROVE, actor=Actor("alice", "alice", DecisionSource.CLI),
        now=now, expected=IncidentStatus.OPEN,
    )  # fmt: skip
    assert decided.applied
    return incident.id


# ------------------------------------------------------------------------------------------------
# what the tests read


def split(lab: Lab) -> None:
    settled_finding(lab)


def served_job(lab: Lab) -> dict[str, Any]:
    """The seed PyTorchJob as the API serves it."""
    found: dict[str, Any] = lab.api.json("GET", JOB_PATH)
    return found


def resumes(lab: Lab) -> int:
    """How many times the seed job was resumed (the operator's events, the admin's view)."""
    events = lab.cluster.store.list(lookup("events"), namespace="ml")[0]
    return sum(int(e.get("count", 1)) for e in events if e.get("reason") == "PyTorchJobResumed")


def recorded_plan(store: IncidentStore, incident_id: int) -> Plan:
    actions = [a for a in store.get_incident(incident_id).actions if a.kind is RemediationActionKind.PLAN]
    return Plan.from_dict(actions[-1].payload["plan"])


def recorded_steps(store: IncidentStore, incident_id: int) -> list[str]:
    return [str(a.payload.get("step")) for a in store.get_incident(incident_id).actions]


def pods(lab: Lab) -> list[dict[str, Any]]:
    """The lab namespace's pods, Terminating ones left out."""
    return [p for p in lab.api.json("GET", f"/api/v1/namespaces/{NS}/pods")["items"]
            if not p["metadata"].get("deletionTimestamp")]  # fmt: skip


def node_zones(lab: Lab) -> dict[str, str]:
    return {n["metadata"]["name"]: n["metadata"]["labels"][ZONE]
            for n in lab.api.json("GET", "/api/v1/nodes")["items"]}  # fmt: skip


def zones(lab: Lab) -> dict[str, str]:
    """Pod -> zone of its node, for the lab's bound live pods."""
    nodes = node_zones(lab)
    return {p["metadata"]["name"]: nodes[p["spec"]["nodeName"]] for p in pods(lab)
            if p["spec"].get("nodeName")}  # fmt: skip


def bound(lab: Lab) -> dict[str, int]:
    """Pods per zone, once every live pod of the namespace is bound (else empty)."""
    live = pods(lab)
    if not live or not all(p["spec"].get("nodeName") for p in live):
        return {}
    nodes = node_zones(lab)
    return dict(Counter(nodes[p["spec"]["nodeName"]] for p in live))


def lab_job(lab: Lab, name: str) -> dict[str, Any] | None:
    """A batch Job of the lab namespace, or None when there is none of that name."""
    found = [j for j in lab.api.json("GET", f"/apis/batch/v1/namespaces/{NS}/jobs")["items"]
             if j["metadata"]["name"] == name]  # fmt: skip
    return found[0] if found else None


def add_zone_b_workers(
    lab: Lab, *, name: str = "llm-workers-b", annotations: dict[str, str] | None = None,
    restart_policy: str = "OnFailure", backoff_limit: int | None = None, settle: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """A second worker Job whose two pods land in zone-b (a GPU node added there), once the lab's
    own pods are placed; returns the Job. `settle`: wait until its pods are bound there too."""
    from kubernetes import client

    # the lab's own pods placed first: a worker of `llm-workers` (nodeSelector gpu=true, no zone)
    # still pending when the zone-b GPU node appears may land there
    assert lab.cluster.wait_until(lambda: bound(lab) == {"zone-a": 4, "zone-b": 1}, timeout=60), bound(lab)
    core = client.CoreV1Api(lab.api.api_client)
    if "gpu-b-0" not in node_zones(lab):
        capacity = {"cpu": "48", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
        core.create_node({"metadata": {"name": "gpu-b-0", "labels": {
            ZONE: "zone-b", "gpu": "true", "kubernetes.io/hostname": "gpu-b-0"}},
            "status": {"allocatable": capacity, "capacity": capacity}})  # fmt: skip
    spec: dict[str, Any] = {"parallelism": 2, "completions": 2, "template": {
        "metadata": {"labels": {"app": "llm-pretrain", "role": "worker", "zone": "zone-b"},
                     "annotations": dict(annotations or {})},
        "spec": {"restartPolicy": restart_policy, "nodeSelector": {"gpu": "true", ZONE: "zone-b"},
                 "containers": [{"name": "main", "image": "registry.example.com/llm-pretrain:2.1",
                                 "resources": {"requests": {"cpu": "4", "memory": "16Gi",
                                                            "nvidia.com/gpu": "1"},
                                               "limits": {"nvidia.com/gpu": "1"}}}]}}}  # fmt: skip
    if backoff_limit is not None:
        spec["backoffLimit"] = backoff_limit
    client.BatchV1Api(lab.api.api_client).create_namespaced_job(
        NS, {"metadata": {"name": name, "labels": {"app": "llm-pretrain"}}, "spec": spec})
    if settle:
        assert lab.cluster.wait_until(lambda: bound(lab) == {"zone-a": 4, "zone-b": 3}, timeout=60), bound(lab)
    found = lab_job(lab, name)
    assert found is not None
    return found


def cordon(lab: Lab, zone: str) -> None:
    from kubernetes import client

    for node in lab.api.json("GET", "/api/v1/nodes")["items"]:
        if node["metadata"]["labels"].get(ZONE) == zone:
            client.CoreV1Api(lab.api.api_client).patch_node(
                node["metadata"]["name"], {"spec": {"unschedulable": True}},
                _content_type="application/merge-patch+json",
            )


def pod_zones(lab: Lab, namespace: str = "ml") -> dict[str, int]:
    """How many of the namespace's pods each zone holds (by their nodes' zone labels)."""
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"].get(ZONE_LABEL)
             for n in lab.api.json("GET", "/api/v1/nodes")["items"]}  # fmt: skip
    out: dict[str, int] = {}
    for pod in lab.api.json("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]:
        zone = str(nodes.get(pod["spec"].get("nodeName")))
        out[zone] = out.get(zone, 0) + 1
    return out
