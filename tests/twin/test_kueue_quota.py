"""Kueue's flavor assignment and nominal quota: fits, shortages, uncovered resources, TAS flavors."""

from __future__ import annotations

from typing import Any

import pytest

from agent.twin.kueue_quota import Demand, Flavor, assign, quantity, resource_groups, tas_only

GIB = 2**30
CQ = {"spec": {"resourceGroups": [{
    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
    "flavors": [{"name": "spot", "resources": [{"name": "cpu", "nominalQuota": "8"},
                                               {"name": "memory", "nominalQuota": "64Gi"},
                                               {"name": "nvidia.com/gpu", "nominalQuota": "2"}]},
                {"name": "on-demand", "resources": [{"name": "cpu", "nominalQuota": "100"},
                                                    {"name": "memory", "nominalQuota": "1Ti"},
                                                    {"name": "nvidia.com/gpu", "nominalQuota": 8}]}],
}]}}  # fmt: skip
PLAIN = {"spot": Flavor("spot"), "on-demand": Flavor("on-demand")}


def demand(name: str = "worker", count: int = 4, **kw: Any) -> Demand:
    base: dict[str, Any] = {"per_pod": {"cpu": 1000, "memory": 4 * GIB, "nvidia.com/gpu": 1,
                                        "pods": 1},
                            "node_selector": {}, "tolerations": (), "tas_level": None,
                            "explicit_tas": False}  # fmt: skip
    base.update(kw)
    return Demand(name=name, count=count, **base)


def test_the_first_flavor_with_room_is_taken() -> None:
    groups = resource_groups(CQ)
    assert assign([demand(count=2)], groups, PLAIN, {}).flavors == {
        "worker": {"cpu": "spot", "memory": "spot", "nvidia.com/gpu": "spot"}}
    # 4 GPUs exceed spot's nominal 2: the next flavor
    assert assign([demand()], groups, PLAIN, {}).flavors["worker"]["nvidia.com/gpu"] == "on-demand"


def test_usage_of_admitted_workloads_counts_against_the_quota() -> None:
    groups = resource_groups(CQ)
    usage = {("on-demand", "nvidia.com/gpu"): 6, ("spot", "nvidia.com/gpu"): 2}
    result = assign([demand()], groups, PLAIN, usage)
    assert result.flavors == {}
    assert result.message == (
        "couldn't assign flavors to pod set worker: insufficient quota for nvidia.com/gpu in "
        "flavor spot, request > maximum capacity (4 > 2), insufficient unused quota for "
        "nvidia.com/gpu in flavor on-demand, 2 more needed")


def test_two_pod_sets_of_one_workload_add_up() -> None:
    groups = resource_groups(CQ)
    result = assign([demand("master", 1, per_pod={"cpu": 60000, "pods": 1}),
                     demand("worker", 1, per_pod={"cpu": 50000, "pods": 1})], groups, PLAIN, {})
    assert result.message.startswith("couldn't assign flavors to pod set worker: insufficient")


def test_a_resource_no_group_covers_makes_the_workload_inadmissible() -> None:
    result = assign([demand(per_pod={"cpu": 1000, "example.com/fpga": 1, "pods": 1})],
                    resource_groups(CQ), PLAIN, {})
    assert result.message == ("couldn't assign flavors to pod set worker: resource "
                              "example.com/fpga unavailable in ClusterQueue")


@pytest.mark.parametrize(("flavor", "wanted", "reason"), [
    (Flavor("spot"), {"explicit_tas": True, "tas_level": "topology.kubernetes.io/zone"},
     'Flavor "spot" does not support TopologyAwareScheduling'),
    (Flavor("spot", topology_name="t", levels=("kubernetes.io/hostname",)),
     {"explicit_tas": True, "tas_level": "topology.kubernetes.io/zone"},
     'Flavor "spot" does not contain the requested level'),
    (Flavor("spot", topology_name="t"), {"explicit_tas": True, "tas_level": None},
     'Flavor "spot" information missing in TAS cache'),
    (Flavor("spot", node_taints=({"key": "spot", "value": "yes", "effect": "NoSchedule"},)), {},
     "untolerated taint spot=yes:NoSchedule in flavor spot"),
    (Flavor("spot", node_labels={"zone": "a"}), {"node_selector": {"zone": "b"}},
     "flavor spot doesn't match node affinity"),
])  # fmt: skip
def test_a_flavor_that_does_not_match_the_pod_set_is_skipped(
    flavor: Flavor, wanted: dict[str, Any], reason: str
) -> None:
    cq = {"spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
        {"name": "spot", "resources": [{"name": "cpu", "nominalQuota": "100"}]}]}]}}
    result = assign([demand(per_pod={"cpu": 1000, "pods": 1}, **wanted)], resource_groups(cq),
                    {"spot": flavor}, {})
    assert result.message == f"couldn't assign flavors to pod set worker: {reason}"


def test_tas_is_implied_only_when_every_flavor_has_a_topology() -> None:
    groups = resource_groups(CQ)
    tas = Flavor("spot", topology_name="t", levels=("kubernetes.io/hostname",))
    assert not tas_only(groups, {**PLAIN, "spot": tas})
    assert tas_only(groups, {"spot": tas, "on-demand": Flavor("on-demand", topology_name="t")})
    # A TAS flavor in a mixed queue serves only pod sets that ask for TAS
    result = assign([demand(count=1)], groups, {**PLAIN, "spot": tas}, {})
    assert result.flavors["worker"]["cpu"] == "on-demand"


@pytest.mark.parametrize(("resource", "units", "text"), [
    ("cpu", 2000, "2"), ("cpu", 500, "500m"), ("memory", 32 * GIB, "32Gi"),
    ("memory", 3 * 2**20, "3Mi"), ("nvidia.com/gpu", 4, "4"), ("memory", 1000, "1000"),
])  # fmt: skip
def test_quantities_are_written_back_in_kubernetes_form(resource: str, units: int, text: str) -> None:
    assert quantity(resource, units) == text
