"""The JobSet webhooks, pure: defaults on create, and which template changes an update may make
(only labels, annotations, nodeSelector, tolerations and schedulingGates, and only while the old
or the new JobSet is suspended), with the status kube-apiserver relays."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent.twin.admission_jobset import default_jobset, validate_jobset
from agent.twin.apierror import ApiError

ZONE = "topology.kubernetes.io/zone"


def _jobset(*, suspend: bool | None = None, **pod_spec: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {
        "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed",
                 "template": {"metadata": {"labels": {"app": "x"}},
                              "spec": {"containers": [{"name": "c", "image": "v1"}],
                                       **pod_spec}}}}}]}  # fmt: skip
    if suspend is not None:
        spec["suspend"] = suspend
    return {"metadata": {"name": "js", "namespace": "ml"}, "spec": spec}


def _pod_template(obj: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    return found


def test_defaults_on_create_only() -> None:
    new = {"metadata": {"name": "js"}, "spec": {"replicatedJobs": [{"name": "w", "template": {
        "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}}]}}
    default_jobset(None, new)
    assert new["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert new["spec"]["successPolicy"] == {"operator": "All"}
    assert new["spec"]["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    job = new["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["completionMode"] == "Indexed"
    assert job["template"]["spec"]["restartPolicy"] == "OnFailure"
    updated = {"metadata": {"name": "js"}, "spec": {"replicatedJobs": []}}
    default_jobset(new, updated)
    assert updated == {"metadata": {"name": "js"}, "spec": {"replicatedJobs": []}}


def _change(obj: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    if key in ("labels", "annotations"):
        _pod_template(out)["metadata"][key] = value
    elif key == "image":
        _pod_template(out)["spec"]["containers"][0]["image"] = value
    else:
        _pod_template(out)["spec"][key] = value
    return out


AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": ZONE, "operator": "In", "values": ["a"]}]}]}}}  # fmt: skip


@pytest.mark.parametrize(
    ("old_suspended", "new_suspended", "key", "value", "allowed"),
    [
        (True, True, "nodeSelector", {ZONE: "a"}, True),
        (False, True, "nodeSelector", {ZONE: "a"}, True),  # suspending with the change: allowed
        (True, False, "tolerations", [{"key": "gpu", "operator": "Exists"}], True),
        (True, True, "schedulingGates", [{"name": "wait"}], True),
        (True, True, "labels", {"app": "y"}, True),
        (True, True, "annotations", {"a": "b"}, True),
        (False, False, "nodeSelector", {ZONE: "a"}, False),  # running: nothing may change
        (True, True, "affinity", AFFINITY, False),  # affinity never changes on a JobSet
        (True, True, "image", "v2", False),  # nor the containers
        (True, True, "topologySpreadConstraints", [{"maxSkew": 1}], False),
    ],
)
def test_update_rules(old_suspended: bool, new_suspended: bool, key: str, value: Any,
                      allowed: bool) -> None:  # fmt: skip
    old = _jobset(suspend=old_suspended)
    new = _change(_jobset(suspend=new_suspended), key, value)
    if allowed:
        validate_jobset(old, new)
        return
    with pytest.raises(ApiError) as err:
        validate_jobset(old, new)
    assert err.value.code == 422 and err.value.reason == "Invalid"
    assert err.value.message == (
        'admission webhook "vjobset.kb.io" denied the request: JobSet.jobset.x-k8s.io "js" is '
        "invalid: spec.replicatedJobs: Invalid value: []v1alpha2.ReplicatedJob{...}: field is "
        "immutable")
    assert err.value.details == {"name": "js", "group": "jobset.x-k8s.io", "kind": "JobSet",
                                 "causes": [{"reason": "FieldValueInvalid",
                                             "field": "spec.replicatedJobs",
                                             "message": "Invalid value: "
                                             "[]v1alpha2.ReplicatedJob{...}: field is immutable"}]}


def test_empty_and_absent_maps_are_the_same_and_suspend_itself_may_change() -> None:
    old = _jobset(suspend=False)
    validate_jobset(old, _change(_jobset(suspend=True), "nodeSelector", {}))
    validate_jobset(old, _jobset(suspend=True))


def test_managed_by_is_immutable() -> None:
    old = _jobset()
    new = copy.deepcopy(old)
    new["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    with pytest.raises(ApiError) as err:
        validate_jobset(old, new)
    assert err.value.code == 422
    assert err.value.message.endswith('spec.managedBy: Invalid value: '
                                      '"kueue.x-k8s.io/multikueue": field is immutable')


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"coordinator": {"replicatedJob": "nope"}},
         "<nil>: Internal error: coordinator replicatedJob nope does not exist"),
        ({"coordinator": {"replicatedJob": "workers", "podIndex": 2}},
         "<nil>: Internal error: coordinator pod index 2 is invalid for replicatedJob workers "
         "job index 0"),
    ],
)
def test_create_rules(change: dict[str, Any], message: str) -> None:
    new = _jobset()
    new["spec"].update(change)
    with pytest.raises(ApiError) as err:
        validate_jobset(None, new)
    assert err.value.code == 422
    assert err.value.message == ('admission webhook "vjobset.kb.io" denied the request: '
                                 f'JobSet.jobset.x-k8s.io "js" is invalid: {message}')


def test_long_names_and_first_dependency_are_refused_together() -> None:
    new = _jobset()
    new["metadata"]["name"] = "x" * 60
    new["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "other", "status": "Ready"}]
    with pytest.raises(ApiError) as err:
        validate_jobset(None, new)
    text = err.value.message
    assert "[<nil>: Internal error: DependsOn can't be set for the first ReplicatedJob, " in text
    assert "job names generated for this JobSet will exceed 63 characters" in text
    assert "cannot depend on replicatedJob: other" in text
