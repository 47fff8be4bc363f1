"""The `gitops` scenario: a simulated Argo CD sync applies the coordinator's manifest again, and a
live fix of it is half undone (the label named in the manifest comes back, the zone pin stays)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.model.ownership import OwnerKind, field_manager, field_path, ownership_of
from agent.twin import managed_fields
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from agent.twin.scenario import GitOpsSettings, ScenarioError, parse_gitops
from tests.twin.twin_fixtures import fast, running, wait

DEPLOYMENTS = lookup("deployments", group="apps")
ZONE = "topology.kubernetes.io/zone"
FIX = {"spec": {"template": {"metadata": {"labels": {"zone": "zone-a"}},
                             "spec": {"nodeSelector": {ZONE: "zone-a"}}}}}


def test_the_sync_restores_what_its_manifest_names_and_keeps_the_rest() -> None:
    scenario = replace(fast("gitops"), gitops=GitOpsSettings("lab", 3600))  # syncs on demand
    with running(scenario) as cluster:
        assert cluster.gitops is not None
        live = cluster.store.get(DEPLOYMENTS, "rendezvous", namespace="ml-lab")
        owner = ownership_of(live)
        assert (owner.kind, owner.name, owner.last_applied) == (OwnerKind.ARGO_CD, "lab", True)
        # the sync created it; the Deployment controller writes its status (as on a cluster)
        assert owner.managers[0] == "argocd-controller"
        assert set(owner.managers) <= {"argocd-controller", "kube-controller-manager"}
        with managed_fields.acting_as("zonemedic"):
            cluster.store.patch(DEPLOYMENTS, "rendezvous", FIX, namespace="ml-lab",
                                patch_type=PatchType.MERGE)
        before = cluster.gitops.syncs
        cluster.gitops.sync_now()
        wait(cluster, lambda: cluster.gitops is not None and cluster.gitops.syncs > before)
        live = cluster.store.get(DEPLOYMENTS, "rendezvous", namespace="ml-lab")
        template = live["spec"]["template"]
        assert template["metadata"]["labels"]["zone"] == "zone-b", "the manifest's label is back"
        assert template["spec"]["nodeSelector"] == {ZONE: "zone-a"}, "the pin is not in Git"
        label = field_manager(live, field_path("spec", "template", "metadata", "labels", "zone"))
        pin = field_manager(live, field_path("spec", "template", "spec", "nodeSelector", ZONE))
        assert label is not None and label.manager == "argocd-controller"
        assert pin is not None and pin.manager == "zonemedic"
        assert cluster.gitops.failures == 0


def test_the_sync_runs_on_its_interval() -> None:
    scenario = replace(fast("gitops"), gitops=GitOpsSettings("lab", 0.2))
    with running(scenario) as cluster:
        wait(cluster, lambda: cluster.gitops is not None and cluster.gitops.syncs >= 2)


@pytest.mark.parametrize(
    ("data", "message"),
    [({"interval_seconds": 5}, "gitops.application: expected the Argo CD application's name"),
     ({"application": "lab", "interval_seconds": 0}, "gitops.interval_seconds: must be positive"),
     ({"application": "lab", "every": 5}, "gitops.every: unknown key")],
)
def test_a_bad_gitops_section_is_named(data: dict[str, object], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_gitops(data, "gitops")
