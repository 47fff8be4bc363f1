"""The Kueue advice of a split job on the twin's Kueue shows only the change to the job's own
annotations: Kueue's admission injects `podset-unconstrained-topology: "true"` into the running
templates of a PodSet that asked for no level (its implied TAS), and the diagnosis reads the job's
own requests from its Workload's PodSets (Kueue's copy of the job's templates), so the proposal
removes nothing Kueue put there (as the plan, which reads its `before` from the same copy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.model.cluster import ZONE_LABEL
from agent.model.job import JobRef
from agent.model.workload import KUEUE, JobKind
from tests.remediation.harness import running_lab, settled_finding

JOBSET = JobRef(JobKind.JOBSET, "ml", "pytorch-ddp")
PYTORCH = JobRef(JobKind.PYTORCH, "ml", "llm-finetune")
PATHS = {JobKind.JOBSET: "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/pytorch-ddp",
         JobKind.PYTORCH: "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llm-finetune"}  # fmt: skip


def live_templates(job: dict[str, Any], kind: JobKind) -> dict[str, dict[str, str]]:
    """The running job's pod-template annotations, by replica."""
    if kind is JobKind.JOBSET:
        return {r["name"]: r["template"]["spec"]["template"]["metadata"].get("annotations") or {}
                for r in job["spec"]["replicatedJobs"]}  # fmt: skip
    return {name: spec["template"]["metadata"].get("annotations") or {}
            for name, spec in job["spec"]["pytorchReplicaSpecs"].items()}  # fmt: skip


def proposed(proposal: str, kind: JobKind) -> dict[str, dict[str, Any]]:
    (doc,) = list(yaml.safe_load_all(proposal))
    if kind is JobKind.JOBSET:
        return {r["name"]: r["template"]["spec"]["template"]["metadata"]["annotations"]
                for r in doc["spec"]["replicatedJobs"]}  # fmt: skip
    return {name: spec["template"]["metadata"]["annotations"]
            for name, spec in doc["spec"]["pytorchReplicaSpecs"].items()}  # fmt: skip


@pytest.mark.parametrize(("scenario", "ref", "group"), [("kueue-jobset", JOBSET, False),
                                                        ("kueue", PYTORCH, True)])  # fmt: skip
def test_the_advice_removes_nothing_kueue_injected(
    tmp_path: Path, scenario: str, ref: JobRef, group: bool
) -> None:
    with running_lab(tmp_path, scenario) as lab:
        finding = settled_finding(lab, ref)
        live = live_templates(lab.api.json("GET", PATHS[ref.kind]), ref.kind)
        # the premise: Kueue's admission put the unconstrained request into the running templates
        assert all(a.get(KUEUE.unconstrained_annotation) == "true" for a in live.values()), live
        advice = finding.kueue
        assert advice is not None and advice.agent_fixable
        wanted: dict[str, Any] = {KUEUE.topology_annotation: ZONE_LABEL}
        if group:
            wanted[KUEUE.group_annotation] = ref.name
        assert proposed(advice.proposal, ref.kind) == {replica: wanted for replica in live}
