"""Who owns an object: GitOps markers, pipelines, field managers, kubectl apply, controllers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.model.ownership import (
    ObjectOwnership,
    OwnerKind,
    Ownership,
    field_manager,
    field_path,
    last_applied,
    latest_writer,
    ownership_of,
)


def obj(*, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        managers: tuple[str, ...] = (), refs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "coordinator", "namespace": "lab"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    if managers:
        meta["managedFields"] = [{"manager": m, "operation": "Update", "time": f"2026-01-0{i + 1}T00:00:00Z",
                                  "fieldsV1": {}} for i, m in enumerate(managers)]
    if refs:
        meta["ownerReferences"] = refs
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("case", "kind", "name", "namespace", "says"),
    [
        (obj(labels={"argocd.argoproj.io/instance": "lab"}), OwnerKind.ARGO_CD, "lab", "",
         "managed by Argo CD application lab: this live fix lasts until its next sync unless "
         "the change is committed to the application's source"),
        (obj(annotations={"argocd.argoproj.io/tracking-id":
                          "team_lab:apps/Deployment:lab/coordinator"}),
         OwnerKind.ARGO_CD, "team/lab", "", "managed by Argo CD application team/lab"),
        (obj(labels={"kustomize.toolkit.fluxcd.io/name": "apps",
                     "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
         OwnerKind.FLUX_KUSTOMIZATION, "apps", "flux-system",
         "managed by Flux Kustomization flux-system/apps"),
        (obj(labels={"helm.toolkit.fluxcd.io/name": "trainer",
                     "helm.toolkit.fluxcd.io/namespace": "ml"}),
         OwnerKind.FLUX_HELM_RELEASE, "trainer", "ml", "managed by Flux HelmRelease ml/trainer"),
        (obj(labels={"app.kubernetes.io/managed-by": "Helm"},
             annotations={"meta.helm.sh/release-name": "lab", "meta.helm.sh/release-namespace": "ml"}),
         OwnerKind.HELM, "lab", "ml", "until the next `helm upgrade`"),
        (obj(refs=[{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "nightly-x"}]),
         OwnerKind.ARGO_WORKFLOW, "nightly-x", "", "created by Argo Workflow nightly-x"),
        (obj(labels={"workflows.argoproj.io/workflow": "wf-1"}), OwnerKind.ARGO_WORKFLOW, "wf-1",
         "", "this run only"),
        (obj(labels={"pipelines.kubeflow.org/v2_component": "true", "pipeline/runid": "r-9"}),
         OwnerKind.KUBEFLOW_PIPELINE, "r-9", "", "created by Kubeflow Pipelines run r-9"),
        (obj(managers=("kustomize-controller",)), OwnerKind.FLUX_KUSTOMIZATION, "", "",
         "managed by Flux Kustomization"),
        (obj(managers=("argocd-controller",)), OwnerKind.ARGO_CD, "", "", "next sync"),
        (obj(annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}"},
             managers=("kubectl-client-side-apply", "zonemedic")),
         OwnerKind.KUBECTL_APPLY, "kubectl-client-side-apply", "",
         "applied with kubectl apply (manager kubectl-client-side-apply): this live fix lasts "
         "until the manifest is applied again"),
        (obj(refs=[{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "name": "t", "controller": True}]),
         OwnerKind.CONTROLLER, "TrainJob t", "", "controlled by TrainJob t"),
        (obj(managers=("kubectl-create", "zonemedic")), OwnerKind.NONE, "", "",
         "not managed by GitOps (written by kubectl-create): no GitOps tool"),
    ],
)
def test_ownership_of(case: dict[str, Any], kind: OwnerKind, name: str, namespace: str,
                      says: str) -> None:
    found = ownership_of(case)
    assert (found.kind, found.name, found.namespace) == (kind, name, namespace)
    assert says in found.sentence()
    assert "zonemedic" not in found.managers
    assert found.durable == (kind is OwnerKind.NONE)
    assert Ownership.from_dict(found.to_dict()) == found
    wrapped = ObjectOwnership("Deployment", "lab", "coordinator", found)
    assert ObjectOwnership.from_dict(wrapped.to_dict()) == wrapped


def test_markers_win_over_managers_and_last_applied() -> None:
    both = obj(labels={"argocd.argoproj.io/instance": "lab"},
               annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}"},
               managers=("kubectl-client-side-apply",))
    found = ownership_of(both)
    assert found.kind is OwnerKind.ARGO_CD and found.last_applied


ZONE_PATH = field_path("spec", "template", "spec", "nodeSelector", "topology.kubernetes.io/zone")


def test_field_manager_and_latest_writer() -> None:
    entry = {"f:spec": {"f:template": {"f:spec": {"f:nodeSelector": {
        "topology.kubernetes.io/zone": {}}}}}}
    target = {"metadata": {"managedFields": [
        {"manager": "zonemedic", "operation": "Update", "time": "2026-01-02T00:00:00Z",
         "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        {"manager": "argocd-controller", "operation": "Apply", "time": "2026-01-03T00:00:00Z",
         "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:nodeSelector": {
             "f:topology.kubernetes.io/zone": {}}}}}}},
        {"manager": "other", "operation": "Update", "time": "2026-01-01T00:00:00Z",
         "fieldsV1": entry},
    ]}}
    writer = field_manager(target, ZONE_PATH)
    assert writer is not None and (writer.manager, writer.operation) == ("argocd-controller", "Apply")
    assert field_manager(target, field_path("spec", "paused")) is None
    latest = latest_writer(target)
    assert latest is not None and latest.manager == "argocd-controller"


@pytest.mark.parametrize(
    ("annotation", "expect"),
    [(json.dumps({"kind": "Deployment"}), {"kind": "Deployment"}), ("not json", None),
     ("[1]", None), (None, None)],
)
def test_last_applied(annotation: str | None, expect: Any) -> None:
    annotations = {"kubectl.kubernetes.io/last-applied-configuration": annotation} if annotation else None
    assert last_applied(obj(annotations=annotations)) == expect
