"""What the API server does from a CRD's structural schema: pruning, defaults, immutable fields
(CEL transition rules), and an apply patch merging map lists by key."""

from __future__ import annotations

from typing import Any

import pytest

from agent.twin.crd_schema import FieldError, apply_defaults, map_keys, prune, transition_errors
from agent.twin.crds import TrainerRelease, jobset_schema, trainjob_schema
from agent.twin.patch import PatchType, apply

V21 = trainjob_schema(TrainerRelease.V2_1)
V23 = trainjob_schema(TrainerRelease.V2_3)
JOBSET = jobset_schema()
RUNTIME_REF = {"name": "torch"}


def _patch(manager: str, selector: dict[str, str]) -> dict[str, Any]:
    return {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": selector}}}}}
    ]}}}}  # fmt: skip


@pytest.mark.parametrize(
    ("schema", "obj", "kept", "dropped"),
    [
        # v2.1 serves podTemplateOverrides, not runtimePatches; v2.3 the other way round
        (V21, {"spec": {"runtimeRef": RUNTIME_REF, "runtimePatches": [_patch("a.io/x", {})]}},
         {"spec": {"runtimeRef": RUNTIME_REF}}, ["spec.runtimePatches"]),
        (V23, {"spec": {"runtimeRef": RUNTIME_REF, "podTemplateOverrides": [{"targetJobs": []}],
                        "labels": {"a": "b"}}},
         {"spec": {"runtimeRef": RUNTIME_REF}}, ["spec.podTemplateOverrides", "spec.labels"]),
        # a runtime patch may set only the pod spec fields the Trainer declares
        (V23, {"spec": {"runtimeRef": RUNTIME_REF, "runtimePatches": [{
            "manager": "a.io/x", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
                {"name": "node", "template": {"spec": {"template": {"spec": {
                    "nodeSelector": {"z": "a"},
                    "topologySpreadConstraints": [{"maxSkew": 1}]}}}}}]}}}}]}},
         {"spec": {"runtimeRef": RUNTIME_REF, "runtimePatches": [_patch("a.io/x", {"z": "a"})]}},
         ["spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template"
          ".spec.template.spec.topologySpreadConstraints"]),
        # preserved levels keep everything; apiVersion, kind and metadata always stay
        (JOBSET, {"apiVersion": "v", "kind": "JobSet", "metadata": {"name": "x", "any": 1},
                  "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"x": [1]}}}]},
                  "status": {"anything": True}, "extra": 1},
         {"apiVersion": "v", "kind": "JobSet", "metadata": {"name": "x", "any": 1},
          "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"x": [1]}}}]},
          "status": {"anything": True}}, ["extra"]),
    ],
)
def test_prune(schema: Any, obj: dict[str, Any], kept: dict[str, Any], dropped: list[str]) -> None:
    assert prune(obj, schema) == (kept, dropped)


@pytest.mark.parametrize(
    ("schema", "obj", "expected"),
    [
        (V23, {"spec": {"runtimeRef": {"name": "torch"}}},
         {"spec": {"runtimeRef": {"name": "torch", "apiGroup": "trainer.kubeflow.org",
                                  "kind": "ClusterTrainingRuntime"},
                   "suspend": False, "managedBy": "trainer.kubeflow.org/trainjob-controller"}}),
        (V23, {"spec": {"runtimeRef": {"name": "r", "kind": "TrainingRuntime"}, "suspend": True}},
         {"spec": {"runtimeRef": {"name": "r", "kind": "TrainingRuntime",
                                  "apiGroup": "trainer.kubeflow.org"},
                   "suspend": True, "managedBy": "trainer.kubeflow.org/trainjob-controller"}}),
        # replicated jobs: replicas 1 and group "default"; a failure policy's restart strategy
        (JOBSET, {"spec": {"replicatedJobs": [{"name": "w", "template": {}}],
                           "failurePolicy": {"maxRestarts": 2}}},
         {"spec": {"replicatedJobs": [{"name": "w", "template": {}, "groupName": "default",
                                       "replicas": 1}],
                   "failurePolicy": {"maxRestarts": 2, "restartStrategy": "Recreate"}}}),
        (JOBSET, {"spec": {}}, {"spec": {}}),
    ],
)
def test_defaults(schema: Any, obj: dict[str, Any], expected: dict[str, Any]) -> None:
    assert apply_defaults(obj, schema) == expected


def _trainjob(**spec: Any) -> dict[str, Any]:
    return {"spec": {"runtimeRef": RUNTIME_REF, **spec}}


@pytest.mark.parametrize(
    ("schema", "old", "new", "expected"),
    [
        (V23, _trainjob(trainer={"numNodes": 2}), _trainjob(trainer={"numNodes": 4}),
         [FieldError("spec.trainer", "object", "field is immutable")]),
        (V21, _trainjob(trainer={"numNodes": 2}), _trainjob(trainer={"numNodes": 4}), []),
        (V21, _trainjob(), {"spec": {"runtimeRef": {"name": "other"}}},
         [FieldError("spec.runtimeRef", "object", "runtimeRef is immutable")]),
        # a rule holds only where both objects have the value (CEL transition rules)
        (V23, _trainjob(), _trainjob(trainer={"numNodes": 4}), []),
        (V23, _trainjob(managedBy="a"), _trainjob(managedBy="b"),
         [FieldError("spec.managedBy", "string", "field is immutable")]),
        # map-list items correlate by key: another manager's new entry is no change of `manager`
        (V23, _trainjob(runtimePatches=[_patch("a.io/x", {"z": "a"})]),
         _trainjob(runtimePatches=[_patch("b.io/y", {}), _patch("a.io/x", {"z": "b"})]), []),
        (V23, _trainjob(runtimePatches=[{**_patch("a.io/x", {}), "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
                "template": {"spec": {"serviceAccountName": "a"}}}}}]}}}}]),
         _trainjob(runtimePatches=[{**_patch("a.io/x", {}), "trainingRuntimeSpec": {
             "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
                 "template": {"spec": {"serviceAccountName": "b"}}}}}]}}}}]),
         [FieldError("spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
                     ".template.spec.template.spec.serviceAccountName", "string",
                     "field is immutable")]),
        (JOBSET, {"spec": {"network": {"enableDNSHostnames": True}}},
         {"spec": {"network": {"enableDNSHostnames": False}}},
         [FieldError("spec.network", "object", "Value is immutable")]),
    ],
)
def test_transition_rules(schema: Any, old: Any, new: Any, expected: list[FieldError]) -> None:
    assert transition_errors(old, new, schema) == expected


def test_map_keys() -> None:
    spec = V23["properties"]["spec"]["properties"]
    assert map_keys(spec["runtimePatches"]) == ("manager",)
    assert map_keys(spec["runtimeRef"]) == ()
    assert map_keys(JOBSET["properties"]["spec"]["properties"]["replicatedJobs"]) == ("name",)


def test_apply_merges_map_lists_by_key_and_replaces_other_lists() -> None:
    live = _trainjob(runtimePatches=[_patch("kueue.x-k8s.io/manager", {"k": "1"}),
                                     _patch("zonemedic.io/fix", {"z": "a"})])
    live["spec"]["trainer"] = {"command": ["a", "b"]}
    body = _trainjob(runtimePatches=[_patch("zonemedic.io/fix", {"z": "b"})])
    body["spec"]["trainer"] = {"command": ["c"]}
    applied = apply(live, body, PatchType.APPLY, schema=V23)
    patches = applied["spec"]["runtimePatches"]
    assert [p["manager"] for p in patches] == ["kueue.x-k8s.io/manager", "zonemedic.io/fix"]
    selector = patches[1]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]["spec"]["nodeSelector"]
    assert selector == {"z": "b"}
    assert applied["spec"]["trainer"]["command"] == ["c"]  # an atomic list is replaced
    # without a schema (no CRD) an apply replaces the list, as a merge patch does
    assert len(apply(live, body, PatchType.APPLY)["spec"]["runtimePatches"]) == 1
    # a merge patch replaces map lists too (RFC 7386): read-modify-write the whole list
    assert len(apply(live, body, PatchType.MERGE, schema=V23)["spec"]["runtimePatches"]) == 1
