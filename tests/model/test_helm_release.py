"""Which objects Helm renders (`helm_release`): its markers, Flux's HelmRelease label and the
field managers; anything else (Argo CD, kubectl apply, nobody) has no Helm values hint."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.handover import Handover, SourceKind, helm_hint
from agent.model.ownership import helm_release


def obj(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        managers: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"metadata": {"name": "x", "labels": labels or {}, "annotations": annotations or {},
                         "managedFields": [{"manager": m, "operation": "Update",
                                            "time": "2026-12-03T10:00:00Z"} for m in managers]}}


@pytest.mark.parametrize(("given", "release"), [
    (obj(labels={"app.kubernetes.io/managed-by": "Helm"}), ""),
    (obj(labels={"app.kubernetes.io/managed-by": "Helm"},
         annotations={"meta.helm.sh/release-name": "trainer"}), "trainer"),
    (obj(annotations={"meta.helm.sh/release-name": "trainer"}), "trainer"),
    (obj(labels={"helm.toolkit.fluxcd.io/name": "lab"}), "lab"),
    (obj(managers=("helm",)), ""),
    (obj(managers=("helm-controller",)), ""),
    # Argo CD deploying a chart: the chart's own label says Helm renders it
    (obj(labels={"argocd.argoproj.io/instance": "lab", "app.kubernetes.io/managed-by": "Helm"}), ""),
    (obj(labels={"argocd.argoproj.io/instance": "lab"}, managers=("argocd-controller",)), None),
    (obj(labels={"app.kubernetes.io/managed-by": "kustomize"}), None),
    (obj(managers=("kubectl-client-side-apply",)), None),
    (obj(), None),
])  # fmt: skip
def test_helm_release(given: dict[str, Any], release: str | None) -> None:
    assert helm_release(given) == release


PATCH = {"spec": {"template": {"spec": {"nodeSelector": {"topology.kubernetes.io/zone": "zone-a"}}}}}


@pytest.mark.parametrize(("helm", "says"), [
    (None, ""),
    ("", "# Helm: where the chart exposes the pod template"),
    ("trainer", "# Helm: where release trainer's chart exposes the pod template"),
])
def test_the_hint_only_for_helm(helm: str | None, says: str) -> None:
    h = Handover("apps/v1", "Deployment", "ml", "x", PATCH, {}, SourceKind.LIVE, helm)
    hint = helm_hint(h)
    assert hint.startswith(says) if says else hint == ""
    if says:
        assert "topology.kubernetes.io/zone: zone-a" in hint
    assert Handover.from_dict(h.to_dict()) == h
