"""The Kueue fix end to end on the twin's Kueue, with the real Kubernetes client as deploy/base's
ServiceAccount: a PyTorchJob Kueue admitted without a topology request, split across zones, is
re-placed through Kueue (its Workload deactivated, its templates annotated, the Workload deleted so
Kueue rebuilds and re-admits it in one zone) and resolved; zonemedic never writes the job's
`suspend` nor a nodeSelector. A Kueue job whose TAS is not configured is not remediable: nothing
is written."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from agent.model.cluster import ZONE_LABEL
from agent.model.job import JobRef
from agent.model.lifecycle import IncidentStatus
from agent.model.workload import KUEUE, KUEUE_WORKLOAD, JobKind
from agent.remediation.run import Step
from agent.twin.faults import AuditEntry
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from tests.remediation.harness import (
    FAST,
    approved_incident,
    migrated_template,
    new_store,
    running_lab,
)

JOB = JobRef(JobKind.PYTORCH, "ml", "llm-finetune")


def _zones(lab: Any) -> dict[str, int]:
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"].get(ZONE_LABEL)
             for n in lab.api.json("GET", "/api/v1/nodes")["items"]}  # fmt: skip
    out: dict[str, int] = {}
    for pod in lab.api.json("GET", "/api/v1/namespaces/ml/pods")["items"]:
        zone = nodes.get(pod["spec"].get("nodeName"))
        out[str(zone)] = out.get(str(zone), 0) + 1
    return out


def test_a_split_kueue_job_is_re_placed_through_kueue(tmp_path: Path) -> None:
    store, _ = new_store(migrated_template(tmp_path), tmp_path)
    try:
        with running_lab(tmp_path, "kueue", rbac=True) as lab:
            steps: list[Step] = []
            incident_id = approved_incident(lab, store, ref=JOB)
            status = lab.remediator(store, on_step=steps.append).run(incident_id)
            detail = store.get_incident(incident_id)
            assert status is IncidentStatus.RESOLVED, [(a.payload.get("step"), a.message)
                                                       for a in detail.actions]
            assert [s for s in steps if s in (Step.DEACTIVATED, Step.PODS_GONE, Step.ANNOTATED,
                                              Step.RESUMED, Step.ADMITTED, Step.BOUND)] == [
                Step.DEACTIVATED, Step.PODS_GONE, Step.ANNOTATED, Step.RESUMED, Step.ADMITTED,
                Step.BOUND]  # fmt: skip
            assert _zones(lab) == {"us-east-1a": 5}
            job = lab.api.json("GET", "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llm-finetune")
            assert job["spec"]["runPolicy"].get("suspend") is False  # Kueue resumed it
            for spec in job["spec"]["pytorchReplicaSpecs"].values():
                annotations = spec["template"]["metadata"]["annotations"]
                assert annotations[KUEUE.topology_annotation] == ZONE_LABEL
                assert annotations[KUEUE.group_annotation] == "llm-finetune"
            assert lab.cluster.api is not None
            audited: list[AuditEntry] = list(lab.cluster.api.accounting.audited())
            # the writes the ServiceAccount made (dry runs included): the Workload and the job's
            # templates only, never the job's suspend, never a nodeSelector (checked above)
            ours = [e for e in audited if e.user.startswith("system:serviceaccount:")
                    and e.verb in ("patch", "delete")]
            assert {(e.verb, e.resource) for e in ours} == {
                ("patch", KUEUE_WORKLOAD.plural), ("patch", "pytorchjobs"),
                ("delete", KUEUE_WORKLOAD.plural)}
            assert all(e.allowed for e in ours)
    finally:
        store.close()


def test_kueue_not_admitting_the_job_in_time_rolls_it_back_through_kueue(tmp_path: Path) -> None:
    """The ClusterQueue loses its GPU quota once the job is annotated, before the re-queue: Kueue cannot
    admit the job, the run rolls back (the annotations it added removed, the Workload rebuilt),
    and nothing of the job's own is left changed."""
    store, _ = new_store(migrated_template(tmp_path), tmp_path)
    try:
        with running_lab(tmp_path, "kueue", rbac=True) as lab:
            admin = lab.cluster.store

            def squeeze(step: Step) -> None:
                if step is Step.ANNOTATED:
                    admin.patch(lookup("clusterqueues", group="kueue.x-k8s.io"), "cluster-queue",
                                {"spec": {"resourceGroups": [{
                                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                                    "flavors": [{"name": "default-flavor", "resources": [
                                        {"name": "cpu", "nominalQuota": "200"},
                                        {"name": "memory", "nominalQuota": "2Ti"},
                                        {"name": "nvidia.com/gpu", "nominalQuota": "0"}]}]}]}},
                                patch_type=PatchType.MERGE)  # fmt: skip

            incident_id = approved_incident(lab, store, ref=JOB)
            settings = replace(FAST, schedule_timeout=timedelta(seconds=1.5))
            status = lab.remediator(store, settings=settings, on_step=squeeze).run(incident_id)
            detail = store.get_incident(incident_id)
            assert status is IncidentStatus.ROLLED_BACK, [(a.payload.get("step"), a.message)
                                                          for a in detail.actions]
            assert "Kueue did not admit the job" in str(detail.events[-1].detail)
            job = lab.api.json("GET", "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llm-finetune")
            for spec in job["spec"]["pytorchReplicaSpecs"].values():
                annotations = spec["template"]["metadata"].get("annotations") or {}
                assert KUEUE.topology_annotation not in annotations
                assert KUEUE.group_annotation not in annotations
            workloads = lab.api.json("GET", f"/apis/{KUEUE_WORKLOAD.api_version}/namespaces/ml/"
                                            f"{KUEUE_WORKLOAD.plural}")["items"]  # fmt: skip
            assert [w["spec"].get("active", True) for w in workloads] == [True]  # rebuilt, active
    finally:
        store.close()
