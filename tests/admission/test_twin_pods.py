"""End to end on the twin: a generic group placed pod by pod. Bare pods created one by one by the
official client all land in the one zone with room whose policies allow the group's flows; the
pods of a batch Job of the group, created by the twin's own Job controller, pass unchanged (the
Job was placed); a dry run records nothing; an unlabelled namespace and pods of no such group
are never sent; with `mode: warn` only warnings.

The cluster: the lab scenario without its Deployment and Job (GPU nodes, tainted, in zone-a; CPU
nodes in zone-b; policies that allow traffic only between pods labelled with the same zone and
keep the GPU workers' egress in zone-a). Without the webhook the CPU coordinator lands in zone-b
and the group splits. The agent serves its webhook on a loopback port with its own certificate,
patched into both webhooks of the configuration `zonemedic admission manifest` prints.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from kubernetes import client

from agent.model.admission import AdmissionOutcome, AdmissionRecord
from agent.model.verdict import Verdict
from agent.settings import AdmissionMode, AdmissionSettings, DiagnosisSettings, GroupSpec, Settings
from agent.sources.kubeapi import KubeApi
from agent.twin.scenario import Scenario
from tests.remediation.harness import quick
from tests.support.admission import free_port, register_webhook
from tests.support.agent_rig import RunningAgent, running_agent
from tests.support.waiting import wait

NS = "ml-lab"
ZONE = "topology.kubernetes.io/zone"
GROUP = GroupSpec(name="llm-pretrain", namespace=NS, selector={"app": "llm-pretrain"},
                  coordinator={"role": "coordinator"}, workers={"role": "worker"}, ports=[29500],
                  admit_pods=True, size=5, gpus=4)  # fmt: skip
DIAGNOSIS = DiagnosisSettings(pod_zone_label="zone", groups=[GROUP])


def scenario() -> Scenario:
    found = quick("lab")
    return replace(found, objects=[o for o in found.objects if o.get("kind") not in ("Deployment", "Job")])


def lab_pod(name: str, role: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The lab's pod of `role` as its template writes it (the coordinator: CPU, `zone: zone-b`;
    a worker: one GPU, the taint tolerated, `zone: zone-a`), as a bare Pod."""
    kind = "Deployment" if role == "coordinator" else "Job"
    owner = next(o for o in quick("lab").objects if o.get("kind") == kind)
    template = copy.deepcopy(owner["spec"]["template"])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {**template["metadata"]["labels"], **(labels or {})},
                         "annotations": dict(template["metadata"].get("annotations") or {})},
            "spec": {**template["spec"], "restartPolicy": "Never"}}  # fmt: skip


@contextmanager
def agent_with_webhook(tmp_path: Path, mode: AdmissionMode) -> Iterator[RunningAgent]:
    port = free_port()

    def enable(settings: Settings) -> Settings:
        return replace(settings, diagnosis=DIAGNOSIS, admission=AdmissionSettings(
            enabled=True, host="127.0.0.1", port=port, mode=mode))

    def register(api: KubeApi) -> None:
        register_webhook(api.api_client, namespace=NS, port=port, settings=enable(Settings()))

    with running_agent(tmp_path, scenario(), settings_change=enable, before_agent=register) as rig:
        admission = rig.agent.composition.admission
        assert admission is not None
        wait(admission.ready, timeout=30, what="the webhook to decide over a synced view")
        yield rig


def records(rig: RunningAgent) -> list[AdmissionRecord]:
    admission = rig.agent.composition.admission
    assert admission is not None and admission.webhook.records is not None
    admission.webhook.records.flush()
    return sorted(rig.store.list_admissions(), key=lambda r: r.decided_at)


def running_zones(api: client.ApiClient, names: set[str]) -> dict[str, str | None] | None:
    nodes = {n.metadata.name: n.metadata.labels.get(ZONE) for n in client.CoreV1Api(api).list_node().items}
    pods = [p for p in client.CoreV1Api(api).list_namespaced_pod(NS).items if p.metadata.name in names]
    running = [p for p in pods if p.status.phase == "Running"]
    if len(running) < len(names):
        return None
    return {p.metadata.name: nodes.get(p.spec.node_name) for p in running}


def test_a_group_of_bare_pods_created_one_by_one_lands_in_one_zone(tmp_path: Path) -> None:
    with agent_with_webhook(tmp_path, AdmissionMode.ENFORCE) as rig:
        api = client.ApiClient(rig.agent.api.api_client.configuration)
        core = client.CoreV1Api(api)
        config = client.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration("zonemedic")
        assert [bool(h.client_config.ca_bundle) for h in config.webhooks] == [True, True]

        # a dry run is answered alike and keeps nothing (not even the group's zone)
        dry = core.create_namespaced_pod(NS, lab_pod("coordinator", "coordinator"), dry_run="All")
        assert dry.spec.node_selector == {ZONE: "zone-a"}
        assert records(rig) == []

        coordinator = core.create_namespaced_pod(NS, lab_pod("coordinator", "coordinator"))
        # pinned to zone-a (room for the gang's 4 GPUs, every flow allowed once all are
        # labelled zone-a), the GPU taint tolerated, its zone label mirrored
        assert coordinator.spec.node_selector == {ZONE: "zone-a"}
        assert coordinator.metadata.labels["zone"] == "zone-a"
        assert any(t.key == "nvidia.com/gpu" for t in coordinator.spec.tolerations or [])
        names = {"coordinator"}
        for i in range(4):
            worker = core.create_namespaced_pod(NS, lab_pod(f"worker-{i}", "worker"))
            assert worker.spec.node_selector == {"gpu": "true", ZONE: "zone-a"}
            names.add(f"worker-{i}")
        placed = wait(lambda: running_zones(api, names), timeout=60, what="the group's 5 pods running")
        assert set(placed.values()) == {"zone-a"}

        first, *later = records(rig)
        assert (first.outcome, first.zone, first.kept, first.object_kind) == (
            AdmissionOutcome.PLACED, "zone-a", False, "Pod")
        assert [(r.outcome, r.zone, r.kept) for r in later] == [(AdmissionOutcome.PLACED, "zone-a", True)] * 4
        assert {r.job_name for r in [first, *later]} == {"llm-pretrain"}

        # a batch Job of the group: placed at its creation in the kept zone; its pods, made by
        # the twin's Job controller, pass the pods webhook unchanged (their template is pinned)
        job = lab_pod("more", "worker")
        client.BatchV1Api(api).create_namespaced_job(NS, {
            "metadata": {"name": "more-workers"},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {
                "metadata": job["metadata"] | {"name": None}, "spec": job["spec"]}}})  # fmt: skip
        job_pod = wait(lambda: next(iter(core.list_namespaced_pod(
            NS, label_selector="job-name=more-workers").items), None), timeout=30, what="the Job's pod")
        assert job_pod.spec.node_selector == {"gpu": "true", ZONE: "zone-a"}
        by_object = {(r.object_kind, r.object_name): r for r in records(rig)}
        assert (by_object[("Job", "more-workers")].outcome, by_object[("Job", "more-workers")].zone) == (
            AdmissionOutcome.PLACED, "zone-a")
        # (a generated name is made after admission, as kube-apiserver makes it)
        pod_record = by_object[("Pod", "more-workers-")]
        assert pod_record.outcome is AdmissionOutcome.SKIPPED
        assert "its Job more-workers is placed at its own creation" in pod_record.warning

        finding = wait(lambda: next((f for f in rig.agent.pipeline.diagnose()
                                     if f.job.name == "llm-pretrain" and f.verdict is Verdict.HEALTHY), None),
                       timeout=30, what="the agent to diagnose the group healthy")  # fmt: skip
        assert finding.job.namespace == NS
        assert rig.store.list_incidents().incidents == []

        # never sent: a namespace without the opt-in label, and a pod of no such group
        seen = len(records(rig))
        other = core.create_namespaced_pod("other", lab_pod("coordinator", "coordinator"))
        assert not (other.spec.node_selector or {}).get(ZONE)
        stray = lab_pod("stray", "coordinator")
        stray["metadata"]["labels"]["app"] = "web"
        assert not (core.create_namespaced_pod(NS, stray).spec.node_selector or {}).get(ZONE)
        assert len(records(rig)) == seen


def test_warn_mode_only_warns(tmp_path: Path) -> None:
    with agent_with_webhook(tmp_path, AdmissionMode.WARN) as rig:
        core = client.CoreV1Api(client.ApiClient(rig.agent.api.api_client.configuration))
        coordinator = core.create_namespaced_pod(NS, lab_pod("coordinator", "coordinator"))
        worker = core.create_namespaced_pod(NS, lab_pod("worker-0", "worker"))
        assert coordinator.spec.node_selector is None
        assert coordinator.metadata.labels["zone"] == "zone-b"
        assert worker.spec.node_selector == {"gpu": "true"}
        found = records(rig)
        assert [(r.outcome, r.zone) for r in found] == [(AdmissionOutcome.WARNED, "zone-a")] * 2
        assert found[0].warning.startswith("zonemedic (mode warn): would pin Pod ml-lab/coordinator")
