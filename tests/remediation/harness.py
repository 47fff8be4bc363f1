"""A twin cluster (served over HTTP, or as deploy/base's ServiceAccount with exactly its RBAC,
optionally scraped by a real Prometheus), a migrated SQLite store, and an incident driven to
`approved` through the store's public API, for remediation tests, the agent rig and the
benchmark."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from agent.model.cluster import JobKind
from agent.model.finding import Finding
from agent.model.incident import Actor, FindingRecord
from agent.model.job import JobRef
from agent.model.lifecycle import DecisionOutcome, DecisionSource, IncidentStatus
from agent.remediation.execute import Remediator
from agent.remediation.plan import KUBEFLOW
from agent.runtime.rediagnosis import ApiRediagnosis
from agent.settings import (
    DatabaseSettings,
    DiagnosisSettings,
    KubernetesSettings,
    PrometheusSettings,
    RemediationSettings,
)
from agent.sources.kubeapi import KubeApi, build_api_client
from agent.sources.prometheus import PrometheusSource
from agent.store.engine import make_engine
from agent.store.migrate import upgrade
from agent.store.repository import IncidentStore, open_store
from agent.twin import kubeconfig
from agent.twin.access import read_manifests
from agent.twin.cluster import TwinCluster
from agent.twin.scenario import Scenario
from tests.support.prometheus import running_prometheus
from tests.twin.twin_fixtures import fast

ZONE = "topology.kubernetes.io/zone"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "base"
JOB = JobRef(JobKind.PYTORCH, "ml", "llm-finetune")
FAST = RemediationSettings(
    suspend_timeout=timedelta(seconds=15), schedule_timeout=timedelta(seconds=6),
    verify_window=timedelta(seconds=30), recovery_fraction=0.8,
    max_conflict_retries=3, poll_interval=timedelta(milliseconds=100),
)  # fmt: skip
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
    """The twin serving `scenario`; with `rbac`, over TLS as the agent's ServiceAccount with
    exactly the rights deploy/base/rbac.yaml grants."""
    with ExitStack() as stack:
        loaded = quick(scenario) if isinstance(scenario, str) else scenario
        cluster = stack.enter_context(TwinCluster(loaded))
        if rbac:
            path = cluster.serve_api_as(deploy_rbac()).kubeconfig(tmp_path / "kubeconfig")
        else:
            server = cluster.serve_api()
            path = kubeconfig.write(tmp_path / "kubeconfig", server.url)
        api_client = build_api_client(KubernetesSettings(kubeconfig=str(path)))
        stack.callback(api_client.close)
        prom = None
        if prometheus:
            target = cluster.metrics.url.removeprefix("http://")
            prom = stack.enter_context(
                running_prometheus(tmp_path, scrape_targets=[target], scrape_interval="1s")
            )
        api = KubeApi(api_client)
        yield Lab(cluster, path, api, prom, ApiRediagnosis(api, diagnosis or DiagnosisSettings()))


def migrated_template(directory: Path) -> Path:
    path = directory / "template.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine, DatabaseSettings())
    engine.dispose()
    return path


def new_store(template: Path, directory: Path) -> tuple[IncidentStore, str]:
    path = directory / "incidents.db"
    shutil.copy(template, path)
    url = f"sqlite:///{path}"
    return open_store(DatabaseSettings(write_retry=timedelta(seconds=5)), url=url), url


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
        plural = KUBEFLOW[ref.kind].plural
        job = lab.api.json("GET", f"/apis/kubeflow.org/v1/namespaces/{ref.namespace}/{plural}/{ref.name}")
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
