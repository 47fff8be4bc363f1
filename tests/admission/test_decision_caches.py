"""The decider's per-view caches (node shapes, each shape's nodes ranked by free GPUs, the nodes
as the planner reads them, the reachability) decide exactly as a decider built anew for every
request: random clusters and jobs, over views whose GPU use changes while the node objects stay
(as the watch cache's mirror hands them out), views refreshed with new maps of the same content,
and views of new node objects. A reused decider's answer changes when the policies, a namespace's
labels or the nodes change between two requests."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import replace
from typing import Any

import pytest

from agent.admission.decision import Decider, View
from agent.admission.subject import identify
from agent.model.cluster import Namespace
from agent.model.finding import Finding
from agent.model.job import JobRef
from agent.model.verdict import Verdict
from agent.model.workload import JobKind
from agent.remediation.plan import LiveObjects, Plan
from agent.remediation.planner import plan_remediation
from agent.snapshot.manifests import parse_pod
from agent.topology.facts import cluster_facts
from tests.support import objects as o
from tests.support.admission import DENY_B, SETTINGS, make_view, pytorch

ZONES = ("a", "b", "c")
TAINTS = ([], [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
          [{"key": "dedicated", "value": "train", "effect": "NoSchedule"}])  # fmt: skip


def cluster(rng: random.Random) -> list[dict[str, Any]]:
    nodes = [o.node(f"n{i}", rng.choice(ZONES), gpus=rng.choice((0, 4, 8)), taints=rng.choice(TAINTS),
                    cordoned=rng.random() < 0.1, pool=rng.choice(("p1", "p2")))
             for i in range(rng.randint(4, 30))]  # fmt: skip
    return [*nodes, o.namespace("ml"), o.namespace("kube-system"),
            *([DENY_B] if rng.random() < 0.5 else [])]


def bound(rng: random.Random, view: View, count: int) -> View:
    """The view with `count` GPU pods bound at random: new GPU use, the same node objects."""
    names = list(view.state.nodes)
    pods = tuple(parse_pod(o.pod(f"busy-{i}", ns="ml", node_name=rng.choice(names),
                                 gpus=rng.choice((1, 2, 4)))) for i in range(count))  # fmt: skip
    state = replace(view.state, pods=pods)
    return View(state, view.policies, cluster_facts(state.nodes, state.pods))


def refreshed(view: View) -> View:
    """The view as the next refresh hands it out for an unchanged cluster: new maps, the same
    objects."""
    state = replace(view.state, nodes=dict(view.state.nodes), namespaces=dict(view.state.namespaces))
    facts = replace(view.facts, gpu_used=dict(view.facts.gpu_used), pods_in=dict(view.facts.pods_in),
                    zone_free=dict(view.facts.zone_free))  # fmt: skip
    return View(state, view.policies, facts)


def job(rng: random.Random, number: int) -> dict[str, Any]:
    spec = {}
    if rng.random() < 0.3:
        spec = {"nodeSelector": {"pool": rng.choice(("p1", "p2"))}}
    return pytorch(f"job-{number}", workers=rng.randint(0, 6), gpus=rng.choice((0, 1, 2, 4)),
                   zone_label=rng.choice(("a", "b", None)), spec=spec)


@pytest.mark.parametrize("seed", range(12))
def test_a_reused_decider_decides_as_a_new_one_for_every_request(seed: int) -> None:
    rng = random.Random(seed)
    reused = Decider(SETTINGS)
    decided = 0
    outcomes: dict[str, int] = {}
    for _cluster in range(2):  # new node objects
        view = make_view(cluster(rng))
        for _step in range(3):  # the same nodes, other GPU use
            view = bound(rng, view, rng.randint(0, 12))
            for number in range(6):
                if number == 3:
                    view = refreshed(view)
                obj = job(rng, number)
                subject = identify(obj, group="kubeflow.org", version="v1", kind="PyTorchJob",
                                   namespace="ml", groups=SETTINGS.groups)  # fmt: skip
                assert subject is not None
                for enforce in (True, False):
                    fresh = Decider(SETTINGS).decide(subject, view, enforce=enforce)
                    assert reused.decide(subject, view, enforce=enforce) == fresh, (seed, obj)
                    outcomes[fresh.outcome.value] = outcomes.get(fresh.outcome.value, 0) + 1
                    decided += 1
    assert decided == 2 * 3 * 6 * 2
    assert outcomes.get("placed", 0) > 0 and outcomes.get("no_zone", 0) + outcomes.get("not_needed", 0) > 0


@pytest.mark.parametrize("seed", range(6))
def test_the_unexplained_plan_has_the_explained_plans_changes_and_refusals(seed: int) -> None:
    """`plan_remediation(explain=False)` (what the webhook asks) leaves out the diff, owners and
    hand-overs only: the same targets and changes, the same refusals, on random jobs and zones."""
    rng = random.Random(seed)
    items = cluster(rng)
    nodes = [i for i in items if i.get("kind") == "Node"]
    compared, planned = 0, 0
    for number in range(60):
        if planned >= 3:
            break
        obj = job(rng, number)
        finding = Finding(job=JobRef(JobKind.PYTORCH, "ml", obj["metadata"]["name"]),
                          verdict=Verdict.ZONE_SPLIT_BLOCKED, zones={}, coordinator=None,
                          remediable=True, target_zone=rng.choice(ZONES))  # fmt: skip
        live = LiveObjects(job=obj, pods=(), nodes=nodes, bound_pods=())
        explained = plan_remediation(finding, live, mirror_keys=("zone",))
        plain = plan_remediation(finding, live, mirror_keys=("zone",), explain=False)
        if isinstance(explained, Plan):
            assert isinstance(plain, Plan)
            assert plain.targets == explained.targets and plain.diff == "" and explained.diff
            assert dataclasses.replace(explained, diff="", owners=(), handovers=()) == plain
            planned += 1
        else:
            assert plain == explained
        compared += 1
    assert compared >= 3 and planned >= 1


# --- what the kept caches must not keep: a changed view changes the answer --------------------

DENY_A = o.cnp("deny-zone-a", {"endpointSelector": {"matchLabels": {"zone": "a"}},
                               "ingressDeny": [{"fromEndpoints": [{}]}]})  # fmt: skip
SANDBOX = o.cnp("no-sandbox", {"endpointSelector": {}, "ingress": [{"fromEndpoints": [{}]}],
                               "ingressDeny": [{"fromEndpoints": [{"matchLabels": {
                                   "io.cilium.k8s.namespace.labels.env": "sandbox"}}]}]}, ns=None)  # fmt: skip


def base() -> list[dict[str, Any]]:
    """Zones a and b with 8 free GPUs each (pods labelled `zone: b` take no ingress), c none."""
    return [o.node("a1", "a", gpus=8), o.node("b1", "b", gpus=8), o.node("c1", "c", gpus=0),
            o.namespace("ml"), o.namespace("kube-system"), DENY_B]  # fmt: skip


def decided(decider: Decider, view: View, number: int) -> tuple[str, str | None]:
    obj = pytorch(f"job-{number}", workers=2, gpus=4)
    subject = identify(obj, group="kubeflow.org", version="v1", kind="PyTorchJob",
                       namespace="ml", groups=SETTINGS.groups)  # fmt: skip
    assert subject is not None
    decision = decider.decide(subject, view, enforce=True)
    assert decision == Decider(SETTINGS).decide(subject, view, enforce=True)
    return decision.outcome.value, decision.zone


def test_a_policy_change_between_two_requests_changes_the_answer() -> None:
    """The same cluster objects with a new policy set (the cache's parsed policies after a
    change): the kept reachability and its verdicts are not the new set's."""
    decider = Decider(SETTINGS)
    before = make_view(base())
    denied = make_view([*base(), DENY_A])
    assert decided(decider, before, 1) == ("placed", "a")
    assert decided(decider, View(before.state, denied.policies, before.facts), 2) == ("no_zone", None)
    assert decided(decider, refreshed(before), 3) == ("placed", "a")


def test_a_namespace_label_change_between_two_requests_changes_the_answer() -> None:
    """The same policy set, the job's namespace relabelled (a new namespace object): a
    clusterwide policy that denies ingress from sandbox namespaces now denies the job's flows."""
    decider = Decider(SETTINGS)
    view = make_view([*base(), SANDBOX])
    assert decided(decider, view, 1) == ("placed", "a")
    sandbox = {**view.state.namespaces, "ml": Namespace("ml", {"env": "sandbox",
                                                             "kubernetes.io/metadata.name": "ml"})}  # fmt: skip
    relabelled = View(replace(view.state, namespaces=sandbox), view.policies, view.facts)
    assert decided(decider, relabelled, 2) == ("no_zone", None)
    assert decided(decider, view, 3) == ("placed", "a")


def test_a_node_change_between_two_requests_changes_the_answer() -> None:
    """Zone a's node cordoned (a new node object, the facts counted anew), then GPUs taken on it
    (the same node objects): the kept node shapes and rankings are not the new view's."""
    decider = Decider(SETTINGS)
    view = make_view(base())
    assert decided(decider, view, 1) == ("placed", "a")
    nodes = {**view.state.nodes, "a1": replace(view.state.nodes["a1"], unschedulable=True)}
    state = replace(view.state, nodes=nodes)
    assert decided(decider, View(state, view.policies, cluster_facts(state.nodes, state.pods)), 2) == ("no_zone", None)
    busy = (parse_pod(o.pod("busy", ns="ml", node_name="a1", gpus=4)),)
    taken = replace(view.state, pods=busy)
    assert decided(decider, View(taken, view.policies, cluster_facts(taken.nodes, taken.pods)), 3) == ("no_zone", None)
    assert decided(decider, view, 4) == ("placed", "a")
