"""The MutatingWebhookConfiguration: a `pods` rule only for a group placed pod by pod, its own
webhook selecting that group's pods only."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.admission.manifest import POD_RULE, webhook_configuration, webhook_names
from agent.settings import DiagnosisSettings, GroupSpec, Settings
from tests.support.admission import GROUP, POD_GROUP


def resources(hook: dict[str, object]) -> set[str]:
    rules = hook["rules"]
    assert isinstance(rules, list)
    return {r for rule in rules for r in rule["resources"]}


@pytest.mark.parametrize(("groups", "pod_hooks"), [
    ([], 0),
    ([GROUP], 0),  # a group of Deployments and batch Jobs: their templates are patched
    ([POD_GROUP], 1),
    ([GROUP, replace(POD_GROUP, name="gang", namespace="research")], 1),
])  # fmt: skip
def test_the_pods_rule_is_there_only_for_a_group_placed_pod_by_pod(
    groups: list[GroupSpec], pod_hooks: int
) -> None:
    settings = Settings(diagnosis=DiagnosisSettings(groups=groups))
    hooks = webhook_configuration(settings)["webhooks"]
    assert [h["name"] for h in hooks] == webhook_names(settings)
    assert len(hooks) == 1 + pod_hooks
    assert "pods" not in resources(hooks[0])
    for hook in hooks[1:]:
        assert hook["rules"] == [POD_RULE]
        for key in ("sideEffects", "failurePolicy", "timeoutSeconds", "reinvocationPolicy",
                    "clientConfig", "admissionReviewVersions"):  # fmt: skip
            assert hook[key] == hooks[0][key]


def test_a_pods_webhook_selects_its_groups_pods_in_opted_in_namespaces() -> None:
    group = replace(POD_GROUP, name="gang", namespace="research")
    settings = Settings(diagnosis=DiagnosisSettings(groups=[group]))
    _, hook = webhook_configuration(settings)["webhooks"]
    assert hook["name"] == "gang.pods.placement.zonemedic.io"
    assert hook["objectSelector"] == {
        "matchLabels": {"app": "lab"},
        "matchExpressions": [{"key": "zonemedic.io/admission", "operator": "NotIn", "values": ["disabled"]}]}
    assert hook["namespaceSelector"] == {
        "matchLabels": {"zonemedic.io/admission": "enabled"},
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["research"]}]}
