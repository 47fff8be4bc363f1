"""The Kueue fix end to end on the twin's Kueue, with the real Kubernetes client as deploy/base's
ServiceAccount: a PyTorchJob Kueue admitted without a topology request, split across zones, is
re-placed through Kueue (its Workload deactivated, its templates annotated, the Workload deleted so
Kueue rebuilds and re-admits it in one zone) and resolved; zonemedic never writes the job's
`suspend` nor a nodeSelector. A Kueue job whose TAS is not configured is not remediable: nothing
is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.model.cluster import ZONE_LABEL
from agent.model.job import JobRef
from agent.model.lifecycle import IncidentStatus
from agent.model.workload import KUEUE, KUEUE_WORKLOAD, JobKind
from agent.remediation.run import Step
from agent.settings import RemediationSettings
from agent.store.repository import IncidentStore
from agent.twin.faults import AuditEntry
from tests.remediation.harness import Lab, approved_incident, running_lab

JOB = JobRef(JobKind.PYTORCH, "ml", "llm-finetune")
JOB_PATH = "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llm-finetune"


def test_a_split_kueue_job_is_re_placed_through_kueue(
    tmp_path: Path, store: IncidentStore, live_pod_zones: Callable[[Lab], dict[str, int]],
    agent_writes: Callable[[Lab, tuple[str, ...]], list[AuditEntry]],
) -> None:  # fmt: skip
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
        assert live_pod_zones(lab) == {"us-east-1a": 5}
        job = lab.api.json("GET", JOB_PATH)
        assert job["spec"]["runPolicy"].get("suspend") is False  # Kueue resumed it
        for spec in job["spec"]["pytorchReplicaSpecs"].values():
            annotations = spec["template"]["metadata"]["annotations"]
            assert annotations[KUEUE.topology_annotation] == ZONE_LABEL
            assert annotations[KUEUE.group_annotation] == "llm-finetune"
        # the writes the ServiceAccount made (dry runs included): the Workload and the job's
        # templates only, never the job's suspend, never a nodeSelector (checked above)
        ours = agent_writes(lab, ("patch", "delete"))
        assert {(e.verb, e.resource) for e in ours} == {
            ("patch", KUEUE_WORKLOAD.plural), ("patch", "pytorchjobs"),
            ("delete", KUEUE_WORKLOAD.plural)}
        assert all(e.allowed for e in ours)


def test_kueue_not_admitting_the_job_in_time_rolls_it_back_through_kueue(
    tmp_path: Path, store: IncidentStore, no_gpu_quota: Callable[[Lab], None],
    admission_given_up: RemediationSettings, workloads: Callable[[Lab], list[dict[str, Any]]],
) -> None:  # fmt: skip
    """The ClusterQueue loses its GPU quota once the job is annotated, before the re-queue: Kueue cannot
    admit the job, the run rolls back (the annotations it added removed, the Workload rebuilt),
    and nothing of the job's own is left changed."""
    with running_lab(tmp_path, "kueue", rbac=True) as lab:

        def squeeze(step: Step) -> None:
            if step is Step.ANNOTATED:
                no_gpu_quota(lab)

        incident_id = approved_incident(lab, store, ref=JOB)
        status = lab.remediator(store, settings=admission_given_up, on_step=squeeze).run(incident_id)
        detail = store.get_incident(incident_id)
        assert status is IncidentStatus.ROLLED_BACK, [(a.payload.get("step"), a.message)
                                                      for a in detail.actions]
        assert "Kueue did not admit the job" in str(detail.events[-1].detail)
        job = lab.api.json("GET", JOB_PATH)
        for spec in job["spec"]["pytorchReplicaSpecs"].values():
            annotations = spec["template"]["metadata"].get("annotations") or {}
            assert KUEUE.topology_annotation not in annotations
            assert KUEUE.group_annotation not in annotations
        assert [w["spec"].get("active", True) for w in workloads(lab)] == [True]  # rebuilt, active
