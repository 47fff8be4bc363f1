"""Identity classes: pods no policy can tell apart share one check; pair counts stay exact."""

from __future__ import annotations

from agent.diagnosis.reachability import Reachability
from agent.model.flow import FlowRule
from agent.model.network import PortRange
from agent.policy import PolicySet
from tests.support.objects import job_pod, node, zone_only
from tests.support.snapshots import load


def _setup(workers: int) -> tuple[Reachability, list]:  # type: ignore[type-arg]
    items = [node("a1", "zone-a", gpus=8), node("b1", "zone-b", gpus=8), zone_only("zone-a"), zone_only("zone-b")]
    items.append(job_pod("PyTorchJob", "j", "master", 0, node_name="b1", extra={"zone": "zone-b"}))
    items += [
        job_pod("PyTorchJob", "j", "worker", i, node_name="a1", extra={"zone": "zone-a"})
        for i in range(workers)
    ]
    snap = load(items)
    policies = PolicySet(snap.policies)
    reach = Reachability(
        policies, snap.state.namespaces, label_keys=policies.pod_label_keys(), mirror_keys=("zone",)
    )
    return reach, list(snap.state.pods)


def test_pods_differing_in_unread_labels_share_a_class() -> None:
    reach, pods = _setup(4)
    classes = {p.name: reach.class_of(p) for p in pods}
    assert len({classes[f"j-worker-{i}"] for i in range(4)}) == 1
    assert classes["j-master-0"] != classes["j-worker-0"]


def test_pair_counts_exclude_self_pairs() -> None:
    reach, pods = _setup(4)
    everyone = tuple(pods)
    pairs = reach.prepare([FlowRule(everyone, everyone, PortRange(1024, 65535))])
    assert sum(p.count for p in pairs) == 5 * 4
    denied = reach.denied(pairs)
    # master -> 4 workers and 4 workers -> master; workers among themselves are allowed
    assert sorted(d.count for d in denied) == [4, 4]


def test_moving_every_pod_to_one_zone() -> None:
    reach, pods = _setup(3)
    everyone = tuple(pods)
    pairs = reach.prepare([FlowRule(everyone, everyone, PortRange(1024, 65535))])
    assert reach.denied(pairs, zone="zone-a") == []
    assert reach.denied(pairs, zone="zone-b") == []
    assert len(reach.denied(pairs, first_only=True)) == 1
    master = next(p for p in pods if p.name == "j-master-0")
    assert reach.moved(reach.class_of(master), "zone-a") == reach.class_of(pods[1])
