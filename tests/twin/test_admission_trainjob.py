"""The TrainJob's admission per Trainer release, on a store: when runtime patches (v2.2+) or pod
template overrides (v2.1) may change, the checks on their entries, the CRD's own rules, and the
exact status and message kube-apiserver answers."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from agent.twin import admission_trainjob
from agent.twin.apierror import ApiError
from agent.twin.crds import TrainerRelease
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from agent.twin.store import Store

TRAINJOBS = lookup("trainjobs")
JOBSETS = lookup("jobsets")
RUNTIMES = lookup("clustertrainingruntimes")
ZONE = "topology.kubernetes.io/zone"
DENIED = 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '
RUNTIME = {"metadata": {"name": "torch"}, "spec": {"mlPolicy": {"torch": {}}, "template": {"spec": {
    "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
        "containers": [{"name": "node", "image": "x"}, {"name": "sidecar", "image": "y"}]}}}}}]}}}}


def _store(release: TrainerRelease, *, active: int = 0) -> Store:
    store = Store(trainer_release=release)
    admission_trainjob.register(store, release=release)
    store.create(lookup("namespaces"), {"metadata": {"name": "ml"}})
    store.create(RUNTIMES, RUNTIME)
    store.create(JOBSETS, {"metadata": {"name": "llm", "namespace": "ml"}, "spec": {},
                           "status": {"replicatedJobsStatus": [
                               {"name": "node", "active": active}]}})  # fmt: skip
    return store


@pytest.fixture
def stores() -> Iterator[list[Store]]:
    made: list[Store] = []
    yield made
    for store in made:
        store.close()


def _entry(manager: str = "zonemedic.io/fix", rjob: str = "node", **pod: Any) -> dict[str, Any]:
    spec = pod or {"nodeSelector": {ZONE: "us-east-1a"}}
    return {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": rjob, "template": {"spec": {"template": {"spec": spec}}}}]}}}}


def _trainjob(*, suspend: bool, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "llm", "namespace": "ml"},
            "spec": {"runtimeRef": {"name": "torch"}, "suspend": suspend, **spec}}


def _update(store: Store, body: dict[str, Any]) -> dict[str, Any]:
    current = store.get(TRAINJOBS, "llm", namespace="ml")
    new = copy.deepcopy(current)
    new["spec"].update(body)
    return store.update(TRAINJOBS, new, namespace="ml")


V22_RULE = "RuntimePatches can only be modified when the TrainJob is suspended"
V23_RULE = ("RuntimePatches can only be modified when the TrainJob is suspended before or after "
            "the update")


@pytest.mark.parametrize(
    ("release", "old_suspended", "new_suspended", "active", "refusal"),
    [
        (TrainerRelease.V2_2, False, False, 0, V22_RULE),
        (TrainerRelease.V2_3, False, False, 0, V23_RULE),
        # suspending and patching in one request: the JobSet still has active Jobs
        (TrainerRelease.V2_2, False, True, 1,
         "RuntimePatches cannot be modified when the JobSet's ReplicatedJob node is still active"),
        (TrainerRelease.V2_3, False, True, 1,
         "RuntimePatches cannot be modified when the JobSet's ReplicatedJob node is still active"),
        (TrainerRelease.V2_2, True, True, 0, None),
        (TrainerRelease.V2_3, True, True, 0, None),
        # patch and resume in one request: v2.3 only
        (TrainerRelease.V2_2, True, False, 0, V22_RULE),
        (TrainerRelease.V2_3, True, False, 0, None),
    ],
)
def test_when_runtime_patches_may_change(
    stores: list[Store], release: TrainerRelease, old_suspended: bool, new_suspended: bool,
    active: int, refusal: str | None,
) -> None:  # fmt: skip
    store = _store(release, active=active)
    stores.append(store)
    store.create(TRAINJOBS, _trainjob(suspend=old_suspended))
    body = {"suspend": new_suspended, "runtimePatches": [_entry()]}
    if refusal is None:
        updated = _update(store, body)
        (entry,) = updated["spec"]["runtimePatches"]
        assert entry["manager"] == "zonemedic.io/fix" and entry["time"]  # set by the defaulter
        return
    with pytest.raises(ApiError) as err:
        _update(store, body)
    assert (err.value.code, err.value.reason) == (403, "Forbidden")
    assert err.value.message == f"{DENIED}spec.runtimePatches: Forbidden: {refusal}"
    assert "runtimePatches" not in store.get(TRAINJOBS, "llm", namespace="ml")["spec"]


def test_v21_applies_the_rule_to_pod_template_overrides(stores: list[Store]) -> None:
    store = _store(TrainerRelease.V2_1)
    stores.append(store)
    store.create(TRAINJOBS, _trainjob(suspend=False))
    override = [{"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {ZONE: "a"}}}]
    with pytest.raises(ApiError) as err:
        _update(store, {"podTemplateOverrides": override})
    assert err.value.code == 403
    assert err.value.message == (f"{DENIED}spec.podTemplateOverrides: Forbidden: "
                                 "PodTemplateOverrides can only be modified when the TrainJob is "
                                 "suspended")
    updated = _update(store, {"suspend": True, "podTemplateOverrides": override})
    assert updated["spec"]["podTemplateOverrides"] == override
    with pytest.raises(ApiError) as err:
        _update(store, {"podTemplateOverrides": [{"targetJobs": [{"name": "launcher"}]}]})
    assert err.value.message.endswith("must not have targetJob that doesn't exist in the runtime "
                                      "job template")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (_entry(manager="zonemedic"), 'spec.runtimePatches.manager: Invalid value: "zonemedic": '
         'must be a domain-prefixed path (such as "acme.io/foo")'),
        (_entry(manager="Zone_Medic/fix"), 'spec.runtimePatches.manager: Invalid value: '
         '"Zone_Medic": a lowercase RFC 1123 subdomain'),
        (_entry(rjob="launcher"), "spec.runtimePatches: Invalid value: "
         "[]v1alpha1.RuntimePatch{...}: must not have replicated job that doesn't exist in the "
         "runtime job template"),
        (_entry(containers=[{"name": "nope"}]), "must not have container that doesn't exist in "
         "the runtime job node"),
        (_entry(containers=[{"name": "node", "env": [{"name": "A", "value": "1"}]}]),
         "must not have envs for the dataset-initializer, model-initializer, node containers"),
    ],
)
def test_runtime_patch_entries_are_checked_on_create(
    stores: list[Store], entry: dict[str, Any], message: str
) -> None:
    store = _store(TrainerRelease.V2_3)
    stores.append(store)
    with pytest.raises(ApiError) as err:
        store.create(TRAINJOBS, _trainjob(suspend=True, runtimePatches=[entry]))
    assert err.value.code == 403 and err.value.message.startswith(DENIED)
    assert message in err.value.message
    assert store.list(TRAINJOBS)[0] == []


def test_entries_of_other_managers_are_kept_and_their_times_too(stores: list[Store]) -> None:
    store = _store(TrainerRelease.V2_3)
    stores.append(store)
    kueue = _entry(manager="kueue.x-k8s.io/manager", nodeSelector={"pool": "a"})
    created = store.create(TRAINJOBS, _trainjob(suspend=True, runtimePatches=[kueue]))
    first = created["spec"]["runtimePatches"][0]["time"]
    # the agent applies its own entry (server-side apply merges the map list by manager)
    mine = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "llm"}, "spec": {"runtimePatches": [_entry()]}}
    applied = store.patch(TRAINJOBS, "llm", mine, namespace="ml", patch_type=PatchType.APPLY)
    managers = [(p["manager"], p["time"]) for p in applied["spec"]["runtimePatches"]]
    assert managers[0] == ("kueue.x-k8s.io/manager", first)
    assert managers[1][0] == "zonemedic.io/fix" and managers[1][1]


@pytest.mark.parametrize(
    ("name", "spec", "message"),
    [
        ("llm.v2", {}, 'TrainJob.trainer.kubeflow.org "llm.v2" is invalid: <nil>: Invalid value: '
         '"object": metadata.name must match RFC 1035 DNS label format'),
        ("llm", {"managedBy": "someone.io/else"}, 'TrainJob.trainer.kubeflow.org "llm" is invalid: '
         'spec.managedBy: Invalid value: "string": ManagedBy must be '
         "trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set"),
    ],
)
def test_the_crd_rules_answer_422(stores: list[Store], name: str, spec: dict[str, Any],
                                  message: str) -> None:  # fmt: skip
    store = _store(TrainerRelease.V2_3)
    stores.append(store)
    body = _trainjob(suspend=False, **spec)
    body["metadata"]["name"] = name
    with pytest.raises(ApiError) as err:
        store.create(TRAINJOBS, body)
    assert (err.value.code, err.value.reason, err.value.message) == (422, "Invalid", message)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"runtimeRef": {"name": "missing"}},
         'spec.RuntimeRef: Invalid value: v1alpha1.RuntimeRef{...}: '
         'clustertrainingruntimes.trainer.kubeflow.org "missing" not found: specified '
         "clusterTrainingRuntime must be created before the TrainJob is created"),
        ({"runtimeRef": {"name": "torch", "kind": "TrainingRuntime"}},
         'spec.runtimeRef: Invalid value: v1alpha1.RuntimeRef{...}: '
         'trainingruntimes.trainer.kubeflow.org "torch" not found: specified trainingRuntime '
         "must be created before the TrainJob is created"),
        ({"trainer": {"env": [{"name": "PET_NNODES", "value": "9"}]}},
         "spec.trainer.env: Invalid value: []v1.EnvVar{...}: must not have reserved envs, "
         "invalid envs configured: [PET_NNODES]"),
    ],
)
def test_the_webhook_answers_403(stores: list[Store], spec: dict[str, Any], message: str) -> None:
    store = _store(TrainerRelease.V2_2)
    stores.append(store)
    body = _trainjob(suspend=False)
    body["spec"].update(spec)
    with pytest.raises(ApiError) as err:
        store.create(TRAINJOBS, body)
    assert (err.value.code, err.value.reason) == (403, "Forbidden")
    assert err.value.message == DENIED + message
