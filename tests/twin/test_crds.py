"""The CRDs the twin installs, per Kubeflow Trainer release, and how the store decodes custom
resources from them (pruning by field validation, defaults, immutable fields)."""

from __future__ import annotations

from typing import Any

import pytest

from agent.twin.apierror import ApiError
from agent.twin.crds import CRDS, TrainerRelease, crd_documents
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from agent.twin.store import Store

TRAINJOBS = lookup("trainjobs")


def _by_name(release: TrainerRelease) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in crd_documents(release)}


def _spec_fields(doc: dict[str, Any]) -> set[str]:
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return set(schema["properties"]["spec"]["properties"])


@pytest.mark.parametrize(
    ("release", "present", "absent"),
    [
        (TrainerRelease.V2_1, {"podTemplateOverrides", "labels", "annotations"},
         {"runtimePatches", "activeDeadlineSeconds"}),
        (TrainerRelease.V2_2, {"runtimePatches", "activeDeadlineSeconds"},
         {"podTemplateOverrides", "labels", "annotations"}),
        (TrainerRelease.V2_3, {"runtimePatches", "activeDeadlineSeconds"},
         {"podTemplateOverrides", "labels", "annotations"}),
    ],
)
def test_the_trainjob_crd_says_which_override_field_the_release_serves(
    release: TrainerRelease, present: set[str], absent: set[str]
) -> None:
    doc = _by_name(release)["trainjobs.trainer.kubeflow.org"]
    fields = _spec_fields(doc)
    assert present <= fields and not absent & fields
    assert {"runtimeRef", "trainer", "initializer", "suspend", "managedBy"} <= fields
    assert doc["metadata"]["annotations"]["twin.zonemedic.io/trainer-release"] == release.value


def test_crd_shapes_follow_the_upstream_crds() -> None:
    docs = _by_name(TrainerRelease.V2_3)
    assert {"trainjobs.trainer.kubeflow.org", "trainingruntimes.trainer.kubeflow.org",
            "clustertrainingruntimes.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io",
            "pytorchjobs.kubeflow.org", "ciliumnetworkpolicies.cilium.io"} <= set(docs)
    trainjob = docs["trainjobs.trainer.kubeflow.org"]["spec"]
    assert trainjob["scope"] == "Namespaced" and trainjob["names"]["kind"] == "TrainJob"
    assert "shortNames" not in trainjob["names"]
    (version,) = trainjob["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    assert version["additionalPrinterColumns"] == [
        {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    cluster_runtime = docs["clustertrainingruntimes.trainer.kubeflow.org"]["spec"]
    assert cluster_runtime["scope"] == "Cluster"
    assert "additionalPrinterColumns" not in cluster_runtime["versions"][0]
    assert "subresources" not in cluster_runtime["versions"][0]
    jobset = docs["jobsets.jobset.x-k8s.io"]["spec"]["versions"][0]
    assert [c["name"] for c in jobset["additionalPrinterColumns"]] == [
        "TerminalState", "Restarts", "Completed", "Suspended", "Age"]
    assert jobset["additionalPrinterColumns"][2]["jsonPath"] == \
        '.status.conditions[?(@.type=="Completed")].status'
    # the two MPIJob versions the twin serves are one CRD
    mpi = docs["mpijobs.kubeflow.org"]["spec"]["versions"]
    assert [(v["name"], v["storage"]) for v in mpi] == [("v1", True), ("v2beta1", False)]


def test_store_installs_the_crds_and_a_release_switch_replaces_them() -> None:
    store = Store(trainer_release=TrainerRelease.V2_1)
    try:
        name = "trainjobs.trainer.kubeflow.org"
        before = store.get(CRDS, name)
        assert "podTemplateOverrides" in _spec_fields(before)
        assert {c["type"] for c in before["status"]["conditions"]} == {"NamesAccepted",
                                                                      "Established"}
        store.install_crds(TrainerRelease.V2_2)
        after = store.get(CRDS, name)
        assert "runtimePatches" in _spec_fields(after)
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        version = after["metadata"]["resourceVersion"]
        store.install_crds(TrainerRelease.V2_2)  # nothing to change: nothing written
        assert store.get(CRDS, name)["metadata"]["resourceVersion"] == version
    finally:
        store.close()


TRAINJOB = {"metadata": {"name": "t", "namespace": "default"},
            "spec": {"runtimeRef": {"name": "torch"},
                     "podTemplateOverrides": [{"targetJobs": [{"name": "node"}]}]}}


@pytest.mark.parametrize(
    ("validation", "warned"),
    [(None, ['unknown field "spec.podTemplateOverrides"']),
     ("Warn", ['unknown field "spec.podTemplateOverrides"']), ("Ignore", [])],
)  # fmt: skip
def test_undeclared_fields_are_pruned_with_a_warning(
    validation: str | None, warned: list[str]
) -> None:
    store = Store(trainer_release=TrainerRelease.V2_3)
    try:
        warnings: list[str] = []
        created = store.create(TRAINJOBS, TRAINJOB, field_validation=validation,
                               warnings=warnings)
        assert warnings == warned
        assert "podTemplateOverrides" not in created["spec"]
        assert created["spec"]["suspend"] is False  # the schema's default
        assert created["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    finally:
        store.close()


def test_strict_field_validation_refuses_with_400_and_stores_nothing() -> None:
    store = Store(trainer_release=TrainerRelease.V2_3)
    try:
        with pytest.raises(ApiError) as err:
            store.create(TRAINJOBS, TRAINJOB, field_validation="Strict")
        assert err.value.code == 400 and err.value.reason == "BadRequest"
        assert err.value.message == (
            'TrainJob in version "v1alpha1" cannot be handled as a TrainJob: strict decoding '
            'error: unknown field "spec.podTemplateOverrides"')
        assert store.list(TRAINJOBS)[0] == []
        # the same object is served whole on v2.1
        store.install_crds(TrainerRelease.V2_1)
        created = store.create(TRAINJOBS, TRAINJOB, field_validation="Strict")
        assert created["spec"]["podTemplateOverrides"] == [{"targetJobs": [{"name": "node"}]}]
    finally:
        store.close()


def test_an_immutable_field_is_refused_with_422_as_cel_words_it() -> None:
    store = Store(trainer_release=TrainerRelease.V2_3)
    try:
        job = {"metadata": {"name": "t"}, "spec": {"runtimeRef": {"name": "torch"},
                                                   "trainer": {"numNodes": 2}}}
        store.create(TRAINJOBS, job, namespace="default")
        with pytest.raises(ApiError) as err:
            store.patch(TRAINJOBS, "t", {"spec": {"trainer": {"numNodes": 4}}},
                        namespace="default", patch_type=PatchType.MERGE)
        assert err.value.code == 422 and err.value.reason == "Invalid"
        assert err.value.message == ('TrainJob.trainer.kubeflow.org "t" is invalid: spec.trainer: Invalid value: '
                                     '"object": field is immutable')
        assert err.value.details is not None
        assert err.value.details["causes"] == [{
            "reason": "FieldValueInvalid", "field": "spec.trainer",
            "message": 'Invalid value: "object": field is immutable'}]
        stored = store.get(TRAINJOBS, "t", namespace="default")
        assert stored["spec"]["trainer"] == {"numNodes": 2}
        store.patch(TRAINJOBS, "t", {"spec": {"suspend": True}}, namespace="default",
                    patch_type=PatchType.MERGE)  # a mutable field changes
    finally:
        store.close()
