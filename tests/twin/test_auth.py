"""RBAC over the store's Role/ClusterRole/bindings, token authentication, access reviews."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from agent.twin.apierror import ApiError
from agent.twin.auth import (
    ADMIN,
    AUTHENTICATED,
    Attributes,
    Authenticator,
    Authorizer,
    UserInfo,
    access_review,
    forbidden,
    load_rbac,
)
from agent.twin.resources import lookup
from agent.twin.store import Store

NAMESPACES = lookup("namespaces")

RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: agent}
rules:
- {apiGroups: [""], resources: [pods, nodes], verbs: [get, list, watch]}
- {apiGroups: [kubeflow.org], resources: [pytorchjobs, tfjobs], verbs: [patch]}
- {apiGroups: [cilium.io], resources: ["*"], verbs: [get]}
- {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, update],
   resourceNames: [zonemedic-leader]}
- {nonResourceURLs: ["/metrics"], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: agent}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: agent}
subjects: [{kind: ServiceAccount, name: zonemedic, namespace: zonemedic}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: events, namespace: ml}
rules:
- {apiGroups: [""], resources: [events, pods/status], verbs: [create, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: events, namespace: ml}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: events}
subjects: [{kind: Group, name: ml-writers}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: wildcards}
rules:
- {apiGroups: ["*"], resources: ["*/status", "pods/*", "pods"], verbs: [get, update, list]}
- {nonResourceURLs: ["/metrics"], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: wildcards, namespace: ml}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: wildcards}
subjects: [{kind: Group, name: wildcards}]
"""

AGENT = UserInfo.service_account("zonemedic", "zonemedic")
WILD = UserInfo("wild", ("wildcards", AUTHENTICATED))
WRITER = UserInfo("carol", ("ml-writers", AUTHENTICATED))


@pytest.fixture
def authorizer() -> Iterator[Authorizer]:
    store = Store()
    store.create(NAMESPACES, {"metadata": {"name": "ml"}})
    store.create(NAMESPACES, {"metadata": {"name": "zonemedic"}})
    assert load_rbac(store, yaml.safe_load_all(RBAC)) == 6
    yield Authorizer(store)
    store.close()


@pytest.mark.parametrize(
    ("user", "attrs", "allowed"),
    [
        (AGENT, Attributes("list", "", "pods", namespace="ml"), True),
        (AGENT, Attributes("watch", "", "nodes"), True),
        (AGENT, Attributes("delete", "", "pods", namespace="ml", name="p"), False),
        (AGENT, Attributes("patch", "kubeflow.org", "pytorchjobs", namespace="ml"), True),
        (AGENT, Attributes("patch", "kubeflow.org", "pytorchjobs", "status", "ml"), False),
        (AGENT, Attributes("update", "coordination.k8s.io", "leases", namespace="zonemedic",
                           name="zonemedic-leader"), True),
        (AGENT, Attributes("update", "coordination.k8s.io", "leases", namespace="zonemedic",
                           name="other"), False),
        (AGENT, Attributes("get", "cilium.io", "ciliumnetworkpolicies", "status", "ml"), True),
        (AGENT, Attributes("get", path="/metrics"), True),
        (AGENT, Attributes("get", path="/api/v1"), True),
        (WRITER, Attributes("create", "", "events", namespace="ml"), True),
        (WRITER, Attributes("create", "", "events", namespace="default"), False),
        (WRITER, Attributes("patch", "", "pods", "status", "ml"), True),
        (WRITER, Attributes("patch", "", "pods", "", "ml"), False),
        (ADMIN, Attributes("delete", "", "nodes", name="n1"), True),
        (UserInfo("system:serviceaccount:other:zonemedic"), Attributes("list", "", "pods"),
         False),
        # wildcards as upstream RBAC: `*/status` for every resource, no `pods/*`
        (WILD, Attributes("update", "apps", "deployments", "status", "ml", "d"), True),
        (WILD, Attributes("update", "apps", "deployments", "", "ml", "d"), False),
        (WILD, Attributes("get", "", "pods", "log", "ml", "p"), False),
        (WILD, Attributes("get", "", "pods", "", "ml", "p"), True),
        (WILD, Attributes("list", "metrics.k8s.io", "pods", namespace="ml"), True),  # any group
        (WILD, Attributes("delete", "batch", "jobs", namespace="ml", name="j"), False),
        # resourceNames: only requests that name one of them (not a list)
        (AGENT, Attributes("list", "coordination.k8s.io", "leases", namespace="zonemedic"),
         False),
        # a ClusterRole bound by a RoleBinding grants no non-resource URL
        (WILD, Attributes("get", path="/metrics"), False),
    ],
)
def test_rbac_rules(authorizer: Authorizer, user: UserInfo, attrs: Attributes,
                    allowed: bool) -> None:
    assert authorizer.allowed(user, attrs) is allowed


def test_forbidden_message_matches_the_real_server() -> None:
    err = forbidden(AGENT, Attributes("delete", "", "pods", namespace="ml", name="p"))
    assert err.code == 403 and err.reason == "Forbidden"
    assert err.message == (
        'pods "p" is forbidden: User "system:serviceaccount:zonemedic:zonemedic" cannot delete '
        'resource "pods" in API group "" in the namespace "ml"')
    err = forbidden(AGENT, Attributes("list", "apps", "deployments"))
    assert err.message.endswith(
        'cannot list resource "deployments" in API group "apps" at the cluster scope')
    assert err.message.startswith("deployments.apps is forbidden")


def test_rules_follow_rbac_changes(authorizer: Authorizer) -> None:
    attrs = Attributes("delete", "", "pods", namespace="ml")
    assert not authorizer.allowed(AGENT, attrs)
    load_rbac(authorizer._store, [{
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "agent"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}],
    }])
    assert authorizer.allowed(AGENT, attrs)


def test_access_review(authorizer: Authorizer) -> None:
    review = access_review(authorizer, AGENT, {"spec": {"resourceAttributes": {
        "verb": "list", "resource": "pods", "namespace": "ml"}}})
    assert review["status"]["allowed"] is True and review["kind"] == "SelfSubjectAccessReview"
    review = access_review(authorizer, AGENT, {"spec": {"nonResourceAttributes": {
        "verb": "get", "path": "/debug"}}})
    assert review["status"]["allowed"] is False
    with pytest.raises(ApiError) as err:
        access_review(authorizer, AGENT, {"spec": {}})
    assert err.value.code == 422


@pytest.mark.parametrize(
    ("header", "expect"),
    [("Bearer good", "alice"), ("bearer good", "alice"), ("Bearer bad", None), (None, None),
     ("Basic Zm9v", None)],
)
def test_token_authentication(header: str | None, expect: str | None) -> None:
    auth = Authenticator({"good": UserInfo("alice")})
    if expect is None:
        with pytest.raises(ApiError) as err:
            auth.authenticate(header)
        assert err.value.code == 401 and err.value.reason == "Unauthorized"
    else:
        assert auth.authenticate(header).name == expect


def test_no_tokens_means_admin() -> None:
    assert Authenticator().authenticate(None) == ADMIN
