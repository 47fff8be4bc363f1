"""End to end on the twin: the agent's webhook places a job at creation; an unlabelled namespace is
untouched; with the webhook down, creation still succeeds (fail open) and the split is caught as
before.

The twin calls registered mutating webhooks as kube-apiserver does; the agent serves its webhook
on a loopback port, makes its own certificate and patches the CA into the configuration that
`zonemedic admission manifest` prints (the twin routes the Service `zonemedic/zonemedic` to it).
The cluster: seed-blocked's nodes and zone-boundary policies (GPU nodes in us-east-1a, CPU nodes
in us-east-1b), without its PyTorchJob; the jobs are created by the official client.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

from kubernetes import client

from agent.model.admission import AdmissionOutcome
from agent.model.verdict import Verdict
from agent.settings import AdmissionSettings, Settings
from agent.sources.kubeapi import KubeApi
from agent.twin.scenario import Scenario
from tests.remediation.harness import quick
from tests.support.admission import free_port, register_webhook
from tests.support.agent_rig import running_agent
from tests.support.waiting import wait

ZONE = "topology.kubernetes.io/zone"


def scenario() -> Scenario:
    found = quick("seed-blocked")
    return replace(found, objects=[o for o in found.objects if o.get("kind") != "PyTorchJob"])


def seed_job(name: str) -> dict[str, Any]:
    """seed-blocked's PyTorchJob under another name: a CPU master, four 1-GPU workers."""
    original = next(o for o in quick("seed-blocked").objects if o.get("kind") == "PyTorchJob")
    job = copy.deepcopy(original)
    job["metadata"] = {"name": name}
    return job


def test_a_job_created_in_an_opted_in_namespace_starts_co_located_and_opens_no_incident(
    tmp_path: Path,
) -> None:
    port = free_port()

    def enable(settings: Settings) -> Settings:
        return replace(settings, admission=AdmissionSettings(enabled=True, host="127.0.0.1", port=port))

    def register(api: KubeApi) -> None:
        register_webhook(api.api_client, namespace="ml", port=port, settings=enable(Settings()))

    with running_agent(tmp_path, scenario(), settings_change=enable, before_agent=register) as rig:
        api = client.ApiClient(rig.agent.api.api_client.configuration)
        custom = client.CustomObjectsApi(api)
        config = client.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration("zonemedic")
        assert config.webhooks[0].client_config.ca_bundle  # the agent patched its own CA in
        admission = rig.agent.composition.admission
        assert admission is not None
        wait(admission.ready, timeout=30, what="the webhook to decide over a synced view")

        created = custom.create_namespaced_custom_object("kubeflow.org", "v1", "ml", "pytorchjobs",
                                                         seed_job("llm-placed"))  # fmt: skip
        for replica in ("Master", "Worker"):
            spec = created["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
            assert spec["nodeSelector"] == {ZONE: "us-east-1a"}, spec
        master = created["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
        assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                "effect": "NoSchedule"} in master["tolerations"]  # fmt: skip

        def zones_of(namespace: str, job: str) -> dict[str, str | None] | None:
            nodes = {n.metadata.name: n.metadata.labels.get(ZONE)
                     for n in client.CoreV1Api(api).list_node().items}  # fmt: skip
            pods = client.CoreV1Api(api).list_namespaced_pod(
                namespace, label_selector=f"training.kubeflow.org/job-name={job}").items
            running = [p for p in pods if p.status.phase == "Running"]
            if len(running) < 5:
                return None
            return {p.metadata.name: nodes.get(p.spec.node_name) for p in running}

        placed = wait(lambda: zones_of("ml", "llm-placed"), timeout=60, what="llm-placed's 5 pods running")
        assert set(placed.values()) == {"us-east-1a"}
        # healthy once every pod carries the zone label the twin stamps at start (a finding
        # that still awaits labels is never recorded)
        finding = wait(lambda: next((f for f in rig.agent.pipeline.diagnose()
                                     if f.job.name == "llm-placed" and f.verdict is Verdict.HEALTHY), None),
                       timeout=30, what="the agent to diagnose llm-placed healthy")  # fmt: skip
        assert not finding.awaiting_labels
        assert rig.store.list_incidents().incidents == []
        rig.agent.composition.admission.webhook.records.flush()  # type: ignore[union-attr]
        (record,) = rig.store.list_admissions()
        assert (record.outcome, record.zone, record.job_name) == (AdmissionOutcome.PLACED, "us-east-1a",
                                                                  "llm-placed")

        # a namespace without the opt-in label: the API server does not call the webhook
        untouched = custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", "other", "pytorchjobs", seed_job("llm-other"))
        assert "nodeSelector" not in untouched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]

        # the webhook down: failurePolicy Ignore lets the job through as it is; it splits and the
        # agent catches it as before
        rig.agent.composition.admission.stop()  # type: ignore[union-attr]
        unplaced = custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", "ml", "pytorchjobs", seed_job("llm-open"))
        assert "nodeSelector" not in unplaced["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
        wait(lambda: any(i.name == "llm-open" for i in rig.store.list_incidents().incidents),
             timeout=60, what="an incident for the split llm-open")  # fmt: skip
