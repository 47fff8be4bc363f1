"""Who owns an object zonemedic changes, and what that means for a live fix.

An object's owner is read from the object alone, most specific first: the GitOps markers (Argo
CD's `argocd.argoproj.io/instance` label or `argocd.argoproj.io/tracking-id` annotation, Flux's
`kustomize.toolkit.fluxcd.io/name`/`namespace` and `helm.toolkit.fluxcd.io/name`/`namespace`
labels, Helm's `app.kubernetes.io/managed-by: Helm` with `meta.helm.sh/release-name`), then a
pipeline that created it (an ownerReference to an Argo Workflows `Workflow`, the
`workflows.argoproj.io/workflow` label, Kubeflow Pipelines' `pipelines.kubeflow.org/...` labels),
then its field managers (`metadata.managedFields`: `argocd-controller`, `kustomize-controller`,
`helm-controller`, `helm`), then `kubectl apply` (the `kubectl.kubernetes.io/last-applied-
configuration` annotation or the `kubectl-client-side-apply` / `kubectl` apply manager), then a
controlling ownerReference (an operator re-renders it), else nobody: the live fix lasts.

Also who wrote a field (`field_manager`): the managedFields entry whose FieldsV1 holds the path.

Used by the planner (each target's owner goes on the plan), the proposal read-back, the chat
message and the revert detection. Pure: plain dicts in; it does not read the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agent.model.workload import PIPELINES_LABEL_PREFIX

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
ARGO_INSTANCE = "argocd.argoproj.io/instance"
ARGO_TRACKING = "argocd.argoproj.io/tracking-id"
FLUX_KS_NAME = "kustomize.toolkit.fluxcd.io/name"
FLUX_KS_NAMESPACE = "kustomize.toolkit.fluxcd.io/namespace"
FLUX_HELM_NAME = "helm.toolkit.fluxcd.io/name"
FLUX_HELM_NAMESPACE = "helm.toolkit.fluxcd.io/namespace"
MANAGED_BY = "app.kubernetes.io/managed-by"
HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"
ARGO_WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
KFP_PREFIX = PIPELINES_LABEL_PREFIX
KFP_RUN = "pipeline/runid"
ZONEMEDIC_MANAGER = "zonemedic"
_ARGO_MANAGERS = ("argocd-controller", "argocd-application-controller")
_APPLY_MANAGERS = ("kubectl-client-side-apply", "kubectl")


class OwnerKind(StrEnum):
    ARGO_CD = "argocd"
    FLUX_KUSTOMIZATION = "flux-kustomization"
    FLUX_HELM_RELEASE = "flux-helmrelease"
    HELM = "helm"
    ARGO_WORKFLOW = "argo-workflow"
    KUBEFLOW_PIPELINE = "kubeflow-pipeline"
    KUBECTL_APPLY = "kubectl-apply"
    CONTROLLER = "controller"
    NONE = "none"


_SYNCS = {
    OwnerKind.ARGO_CD: "this live fix lasts until its next sync unless the change is committed "
                       "to the application's source",
    OwnerKind.FLUX_KUSTOMIZATION: "this live fix lasts until the Kustomization's next "
                                  "reconcile unless the change is committed to its source",
    OwnerKind.FLUX_HELM_RELEASE: "this live fix lasts until the HelmRelease's next reconcile "
                                 "unless the chart values carry the change",
    OwnerKind.HELM: "this live fix lasts until the next `helm upgrade` unless the release's "
                    "values carry the change",
    OwnerKind.ARGO_WORKFLOW: "this live fix lasts for this run only: the workflow's next run "
                             "creates the job from its template unless the template is changed",
    OwnerKind.KUBEFLOW_PIPELINE: "this live fix lasts for this run only: the pipeline's next run "
                                 "creates the job from its definition unless it is changed",
    OwnerKind.KUBECTL_APPLY: "this live fix lasts until the manifest is applied again unless "
                             "the change is made in the manifest",
    OwnerKind.CONTROLLER: "its controller may render it again from the owner: make the change "
                          "on the owner",
    OwnerKind.NONE: "no GitOps tool, pipeline or controller owns it: the live fix lasts",
}  # fmt: skip


@dataclass(frozen=True)
class Ownership:
    """Who owns one object: the kind of owner, its name and namespace, the object's field
    managers other than zonemedic (oldest first), and whether it carries kubectl's last-applied
    configuration."""

    kind: OwnerKind
    name: str = ""
    namespace: str = ""
    managers: tuple[str, ...] = ()
    last_applied: bool = False
    via: str = ""  # what told: the label, annotation, manager or ownerReference read

    @property
    def durable(self) -> bool:
        """True when nothing re-applies the object: the live fix lasts."""
        return self.kind is OwnerKind.NONE

    def owner(self) -> str:
        """The owner in words: "managed by Argo CD application lab"."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return {
            OwnerKind.ARGO_CD: f"managed by Argo CD application {self.name}",
            OwnerKind.FLUX_KUSTOMIZATION: f"managed by Flux Kustomization {where}",
            OwnerKind.FLUX_HELM_RELEASE: f"managed by Flux HelmRelease {where}",
            OwnerKind.HELM: f"managed by Helm release {where}",
            OwnerKind.ARGO_WORKFLOW: f"created by Argo Workflow {self.name}",
            OwnerKind.KUBEFLOW_PIPELINE: (f"created by Kubeflow Pipelines run {self.name}"
                                          if self.name else "created by a Kubeflow pipeline"),
            OwnerKind.KUBECTL_APPLY: "applied with kubectl apply"
                                     + (f" (manager {self.name})" if self.name else ""),
            OwnerKind.CONTROLLER: f"controlled by {self.name}",
            OwnerKind.NONE: "not managed by GitOps"
                            + (f" (written by {', '.join(self.managers)})"
                               if self.managers else ""),
        }[self.kind]  # fmt: skip

    def meaning(self) -> str:
        return _SYNCS[self.kind]

    def sentence(self) -> str:
        return f"{self.owner()}: {self.meaning()}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "name": self.name, "namespace": self.namespace,
                "managers": list(self.managers), "last_applied": self.last_applied,
                "via": self.via, "durable": self.durable, "says": self.sentence()}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ownership:
        return cls(kind=OwnerKind(str(data.get("kind") or OwnerKind.NONE.value)),
                   name=str(data.get("name") or ""), namespace=str(data.get("namespace") or ""),
                   managers=tuple(str(m) for m in data.get("managers") or ()),
                   last_applied=bool(data.get("last_applied")),
                   via=str(data.get("via") or ""))  # fmt: skip


@dataclass(frozen=True)
class ObjectOwnership:
    """The owner of one object a plan writes."""

    kind: str
    namespace: str
    name: str
    ownership: Ownership

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name,
                "owner": self.ownership.to_dict()}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ObjectOwnership:
        return cls(kind=str(data.get("kind") or ""), namespace=str(data.get("namespace") or ""),
                   name=str(data.get("name") or ""),
                   ownership=Ownership.from_dict(data.get("owner") or {}))  # fmt: skip

    def sentence(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} is {self.ownership.sentence()}"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _strings(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items() if isinstance(v, str)}


def managers_of(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The object's field managers other than zonemedic, oldest entry first."""
    entries = [e for e in _meta(obj).get("managedFields") or [] if isinstance(e, Mapping)]
    entries.sort(key=lambda e: str(e.get("time") or ""))
    out: list[str] = []
    for entry in entries:
        name = str(entry.get("manager") or "")
        if name and name != ZONEMEDIC_MANAGER and name not in out:
            out.append(name)
    return tuple(out)


def _argo_app(tracking: str) -> str:
    """The application of a tracking id `<app>:<group>/<kind>:<namespace>/<name>` (an app in
    another namespace than Argo CD's is written `<namespace>_<app>`)."""
    return tracking.split(":", 1)[0].replace("_", "/", 1)


def ownership_of(obj: Mapping[str, Any]) -> Ownership:
    """Who owns `obj` (see the module docstring for the order the markers are read in)."""
    meta = _meta(obj)
    labels, annotations = _strings(meta.get("labels")), _strings(meta.get("annotations"))
    managers = managers_of(obj)
    applied = LAST_APPLIED in annotations

    def owned(kind: OwnerKind, name: str, namespace: str = "", *, via: str) -> Ownership:
        return Ownership(kind, name, namespace, managers, applied, via)

    if annotations.get(ARGO_TRACKING):
        return owned(OwnerKind.ARGO_CD, _argo_app(annotations[ARGO_TRACKING]), via=ARGO_TRACKING)
    if labels.get(ARGO_INSTANCE):
        return owned(OwnerKind.ARGO_CD, labels[ARGO_INSTANCE], via=ARGO_INSTANCE)
    if labels.get(FLUX_KS_NAME):
        return owned(OwnerKind.FLUX_KUSTOMIZATION, labels[FLUX_KS_NAME],
                     labels.get(FLUX_KS_NAMESPACE, ""), via=FLUX_KS_NAME)  # fmt: skip
    if labels.get(FLUX_HELM_NAME):
        return owned(OwnerKind.FLUX_HELM_RELEASE, labels[FLUX_HELM_NAME],
                     labels.get(FLUX_HELM_NAMESPACE, ""), via=FLUX_HELM_NAME)  # fmt: skip
    if labels.get(MANAGED_BY) == "Helm" or annotations.get(HELM_RELEASE):
        return owned(OwnerKind.HELM, annotations.get(HELM_RELEASE, ""),
                     annotations.get(HELM_NAMESPACE, ""), via=MANAGED_BY)  # fmt: skip
    refs = [r for r in meta.get("ownerReferences") or [] if isinstance(r, Mapping)]
    for ref in refs:
        if ref.get("kind") == "Workflow" and str(ref.get("apiVersion", "")).startswith("argoproj.io/"):
            return owned(OwnerKind.ARGO_WORKFLOW, str(ref.get("name") or ""),
                         via="ownerReferences")  # fmt: skip
    if labels.get(ARGO_WORKFLOW_LABEL):
        return owned(OwnerKind.ARGO_WORKFLOW, labels[ARGO_WORKFLOW_LABEL], via=ARGO_WORKFLOW_LABEL)
    pipeline = sorted(k for k in labels if k.startswith(KFP_PREFIX))
    if pipeline or labels.get(KFP_RUN):
        return owned(OwnerKind.KUBEFLOW_PIPELINE, labels.get(KFP_RUN, ""),
                     via=KFP_RUN if labels.get(KFP_RUN) else pipeline[0])  # fmt: skip
    for name in managers:
        if name in _ARGO_MANAGERS:
            return owned(OwnerKind.ARGO_CD, "", via=f"manager {name}")
        if name == "kustomize-controller":
            return owned(OwnerKind.FLUX_KUSTOMIZATION, "", via=f"manager {name}")
        if name == "helm-controller":
            return owned(OwnerKind.FLUX_HELM_RELEASE, "", via=f"manager {name}")
        if name == "helm":
            return owned(OwnerKind.HELM, "", via=f"manager {name}")
    apply_manager = next((m for m in managers if m in _APPLY_MANAGERS), "")
    if applied or apply_manager:
        return owned(OwnerKind.KUBECTL_APPLY, apply_manager,
                     via=LAST_APPLIED if applied else f"manager {apply_manager}")  # fmt: skip
    for ref in refs:
        if ref.get("controller") is True:
            return owned(OwnerKind.CONTROLLER, f"{ref.get('kind')} {ref.get('name')}",
                         via="ownerReferences")  # fmt: skip
    return owned(OwnerKind.NONE, "", via="")


def helm_release(obj: Mapping[str, Any]) -> str | None:
    """The Helm release that renders `obj` ("" when Helm renders it but its release is not
    named), or None when Helm does not: Helm's `app.kubernetes.io/managed-by: Helm` label or
    `meta.helm.sh/release-name` annotation, Flux's `helm.toolkit.fluxcd.io/name` label, or the
    `helm` / `helm-controller` field manager. Read whoever syncs the object (Argo CD may
    deploy a chart), since a chart's values are where its pod template is set."""
    meta = _meta(obj)
    labels, annotations = _strings(meta.get("labels")), _strings(meta.get("annotations"))
    if annotations.get(HELM_RELEASE):
        return annotations[HELM_RELEASE]
    if labels.get(FLUX_HELM_NAME):
        return labels[FLUX_HELM_NAME]
    if labels.get(MANAGED_BY) == "Helm" or any(m in ("helm", "helm-controller")
                                               for m in managers_of(obj)):
        return ""
    return None


def last_applied(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The manifest `kubectl apply` last applied (its annotation), or None."""
    raw = _strings(_meta(obj).get("annotations")).get(LAST_APPLIED)
    if not raw:
        return None
    try:
        found = json.loads(raw)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


# ---------------------------------------------------------------- who wrote a field


def field_path(*fields: str) -> tuple[str, ...]:
    """A FieldsV1 path of object fields: ("spec", "replicas") -> ("f:spec", "f:replicas")."""
    return tuple(f"f:{f}" for f in fields)


def _holds(tree: Any, path: Sequence[str]) -> bool:
    node = tree
    for element in path:
        if not isinstance(node, Mapping) or element not in node:
            return False
        node = node[element]
    return True


@dataclass(frozen=True)
class FieldWriter:
    """The manager of a managedFields entry and when it last wrote."""

    manager: str
    operation: str
    time: str


def field_manager(obj: Mapping[str, Any], path: Sequence[str]) -> FieldWriter | None:
    """The entry that owns `path` (FieldsV1 elements), the latest one when several share it."""
    found: FieldWriter | None = None
    for entry in _meta(obj).get("managedFields") or []:
        if not isinstance(entry, Mapping) or not _holds(entry.get("fieldsV1"), path):
            continue
        writer = FieldWriter(str(entry.get("manager") or ""), str(entry.get("operation") or ""),
                             str(entry.get("time") or ""))  # fmt: skip
        if found is None or writer.time >= found.time:
            found = writer
    return found


def latest_writer(obj: Mapping[str, Any], *, besides: str = ZONEMEDIC_MANAGER) -> FieldWriter | None:
    """The entry written last by a manager other than `besides` (who removed a field nobody
    owns any more: a removal leaves no owner behind)."""
    found: FieldWriter | None = None
    for entry in _meta(obj).get("managedFields") or []:
        if not isinstance(entry, Mapping) or entry.get("manager") == besides:
            continue
        writer = FieldWriter(str(entry.get("manager") or ""), str(entry.get("operation") or ""),
                             str(entry.get("time") or ""))  # fmt: skip
        if found is None or writer.time >= found.time:
            found = writer
    return found
