"""Which webhooks a request calls: rules, scope, selectors and matchPolicy, table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from agent.twin.webhook_match import (
    Attributes,
    Resource,
    matched_resource,
    namespace_matches,
    object_matches,
)

PODS = Resource("", "v1", "pods")
NAMESPACES = Resource("", "v1", "namespaces")
NODES = Resource("", "v1", "nodes")
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")


def rule(resources: list[str], *, operations: tuple[str, ...] = ("CREATE",), groups: str = "",
         versions: str = "v1", scope: str = "*") -> dict[str, Any]:
    return {"operations": list(operations), "apiGroups": [groups], "apiVersions": [versions],
            "resources": resources, "scope": scope}


@pytest.mark.parametrize(("rules", "attrs", "matches"), [
    ([rule(["pods"])], Attributes("CREATE", PODS, namespace="ml"), True),
    ([rule(["pods"])], Attributes("UPDATE", PODS, namespace="ml"), False),
    ([rule(["pods"], operations=("*",))], Attributes("DELETE", PODS, namespace="ml"), True),
    ([rule(["*"])], Attributes("CREATE", PODS, namespace="ml"), True),
    ([rule(["*"])], Attributes("CREATE", PODS, "status", namespace="ml"), False),
    ([rule(["pods/*"])], Attributes("CREATE", PODS, "binding", namespace="ml"), True),
    ([rule(["pods/*"])], Attributes("CREATE", PODS, namespace="ml"), True),
    ([rule(["*/status"])], Attributes("CREATE", PODS, "status", namespace="ml"), True),
    ([rule(["*/*"])], Attributes("CREATE", PODS, "exec", namespace="ml"), True),
    ([rule(["deployments"])], Attributes("CREATE", PODS, namespace="ml"), False),
    ([rule(["jobsets"], groups="jobset.x-k8s.io", versions="*")],
     Attributes("CREATE", JOBSETS, namespace="ml"), True),
    ([rule(["jobsets"], groups="*", versions="v1")],
     Attributes("CREATE", JOBSETS, namespace="ml"), False),
    ([rule(["pods"], scope="Cluster")], Attributes("CREATE", PODS, namespace="ml"), False),
    ([rule(["nodes"], scope="Cluster")], Attributes("CREATE", NODES), True),
    ([rule(["nodes"], scope="Namespaced")], Attributes("CREATE", NODES), False),
    # a Namespace request carries its own name as namespace, yet a Namespace is cluster-scoped
    ([rule(["namespaces"], scope="Namespaced")],
     Attributes("CREATE", NAMESPACES, namespace="ml"), False),
    ([rule(["namespaces"], scope="Cluster")],
     Attributes("CREATE", NAMESPACES, namespace="ml"), True),
    ([rule(["deployments"]), rule(["pods"])], Attributes("CREATE", PODS, namespace="ml"), True),
])
def test_rules(rules: list[dict[str, Any]], attrs: Attributes, matches: bool) -> None:
    assert (matched_resource({"rules": rules}, attrs) is not None) is matches


OLD_JOBSETS = Resource("jobset.x-k8s.io", "v1alpha1", "jobsets")


@pytest.mark.parametrize(("policy", "expected"), [
    ("Equivalent", OLD_JOBSETS), (None, OLD_JOBSETS), ("Exact", None),
])
def test_match_policy(policy: str | None, expected: Resource | None) -> None:
    hook: dict[str, Any] = {"rules": [rule(["jobsets"], groups="jobset.x-k8s.io",
                                           versions="v1alpha1")]}
    if policy:
        hook["matchPolicy"] = policy
    attrs = Attributes("CREATE", JOBSETS, namespace="ml")
    assert matched_resource(hook, attrs, equivalents=(OLD_JOBSETS,)) == expected


OPT_IN = {"matchLabels": {"zonemedic": "enabled"}}


@pytest.mark.parametrize(("selector", "attrs", "ns_labels", "matches"), [
    (None, Attributes("CREATE", PODS, namespace="ml"), {}, True),
    ({}, Attributes("CREATE", PODS, namespace="ml"), {}, True),
    (OPT_IN, Attributes("CREATE", PODS, namespace="ml"), {"zonemedic": "enabled"}, True),
    (OPT_IN, Attributes("CREATE", PODS, namespace="ml"), {"zonemedic": "off"}, False),
    (OPT_IN, Attributes("CREATE", PODS, namespace="ml"), None, False),
    # cluster-scoped objects other than namespaces always match
    (OPT_IN, Attributes("CREATE", NODES), None, True),
    # a Namespace is matched by its own labels
    (OPT_IN, Attributes("CREATE", NAMESPACES, namespace="ml",
                        labels={"zonemedic": "enabled"}), None, True),
    (OPT_IN, Attributes("CREATE", NAMESPACES, namespace="ml", labels={}), None, False),
    ({"matchExpressions": [{"key": "zonemedic", "operator": "In", "values": ["enabled"]}]},
     Attributes("CREATE", PODS, namespace="ml"), {"zonemedic": "enabled"}, True),
])
def test_namespace_selector(selector: Any, attrs: Attributes, ns_labels: dict[str, str] | None,
                            matches: bool) -> None:
    assert namespace_matches({"namespaceSelector": selector}, attrs, ns_labels) is matches


OPT_OUT = {"matchExpressions": [{"key": "zonemedic/opt-out", "operator": "DoesNotExist"}]}


@pytest.mark.parametrize(("selector", "labels", "old_labels", "matches"), [
    (None, {"a": "b"}, None, True),
    (OPT_OUT, {}, None, True),
    (OPT_OUT, {"zonemedic/opt-out": "true"}, None, False),
    # the old object's labels match too (an update that adds the opt-out label)
    (OPT_OUT, {"zonemedic/opt-out": "true"}, {}, True),
    ({"matchLabels": {"app": "train"}}, {"app": "train"}, None, True),
    ({"matchLabels": {"app": "train"}}, {"app": "serve"}, None, False),
    ({"matchExpressions": [{"key": "x", "operator": "Bogus"}]}, {"x": "1"}, None, False),
])
def test_object_selector(selector: Any, labels: dict[str, str], old_labels: dict[str, str] | None,
                         matches: bool) -> None:
    attrs = Attributes("CREATE", PODS, namespace="ml", labels=labels, old_labels=old_labels)
    assert object_matches({"objectSelector": selector}, attrs) is matches
