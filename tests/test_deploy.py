"""deploy/: the kustomize overlays render, the shipped config is valid, RBAC grants only what is needed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.settings import Settings, build

ROOT = Path(__file__).resolve().parents[1]
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def render(overlay: str) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(ROOT / "deploy" / overlay)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@needs_kubectl
@pytest.mark.parametrize("overlay", ["base", "overlays/dev", "overlays/production"])
def test_overlay_renders_with_the_agent_and_its_config(overlay: str) -> None:
    docs = render(overlay)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Deployment", "zonemedic") in kinds
    assert ("ClusterRole", "zonemedic") in kinds
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    settings = build(Settings, yaml.safe_load(config["data"]["config.yaml"]))
    assert settings.http.port == 8080
    assert settings.leader_election.namespace == "zonemedic"
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["metadata"]["namespace"] == settings.leader_election.namespace


KUBEFLOW = ("pytorchjobs", "tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs")
READ = ("get", "list", "watch")


@needs_kubectl
def test_cluster_role_writes_only_what_remediation_needs() -> None:
    role = next(d for d in render("base") if d["kind"] == "ClusterRole")
    write_verbs = {"create", "update", "patch", "delete", "deletecollection"}
    writes = {
        (group, resource, verb)
        for rule in role["rules"]
        for verb in sorted(write_verbs & set(rule["verbs"]))
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert writes == {
        ("", "events", "create"),
        ("apps", "deployments", "patch"),
        ("batch", "jobs", "create"),
        ("batch", "jobs", "delete"),
        *{("kubeflow.org", r, "patch") for r in KUBEFLOW},
    }
    readable = {r for rule in role["rules"] for r in rule["resources"]}
    assert "secrets" not in readable and "leases" not in readable
    assert all("*" not in rule["verbs"] and "*" not in rule["resources"] for rule in role["rules"])


AGENT_USES = [
    # what the agent reads (list + watch for the cache, get for the remediator's re-reads)
    *[(verb, "", resource, "ml", "") for verb in READ for resource in ("pods", "namespaces")],
    *[(verb, "", "nodes", "", "") for verb in READ],
    *[(verb, "networking.k8s.io", "networkpolicies", "ml", "") for verb in READ],
    *[(verb, "cilium.io", "ciliumnetworkpolicies", "ml", "") for verb in READ],
    *[(verb, "cilium.io", "ciliumclusterwidenetworkpolicies", "", "") for verb in READ],
    *[(verb, "kubeflow.org", r, "ml", "") for verb in (*READ, "patch") for r in KUBEFLOW],
    *[(verb, "apps", "deployments", "ml", "") for verb in (*READ, "patch")],
    *[(verb, "apps", "replicasets", "ml", "") for verb in READ],
    *[(verb, "batch", "jobs", "ml", "") for verb in (*READ, "create", "delete")],
    ("create", "", "events", "ml", ""),
    # its own Lease
    ("get", "coordination.k8s.io", "leases", "zonemedic", "zonemedic-leader"),
    ("update", "coordination.k8s.io", "leases", "zonemedic", "zonemedic-leader"),
    ("create", "coordination.k8s.io", "leases", "zonemedic", ""),
]

AGENT_NEVER = [
    ("get", "", "secrets", "ml", ""),
    ("list", "", "configmaps", "ml", ""),
    ("delete", "", "pods", "ml", "resnet-worker-0"),
    ("create", "", "pods", "ml", ""),
    ("patch", "", "nodes", "", "node-1"),
    ("patch", "", "pods", "ml", "resnet-worker-0"),
    ("patch", "", "events", "ml", "e"),
    ("delete", "kubeflow.org", "pytorchjobs", "ml", "resnet"),
    ("create", "kubeflow.org", "pytorchjobs", "ml", ""),
    ("update", "kubeflow.org", "pytorchjobs", "ml", "resnet"),
    ("delete", "apps", "deployments", "ml", "coordinator"),
    ("patch", "batch", "jobs", "ml", "workers"),
    ("patch", "networking.k8s.io", "networkpolicies", "ml", "p"),
    ("patch", "cilium.io", "ciliumnetworkpolicies", "ml", "p"),
    ("update", "coordination.k8s.io", "leases", "zonemedic", "someone-else"),
    ("get", "coordination.k8s.io", "leases", "kube-system", "zonemedic-leader"),
    ("create", "coordination.k8s.io", "leases", "ml", ""),
    ("delete", "coordination.k8s.io", "leases", "zonemedic", "zonemedic-leader"),
]


@needs_kubectl
def test_rbac_in_the_twin_authorizer_allows_exactly_what_the_agent_uses() -> None:
    from agent.twin.auth import Attributes, Authorizer, UserInfo, load_rbac
    from agent.twin.resources import lookup
    from agent.twin.store import Store

    docs = render("base")
    store = Store()
    try:
        for namespace in ("ml", "zonemedic"):
            store.create(lookup("namespaces"), {"metadata": {"name": namespace}})
        assert load_rbac(store, docs) == 5  # the roles, their bindings, the service account
        authorizer = Authorizer(store)
        account = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]
        agent = UserInfo.service_account(account["namespace"], account["name"])
        for expected, cases in ((True, AGENT_USES), (False, AGENT_NEVER)):
            for verb, group, resource, namespace, name in cases:
                attrs = Attributes(verb, group, resource, namespace=namespace, name=name)
                assert authorizer.allowed(agent, attrs) is expected, attrs
    finally:
        store.close()
