"""The remediation plan (pure): per kind, minimal patches that keep every unrelated field, merge
what the templates already say, refuse with a reason when the job cannot be moved."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.model.verdict import Verdict
from agent.model.workload import JobKind
from agent.remediation.plan import LiveObjects, Plan, Refusal, TargetAction
from agent.remediation.planner import plan_remediation
from agent.remediation.template import TemplateState, apply_merge_patch
from tests.remediation.builders import (
    KINDS,
    batch_job,
    cluster_nodes,
    container,
    copy_of,
    finding,
    group_live,
    job,
    job_pods,
    live,
    node,
    pod,
)
from tests.support.objects import GPU_TOLERATION, JOB_NAME, ZONE

MIRROR = "netpol.example.com/zone"
TOUCHABLE_SPEC = {"nodeSelector", "affinity", "tolerations"}


def a_plan(kind: str, obj: dict[str, Any], **kw: Any) -> Plan:
    result = plan_remediation(finding(KINDS[kind][4]), live(obj, **kw), mirror_keys=kw.pop("mirror", ()))
    assert isinstance(result, Plan), result
    return result


def templates(obj: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    field = KINDS[kind][1]
    return {rtype: spec["template"] for rtype, spec in obj["spec"][field].items()}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_replica_type_is_pinned_with_affinity_and_the_rest_is_kept(kind: str) -> None:
    obj = job(kind)
    plan = a_plan(kind, obj)
    (target,) = plan.targets
    assert target.action is TargetAction.SUSPEND_RESUME
    plural = {"PyTorchJob": "pytorchjobs", "TFJob": "tfjobs", "MPIJob": "mpijobs",
              "MPIJob/v2beta1": "mpijobs", "XGBoostJob": "xgboostjobs", "PaddleJob": "paddlejobs",
              "JAXJob": "jaxjobs"}[kind]  # fmt: skip
    assert (target.api_version, target.plural) == (KINDS[kind][0], plural)
    patch = plan.job_patch(resource_version="41", suspend=True)
    assert patch["metadata"] == {"resourceVersion": "41"}
    assert patch["spec"]["runPolicy"] == {"suspend": True}
    # minimal: per replica only the template's nodeSelector / affinity / tolerations
    field = KINDS[kind][1]
    assert set(patch["spec"]) == {"runPolicy", field}
    assert set(patch["spec"][field]) == set(obj["spec"][field])  # every replica type
    for replica_patch in patch["spec"][field].values():
        assert set(replica_patch) == {"template"}
        assert set(replica_patch["template"]) == {"spec"}
        assert set(replica_patch["template"]["spec"]) <= TOUCHABLE_SPEC
    patched = apply_merge_patch(obj, patch)
    for rtype, template in templates(patched, kind).items():
        spec = template["spec"]
        assert spec["nodeSelector"][ZONE] == "zone-a", rtype
        assert spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
            {"labelSelector": {"matchLabels": {JOB_NAME: "train"}}, "topologyKey": ZONE}
        ]
        assert GPU_TOLERATION in spec["tolerations"] or {
            "key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"
        } in spec["tolerations"]
        assert not spec.get("topologySpreadConstraints")
    # everything outside the touched fields is as it was
    def strip(o: dict[str, Any]) -> dict[str, Any]:
        out = json.loads(json.dumps(o))
        out["spec"]["runPolicy"].pop("suspend", None)
        for t in templates(out, kind).values():
            for key in TOUCHABLE_SPEC:
                t["spec"].pop(key, None)
        return out
    assert strip(patched) == strip(obj)
    assert plan.pods == len(job_pods(kind))
    assert plan.preconditions.uid == "uid-train" and plan.preconditions.resource_version == "41"
    assert plan.preconditions.placement["train-worker-1"] == "zone-a"


def test_coordinator_gets_the_taint_toleration_read_from_the_nodes_workers_keep_theirs() -> None:
    nodes = [
        node("gpu-a-0", "zone-a", gpus=8, gpu="true",
             taints=[{"key": "example.com/dedicated", "value": "train", "effect": "NoExecute"}]),
        node("cpu-b-0", "zone-b"), node("cpu-b-1", "zone-b"),
    ]  # fmt: skip
    obj = job("PyTorchJob", worker_spec={"tolerations": [
        {"key": "example.com/dedicated", "operator": "Exists"}]})  # fmt: skip
    plan = a_plan("PyTorchJob", obj, nodes=nodes)
    patched = apply_merge_patch(obj, plan.job_patch(resource_version=None, suspend=True))
    master = templates(patched, "PyTorchJob")["Master"]["spec"]
    worker = templates(patched, "PyTorchJob")["Worker"]["spec"]
    assert master["tolerations"] == [
        {"key": "example.com/dedicated", "operator": "Equal", "value": "train", "effect": "NoExecute"}
    ]
    assert worker["tolerations"] == [{"key": "example.com/dedicated", "operator": "Exists"}]
    (target,) = plan.targets
    worker_change = next(c for c in target.changes if c.replica == "Worker")
    assert "tolerations" not in worker_change.after


def test_existing_selector_affinity_and_tolerations_are_merged_and_every_term_gets_the_zone() -> None:
    terms = [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["true"]},
                              {"key": ZONE, "operator": "In", "values": ["zone-a", "zone-b"]}]},
        {"matchExpressions": [{"key": "pool", "operator": "Exists"}],
         "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["x"]}]},
    ]  # fmt: skip
    other_pod_affinity = {"labelSelector": {"matchLabels": {"cache": "warm"}},
                          "topologyKey": "kubernetes.io/hostname"}  # fmt: skip
    anti = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                          "labelSelector": {"matchLabels": {"app": "train"}}}}]}}
    coordinator = {
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "example.com/spot", "operator": "Exists"}],
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms},
                             "preferredDuringSchedulingIgnoredDuringExecution": [
                                 {"weight": 5, "preference": {"matchExpressions": [
                                     {"key": "fast", "operator": "Exists"}]}}]},
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [other_pod_affinity]},
            **anti,
        },
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": {"app": "train"}}}],
    }  # fmt: skip
    nodes = cluster_nodes()
    for n in nodes:
        n["metadata"]["labels"]["disk"] = "ssd"
    obj = job("PyTorchJob", coordinator_spec=coordinator)
    cache = pod("cache-0", node_name="gpu-a-0", labels={"cache": "warm"})  # what its podAffinity wants
    plan = a_plan("PyTorchJob", obj, nodes=nodes, bound=[cache])
    patched = apply_merge_patch(obj, plan.job_patch(resource_version=None, suspend=True))
    master = templates(patched, "PyTorchJob")["Master"]["spec"]
    assert master["nodeSelector"] == {"disk": "ssd", ZONE: "zone-a"}
    new_terms = master["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert len(new_terms) == 2
    for term in new_terms:
        zone_exprs = [e for e in term["matchExpressions"] if e["key"] == ZONE]
        assert zone_exprs == [{"key": ZONE, "operator": "In", "values": ["zone-a"]}]
    assert {"key": "gpu", "operator": "In", "values": ["true"]} in new_terms[0]["matchExpressions"]
    assert new_terms[1]["matchFields"] == terms[1]["matchFields"]
    assert master["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == (
        coordinator["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"])
    required = master["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required[0] == other_pod_affinity and len(required) == 2
    assert master["affinity"]["podAntiAffinity"] == anti["podAntiAffinity"]
    assert master["tolerations"][0] == {"key": "example.com/spot", "operator": "Exists"}
    assert master["tolerations"][1]["key"] == "nvidia.com/gpu"
    assert master["topologySpreadConstraints"] == coordinator["topologySpreadConstraints"]
    back = apply_merge_patch(patched, plan.job_patch(resource_version=None, suspend=False, restore=True))
    assert templates(back, "PyTorchJob") == templates(obj, "PyTorchJob")


@pytest.mark.parametrize(
    ("template_labels", "expected"),
    [
        ({MIRROR: "zone-b"}, {MIRROR: "zone-a"}),  # the template carries the mirror label
        ({}, None),  # a webhook stamps it: the template is left without it
    ],
)
def test_mirroring_label_is_set_to_the_target_zone_where_the_job_uses_one(
    template_labels: dict[str, str], expected: dict[str, str] | None
) -> None:
    obj = job("PyTorchJob", template_labels=template_labels)
    plan = plan_remediation(finding(JobKind.PYTORCH), live(obj), mirror_keys=(MIRROR,))
    assert isinstance(plan, Plan)
    patch = plan.job_patch(resource_version=None, suspend=True)
    for replica in patch["spec"]["pytorchReplicaSpecs"].values():
        assert replica["template"].get("metadata", {}).get("labels") == expected
    patched = apply_merge_patch(obj, patch)
    assert templates(patched, "PyTorchJob")["Master"]["metadata"]["labels"]["app"] == "train"


@pytest.mark.parametrize("kind", ["PyTorchJob", "MPIJob/v2beta1", "JAXJob"])
def test_restore_patch_brings_back_the_original_templates(kind: str) -> None:
    obj = job(kind, template_labels={MIRROR: "zone-b"})
    plan = plan_remediation(finding(KINDS[kind][4]), live(obj), mirror_keys=(MIRROR,))
    assert isinstance(plan, Plan)
    (target,) = plan.targets
    assert target.state_of(obj) is TemplateState.ORIGINAL
    forward = apply_merge_patch(obj, plan.job_patch(resource_version="41", suspend=True))
    assert target.state_of(forward) is TemplateState.PLANNED
    back = apply_merge_patch(forward, plan.job_patch(resource_version=None, suspend=False, restore=True))
    assert target.state_of(back) is TemplateState.ORIGINAL
    assert templates(back, kind) == templates(obj, kind)  # exactly as it was
    other = json.loads(json.dumps(forward))
    other["spec"][KINDS[kind][1]]["Worker"]["template"]["spec"]["nodeSelector"][ZONE] = "zone-c"
    assert target.state_of(other) is TemplateState.OTHER


def test_plan_round_trips_through_json_and_shows_a_readable_diff() -> None:
    plan = a_plan("PyTorchJob", job("PyTorchJob"))
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan
    assert "--- PyTorchJob ml/train Master (live)" in plan.diff
    assert "+++ PyTorchJob ml/train Master (planned)" in plan.diff
    assert f"+    {ZONE}: zone-a" in plan.diff
    assert "+  tolerations:" in plan.diff.split("Master (planned)")[1]
    assert "suspend, patch the templates, resume" in plan.diff


def refusal(kind: str, obj: dict[str, Any], **kw: Any) -> str:
    result = plan_remediation(kw.pop("the_finding", finding(KINDS[kind][4])), live(obj, **kw))
    assert isinstance(result, Refusal), result
    return result.reason


@pytest.mark.parametrize(
    ("case", "build", "reason"),
    [
        ("cordoned", lambda: refusal("PyTorchJob", job("PyTorchJob"), nodes=cluster_nodes(cordon_a=True)),
         "every node of zone zone-a is cordoned"),
        ("gpus taken", lambda: refusal(
            "PyTorchJob", job("PyTorchJob"), nodes=cluster_nodes(gpus=1),
            bound=[pod("other-0", ns="x", node_name="gpu-a-0", gpus=1),
                   pod("other-1", ns="x", node_name="gpu-a-1", gpus=1)]),
         "zone zone-a has no room for pod train-worker"),
        ("kueue", lambda: refusal("PyTorchJob", job("PyTorchJob", labels={"kueue.x-k8s.io/queue-name": "q"})),
         "Kueue-managed (queue q)"),
        ("managedBy", lambda: refusal("TFJob", job("TFJob", run_policy={"managedBy": "kueue.x-k8s.io/multikueue"})),
         "managed by kueue.x-k8s.io/multikueue"),
        ("finished", lambda: refusal("PyTorchJob", job("PyTorchJob", conditions=["Succeeded"])),
         "finished job cannot be resumed"),
        ("spread", lambda: refusal("PyTorchJob", job("PyTorchJob", worker_spec={"topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]})),
         "spreads the pods across zones"),
        ("healthy", lambda: refusal("PyTorchJob", job("PyTorchJob"),
                                    the_finding=finding(JobKind.PYTORCH, verdict=Verdict.HEALTHY)),
         "not split across zones"),
        ("no target", lambda: refusal("PyTorchJob", job("PyTorchJob"),
                                      the_finding=finding(JobKind.PYTORCH, target=None, remediable=False)),
         "not remediable"),
    ],
)  # fmt: skip
def test_refusals_name_the_reason(case: str, build: Any, reason: str) -> None:
    assert reason in build(), case


def test_room_counts_requests_of_pods_already_there_but_not_the_jobs_own() -> None:
    nodes = cluster_nodes(gpus=2)  # 4 GPUs in zone-a; the job's 2 workers hold 2 of them
    obj = job("PyTorchJob")
    assert isinstance(plan_remediation(finding(JobKind.PYTORCH), live(obj, nodes=nodes)), Plan)
    squatter = [pod("other", ns="x", node_name="gpu-a-0", gpus=2)]
    assert isinstance(plan_remediation(finding(JobKind.PYTORCH), live(obj, nodes=nodes, bound=squatter)), Plan)
    more = [*squatter, pod("other2", ns="x", node_name="gpu-a-1", gpus=1)]
    result = plan_remediation(finding(JobKind.PYTORCH), live(obj, nodes=nodes, bound=more))
    assert isinstance(result, Refusal) and "nvidia.com/gpu" in result.reason


def test_group_moves_only_what_is_outside_the_target_zone() -> None:
    result = plan_remediation(finding(JobKind.GROUP, name="lab"), group_live(), mirror_keys=("zone",))
    assert isinstance(result, Plan), result
    by_name = {t.name: t for t in result.targets}
    assert set(by_name) == {"coordinator", "workers-b"}  # workers-a already in zone-a: untouched
    rollout = by_name["coordinator"]
    assert rollout.action is TargetAction.ROLLOUT
    patch = rollout.template_patch()
    assert patch["spec"]["template"]["metadata"]["labels"] == {"zone": "zone-a"}
    assert patch["spec"]["template"]["spec"]["nodeSelector"] == {ZONE: "zone-a"}
    assert patch["spec"]["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert "affinity" not in patch["spec"]["template"]["spec"]
    recreate = by_name["workers-b"]
    assert recreate.action is TargetAction.RECREATE
    assert recreate.manifest is not None and recreate.original is not None
    manifest = recreate.manifest
    assert manifest["metadata"]["name"] == "workers-b"
    assert manifest["metadata"]["labels"] == {"team": "lab"}
    for gone in ("uid", "resourceVersion", "creationTimestamp", "generation"):
        assert gone not in manifest["metadata"]
    assert "status" not in manifest and "selector" not in manifest["spec"]
    assert (manifest["spec"]["parallelism"], manifest["spec"]["completions"]) == (1, 1)
    assert manifest["spec"]["backoffLimit"] == 4
    template = manifest["spec"]["template"]
    assert template["metadata"]["labels"] == {"app": "workers-b", "zone": "zone-a", "role": "worker"}
    assert template["spec"]["nodeSelector"] == {"gpu": "true", ZONE: "zone-a"}
    assert template["spec"]["tolerations"] == [GPU_TOLERATION]  # already tolerated: unchanged
    assert recreate.original["spec"]["template"]["metadata"]["labels"]["zone"] == "zone-b"
    assert result.pods == 2
    assert "delete and recreate" in result.diff


def test_group_with_only_the_coordinator_outside_patches_only_the_deployment() -> None:
    base = group_live()
    pods = [p for p in base.pods if p["metadata"]["name"] != "workers-b-1"]
    live_ = LiveObjects(job=None, pods=pods, nodes=base.nodes, bound_pods=pods,
                        workloads=base.workloads)  # fmt: skip
    result = plan_remediation(finding(JobKind.GROUP, name="lab"), live_, mirror_keys=("zone",))
    assert isinstance(result, Plan)
    assert [(t.kind, t.name) for t in result.targets] == [("Deployment", "coordinator")]


def test_group_pod_without_a_movable_controller_is_refused() -> None:
    base = group_live()
    pods = [*base.pods, pod("stray", node_name="cpu-b-0", labels={"zone": "zone-b"})]
    live_ = LiveObjects(job=None, pods=pods, nodes=base.nodes, bound_pods=pods, workloads=base.workloads)
    result = plan_remediation(finding(JobKind.GROUP, name="lab"), live_)
    assert isinstance(result, Refusal) and "stray" in result.reason


def _kueue(base: LiveObjects, case: str) -> LiveObjects:
    workloads = [copy_of(w) for w in base.workloads]
    pods = [copy_of(p) for p in base.pods]
    by_name = {w["metadata"]["name"]: w for w in workloads}
    if case == "deployment label":
        by_name["coordinator"]["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpu"}
    elif case == "job annotation":
        by_name["workers-b"]["metadata"]["annotations"] = {"kueue.x-k8s.io/queue-name": "gpu"}
    elif case == "pod managed label":
        (p,) = [p for p in pods if p["metadata"]["name"] == "workers-b-1"]
        p["metadata"]["labels"]["kueue.x-k8s.io/managed"] = "true"
    elif case == "job managedBy":
        by_name["workers-b"]["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    elif case == "unwritten job label":
        by_name["workers-a"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "gpu"
    return LiveObjects(job=None, pods=pods, nodes=base.nodes, bound_pods=pods, workloads=workloads)


@pytest.mark.parametrize(
    ("case", "reason"),
    [("deployment label", "Deployment coordinator is queued by Kueue (label kueue.x-k8s.io/queue-name=gpu)"),
     ("job annotation", "Job workers-b is queued by Kueue (annotation kueue.x-k8s.io/queue-name=gpu)"),
     ("pod managed label", "Pod workers-b-1 is managed by Kueue (kueue.x-k8s.io/managed=true)"),
     ("job managedBy", "Job workers-b is managed by kueue.x-k8s.io/multikueue, not by its own controller"),
     ("unwritten job label", None)],
)  # fmt: skip
def test_a_group_whose_written_objects_or_their_pods_are_kueues_is_refused(
    case: str, reason: str | None
) -> None:
    """Every object a group's plan writes (a Deployment, a batch Job) and the pods they own are
    looked at; a Kueue-queued Job the plan leaves alone (already in the zone) does not matter."""
    result = plan_remediation(finding(JobKind.GROUP, name="lab"), _kueue(group_live(), case),
                              mirror_keys=("zone",))  # fmt: skip
    if reason is None:
        assert isinstance(result, Plan), result
        return
    assert isinstance(result, Refusal), result
    assert result.reason.startswith(reason), result.reason
    assert result.reason.endswith("zonemedic does not delete, recreate or patch it")


def _finished(name: str, condition: str, *, labels: dict[str, str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    job_ = batch_job(name, labels=labels)
    job_["status"] = {"active": 0, "failed" if condition == "Failed" else "succeeded": 2,
                      "conditions": [{"type": condition, "status": "True"}]}  # fmt: skip
    phase = "Failed" if condition == "Failed" else "Succeeded"
    done = [pod(f"{name}-{i}", node_name=f"gpu-a-{i}", gpus=1, labels=labels, phase=phase,
                owner=("batch/v1", "Job", name)) for i in range(2)]  # fmt: skip
    for p in done:
        p["metadata"]["ownerReferences"][0]["uid"] = job_["metadata"]["uid"]
    return job_, done


@pytest.mark.parametrize("condition", ["Failed", "Complete"])
def test_a_worker_job_that_finished_is_recreated_and_counted_in_the_gang(condition: str) -> None:
    """Its workers gave up (or completed): the gang cannot run without them, so the plan recreates
    the Job, pinned to the target zone, and verification waits for every pod of the gang."""
    base = group_live()
    failed, done = _finished("workers-c", condition, labels={"zone": "zone-b", "role": "worker"})
    live_ = LiveObjects(job=None, pods=base.pods, nodes=base.nodes, bound_pods=base.pods,
                        workloads=[*base.workloads, failed], finished_pods=done)  # fmt: skip
    result = plan_remediation(finding(JobKind.GROUP, name="lab"), live_, mirror_keys=("zone",))
    assert isinstance(result, Plan), result
    by_name = {t.name: t for t in result.targets}
    assert set(by_name) == {"coordinator", "workers-b", "workers-c"}
    recreated = by_name["workers-c"]
    assert recreated.action is TargetAction.RECREATE and recreated.uid == "uid-workers-c"
    assert recreated.manifest is not None
    assert recreated.manifest["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "true", ZONE: "zone-a"}
    assert "status" not in recreated.manifest
    assert result.gang == 4 + 2  # the live pods and the two the recreated Job runs
    assert result.pods == 1 + 1 + 2  # coordinator, workers-b's pod, workers-c's two
    round_trip = Plan.from_dict(json.loads(json.dumps(result.to_dict())))
    assert round_trip.gang == 6 and round_trip.members == 6


def test_a_finished_worker_job_already_pinned_to_the_zone_is_recreated_as_it_is() -> None:
    base = group_live()
    failed, done = _finished("workers-c", "Failed", labels={"zone": "zone-a", "role": "worker"})
    failed["spec"]["template"]["spec"]["nodeSelector"][ZONE] = "zone-a"
    live_ = LiveObjects(job=None, pods=base.pods, nodes=base.nodes, bound_pods=base.pods,
                        workloads=[*base.workloads, failed], finished_pods=done)  # fmt: skip
    result = plan_remediation(finding(JobKind.GROUP, name="lab"), live_, mirror_keys=("zone",))
    assert isinstance(result, Plan), result
    (recreated,) = [t for t in result.targets if t.name == "workers-c"]
    assert recreated.changes == () and recreated.manifest == recreated.original
    assert recreated.state_of(failed) is TemplateState.PLANNED
    assert "workers-c: delete and recreate as it is" in result.diff


def test_finished_pods_of_a_job_that_is_gone_or_was_replaced_plan_nothing_for_it() -> None:
    base = group_live()
    failed, done = _finished("workers-c", "Failed", labels={"zone": "zone-b", "role": "worker"})
    failed["metadata"]["uid"] = "uid-another"  # a Job of that name, not the pods' owner
    for workloads in (base.workloads, [*base.workloads, failed]):
        live_ = LiveObjects(job=None, pods=base.pods, nodes=base.nodes, bound_pods=base.pods,
                            workloads=workloads, finished_pods=done)  # fmt: skip
        result = plan_remediation(finding(JobKind.GROUP, name="lab"), live_, mirror_keys=("zone",))
        assert isinstance(result, Plan), result
        assert {t.name for t in result.targets} == {"coordinator", "workers-b"}
        assert result.gang == 4


# --- room: affinity, judged on the pods as they will be after the patch --------------------------

HOST = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def operator_pods(workers: int) -> list[dict[str, Any]]:
    """The PyTorchJob's pods labelled as training-operator labels them."""
    pods = job_pods("PyTorchJob", workers=workers)
    for p in pods:
        rtype, index = p["metadata"]["name"].split("-")[1:]
        p["metadata"]["labels"].update({"training.kubeflow.org/replica-type": rtype,
                                        "training.kubeflow.org/replica-index": index})  # fmt: skip
    return pods


def one_worker_per_node(workers: int) -> Plan | Refusal:
    anti = {"podAntiAffinity": {REQUIRED: [{"topologyKey": HOST, "labelSelector": {"matchLabels": {
        JOB_NAME: "train", "training.kubeflow.org/replica-type": "worker"}}}]}}  # fmt: skip
    obj = job("PyTorchJob", workers=workers, worker_spec={"affinity": anti})
    pods = operator_pods(workers)
    return plan_remediation(finding(JobKind.PYTORCH), LiveObjects(
        job=obj, pods=pods, nodes=cluster_nodes(), bound_pods=pods))  # fmt: skip


def test_anti_affinity_between_the_jobs_own_workers_is_judged_with_their_operator_labels() -> None:
    assert isinstance(one_worker_per_node(2), Plan)  # two GPU nodes in zone-a: one worker each
    refused = one_worker_per_node(3)
    assert isinstance(refused, Refusal)
    assert refused.reason.startswith(
        "anti-affinity: no node in zone zone-a may take pod train-worker-2: gpu-a-0: anti-affinity: "
        "pod train-worker-2 may not share kubernetes.io/hostname=gpu-a-0 with planned pod "
        "train-worker-"
    ), refused.reason


def worker_terms(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": list(exprs)}]}}}


def test_node_affinity_no_node_of_the_zone_matches_is_refused_with_the_reason() -> None:
    obj = job("PyTorchJob", worker_spec={"affinity": worker_terms(
        {"key": "gpu-model", "operator": "In", "values": ["h100"]})})  # fmt: skip
    reason = refusal("PyTorchJob", obj)
    assert reason == (
        "no node in zone zone-a matches the node affinity/selector of pod train-worker-0: "
        "gpu-a-0: required node affinity does not match; gpu-a-1: required node affinity does "
        "not match"
    )


def test_node_affinity_is_judged_after_the_zone_pin_replaced_the_terms_zone() -> None:
    # live, the term wants zone-b; the plan pins zone-a into it, so zone-a's GPU nodes match
    obj = job("PyTorchJob", worker_spec={"affinity": worker_terms(
        {"key": ZONE, "operator": "In", "values": ["zone-b"]},
        {"key": "gpu", "operator": "In", "values": ["true"]})})  # fmt: skip
    plan = a_plan("PyTorchJob", obj)
    patched = apply_merge_patch(obj, plan.job_patch(resource_version=None, suspend=True))
    worker = templates(patched, "PyTorchJob")["Worker"]["spec"]
    (term,) = worker["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert {"key": ZONE, "operator": "In", "values": ["zone-a"]} in term["matchExpressions"]


def test_tolerations_come_from_the_nodes_the_templates_node_affinity_admits() -> None:
    # zone-a also has an untainted CPU node; the coordinator's node affinity wants a GPU node,
    # so it gets the GPU nodes' toleration (the CPU node's lack of taints is beside the point)
    nodes = [*cluster_nodes(), node("cpu-a-0", "zone-a")]
    obj = job("PyTorchJob", coordinator_spec={"affinity": worker_terms(
        {"key": "gpu", "operator": "In", "values": ["true"]})})  # fmt: skip
    plan = a_plan("PyTorchJob", obj, nodes=nodes)
    patched = apply_merge_patch(obj, plan.job_patch(resource_version=None, suspend=True))
    master = templates(patched, "PyTorchJob")["Master"]["spec"]
    assert [t["key"] for t in master["tolerations"]] == ["nvidia.com/gpu"]


def test_a_mislabelled_group_is_relabelled_where_it_runs() -> None:
    """The lab after a GitOps sync: the coordinator runs in zone-a (pinned and tolerated there),
    its template's zone label put back to zone-b: only the Deployment is rolled out, relabelled."""
    base = group_live(coordinator_zone_node="gpu-a-0")
    deploy = base.workloads[0]
    deploy["spec"]["template"]["spec"]["nodeSelector"] = {ZONE: "zone-a"}
    deploy["spec"]["template"]["spec"]["tolerations"] = [GPU_TOLERATION]
    pods = [p for p in base.pods if p["metadata"]["name"] != "workers-b-1"]
    live_ = LiveObjects(job=None, pods=pods, nodes=base.nodes, bound_pods=pods,
                        workloads=base.workloads)  # fmt: skip
    mismatch = finding(JobKind.GROUP, name="lab", verdict=Verdict.ZONE_LABEL_MISMATCH)
    result = plan_remediation(mismatch, live_, mirror_keys=("zone",))
    assert isinstance(result, Plan), result
    [target] = result.targets
    assert (target.kind, target.name, target.action) == ("Deployment", "coordinator",
                                                         TargetAction.ROLLOUT)  # fmt: skip
    patch = target.template_patch()
    assert patch["spec"]["template"]["metadata"]["labels"] == {"zone": "zone-a"}
    assert result.preconditions.verdict is Verdict.ZONE_LABEL_MISMATCH


def test_a_mislabelled_kubeflow_job_is_relabelled_in_its_zone() -> None:
    obj = job("PyTorchJob")
    for spec in obj["spec"]["pytorchReplicaSpecs"].values():
        spec["template"].setdefault("metadata", {}).setdefault("labels", {})[MIRROR] = "zone-b"
    mismatch = finding(JobKind.PYTORCH, verdict=Verdict.ZONE_LABEL_MISMATCH)
    result = plan_remediation(mismatch, live(obj), mirror_keys=(MIRROR,))
    assert isinstance(result, Plan), result
    for change in result.targets[0].changes:
        assert change.nested()["spec"]["pytorchReplicaSpecs"][change.replica]["template"][
            "metadata"]["labels"][MIRROR] == "zone-a"


@pytest.mark.parametrize("kind", ["PyTorchJob", "MPIJob"])
def test_a_gpu_pod_gets_the_gpu_nodes_toleration_though_the_zone_has_an_untainted_cpu_node(
    kind: str,
) -> None:
    """A realistic zone: GPU nodes tainted nvidia.com/gpu:NoSchedule and an untainted CPU node.
    The coordinator asks for a GPU and tolerates nothing: the CPU node (no GPU to give) cannot
    take it whatever its taints, so the nodes that can are the GPU nodes, and the plan adds their
    toleration; the room check then finds room for it on them."""
    nodes = [*cluster_nodes(), node("cpu-a-0", "zone-a")]
    obj = job(kind, coordinator_spec={"containers": [container(gpus=1)]})
    plan = a_plan(kind, obj, nodes=nodes)
    patched = apply_merge_patch(obj, plan.job_patch(resource_version=None, suspend=True))
    coordinator = templates(patched, kind)[KINDS[kind][2]]["spec"]
    # the GPU nodes' taint (nvidia.com/gpu=present:NoSchedule), read from them
    assert coordinator["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]
    assert coordinator["nodeSelector"] == {ZONE: "zone-a"}


def test_a_cpu_pod_that_an_untainted_node_accepts_gets_no_toleration() -> None:
    """The same zone, a CPU-only coordinator: the untainted CPU node can take it as it is, so no
    toleration is added (the GPU nodes' taint is not its business)."""
    nodes = [*cluster_nodes(), node("cpu-a-0", "zone-a")]
    obj = job("PyTorchJob")
    plan = a_plan("PyTorchJob", obj, nodes=nodes)
    (target,) = plan.targets
    master = next(c for c in target.changes if c.replica == "Master")
    assert "tolerations" not in master.after
