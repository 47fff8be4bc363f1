"""Kueue manifests parsed into the model: each kind's fields, bad fields named, and a dump's
Kueue objects read into `ClusterState.kueue` (a Topology at v1alpha1 as Kueue v0.13 serves it)."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.kueue import (
    ClusterQueue,
    DomainAssignment,
    FlavorQuota,
    KueueFlavor,
    KueueTopology,
    KueueWorkload,
    LocalQueue,
    PodSetAssignment,
    PodSetTopology,
)
from agent.model.workload import KueueKindName
from agent.snapshot.collection import parse_objects
from agent.snapshot.kueue import parse_kueue_object, quantity
from agent.snapshot.manifests import ManifestError

V1B1 = "kueue.x-k8s.io/v1beta1"

WORKLOAD = {
    "apiVersion": V1B1, "kind": "Workload",
    "metadata": {"name": "pytorchjob-j-1", "namespace": "ml", "ownerReferences": [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "j", "controller": True}]},
    "spec": {"active": False, "queueName": "user-queue",
             "podSets": [{"name": "master", "count": 1, "template": {"metadata": {"annotations": {
                             "kueue.x-k8s.io/podset-preferred-topology": "topology.kubernetes.io/zone",
                             "kueue.x-k8s.io/podset-group-name": "j"}}}},
                         {"name": "worker", "count": 4, "template": {"spec": {}}}]},
    "status": {"conditions": [{"type": "Admitted", "status": "True"}],
               "admission": {"clusterQueue": "cq", "podSetAssignments": [
                   {"name": "worker", "flavors": {"nvidia.com/gpu": "gpu"},
                    "topologyAssignment": {"levels": ["topology.kubernetes.io/zone"],
                                           "domains": [{"values": ["a"], "count": 4}]}}]}},
}  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "item", "parsed"),
    [
        (KueueKindName.TOPOLOGY,
         {"metadata": {"name": "t"}, "spec": {"levels": [{"nodeLabel": "z"}, {"nodeLabel": "h"}]}},
         KueueTopology("t", ("z", "h"))),
        (KueueKindName.RESOURCE_FLAVOR,
         {"metadata": {"name": "f"}, "spec": {"topologyName": "t", "nodeLabels": {"gpu": "a100"}}},
         KueueFlavor("f", "t", {"gpu": "a100"})),
        (KueueKindName.RESOURCE_FLAVOR, {"metadata": {"name": "f"}, "spec": {}}, KueueFlavor("f")),
        (KueueKindName.LOCAL_QUEUE,
         {"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}},
         LocalQueue("ml", "q", "cq")),
        (KueueKindName.CLUSTER_QUEUE,
         {"metadata": {"name": "cq"},
          "spec": {"resourceGroups": [{"flavors": [{"name": "gpu", "resources": [
              {"name": "nvidia.com/gpu", "nominalQuota": "16"},
              {"name": "memory", "nominalQuota": "2Ti"}]}]}]},
          "status": {"flavorsReservation": [{"name": "gpu", "resources": [
              {"name": "nvidia.com/gpu", "total": "12"}]}]}},
         ClusterQueue("cq", ("gpu",), (FlavorQuota("gpu", "nvidia.com/gpu", 16, 12),
                                       FlavorQuota("gpu", "memory", 2.0 * 2**40)))),
        (KueueKindName.WORKLOAD, WORKLOAD,
         KueueWorkload("ml", "pytorchjob-j-1", queue="user-queue", active=False, admitted=True,
                       cluster_queue="cq", pod_sets=("master", "worker"),
                       owner_kind="PyTorchJob", owner_name="j",
                       counts={"master": 1, "worker": 4},
                       requests={"master": PodSetTopology(preferred="topology.kubernetes.io/zone",
                                                          group="j")},
                       assignments=(PodSetAssignment(
                           "worker", {"nvidia.com/gpu": "gpu"}, ("topology.kubernetes.io/zone",),
                           (DomainAssignment(("a",), 4),)),))),
    ],
)  # fmt: skip
def test_each_kind_parses(kind: KueueKindName, item: dict[str, Any], parsed: Any) -> None:
    assert parse_kueue_object(item, kind) == parsed


@pytest.mark.parametrize(
    ("kind", "item", "field"),
    [
        (KueueKindName.TOPOLOGY, {"metadata": {"name": "t"}, "spec": {"levels": [{}]}},
         "spec.levels[0].nodeLabel"),
        (KueueKindName.RESOURCE_FLAVOR, {"metadata": {"name": "f"}, "spec": {"topologyName": 3}},
         "spec.topologyName"),
        (KueueKindName.LOCAL_QUEUE, {"metadata": {"name": "q", "namespace": "ml"}, "spec": {}},
         "spec.clusterQueue"),
        (KueueKindName.WORKLOAD,
         {"metadata": {"name": "w", "namespace": "ml"}, "spec": {"active": "no"}}, "spec.active"),
        (KueueKindName.WORKLOAD,
         {"metadata": {"name": "w", "namespace": "ml"}, "spec": {"podSets": [
             {"name": "m", "count": "two"}]}}, "spec.podSets[0].count"),
        (KueueKindName.WORKLOAD,
         {"metadata": {"name": "w", "namespace": "ml"}, "spec": {"podSets": [
             {"name": "m", "template": {"metadata": {"annotations": {
                 "kueue.x-k8s.io/podset-required-topology": 3}}}}]}},
         "spec.podSets[0].template.metadata.annotations.kueue.x-k8s.io/podset-required-topology"),
        (KueueKindName.CLUSTER_QUEUE,
         {"metadata": {"name": "cq"}, "spec": {"resourceGroups": [{"flavors": [{"name": "f",
          "resources": [{"name": "cpu", "nominalQuota": "lots"}]}]}]}},
         "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"),
    ],
)  # fmt: skip
def test_a_bad_field_is_named(kind: KueueKindName, item: dict[str, Any], field: str) -> None:
    with pytest.raises(ManifestError) as caught:
        parse_kueue_object(item, kind)
    assert caught.value.field == field


@pytest.mark.parametrize(("value", "number"), [(8, 8.0), ("8", 8.0), ("500m", 0.5),
                                               ("16Gi", 16.0 * 2**30), ("1k", 1000.0)])
def test_quantity(value: object, number: float) -> None:
    assert quantity(value, "x") == number


def test_a_dump_reads_kueue_objects_into_the_state() -> None:
    snapshot = parse_objects([
        WORKLOAD,
        {"apiVersion": "kueue.x-k8s.io/v1alpha1", "kind": "Topology", "metadata": {"name": "old"},
         "spec": {"levels": [{"nodeLabel": "topology.kubernetes.io/zone"}]}},
        {"apiVersion": V1B1, "kind": "ResourceFlavor", "metadata": {"name": "gpu"},
         "spec": {"topologyName": "old"}},
    ], source="dump")  # fmt: skip
    kueue = snapshot.state.kueue
    assert kueue.topologies["old"].levels == ("topology.kubernetes.io/zone",)
    assert kueue.flavors["gpu"].topology == "old"
    assert kueue.workload_of("PyTorchJob", "ml", "j") == kueue.workloads[("ml", "pytorchjob-j-1")]
    assert kueue.workload_of("PyTorchJob", "ml", "other") is None
    assert snapshot.warnings == ()
