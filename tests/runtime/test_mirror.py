"""The incremental model mirror: only changed objects are re-parsed; policies rebuilt on change;
an object the core cannot parse is skipped, not fatal."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agent.runtime.mirror import ModelMirror
from agent.sources.cache import ClusterCache
from agent.sources.resources import RESOURCES
from agent.sources.slim import slimmer
from tests.support import objects

R = {r.name: r for r in RESOURCES}
CNP = R["ciliumnetworkpolicies.v2.cilium.io"]


def slim_pod(i: int, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Running pod `p-<i>` on n1, as the cache keeps it (slimmed)."""
    return slimmer(R["pods"])(objects.pod(f"p-{i}", node_name="n1", labels=labels or {"a": "b"},
                                          containers=[{"name": "c"}], kind=False))


def policy(rule: str) -> dict[str, Any]:
    return slimmer(CNP)({"metadata": {"name": "p", "namespace": "ml"},
                         "spec": {"endpointSelector": {"matchLabels": {"a": rule}}, "ingress": [{}]}})


@pytest.fixture
def mirror() -> tuple[ClusterCache, ModelMirror]:
    cache = ClusterCache()
    cache.replace(R["nodes"], [slimmer(R["nodes"])({"metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "a"}}})])
    cache.replace(R["pods"], [slim_pod(i) for i in range(50)])
    cache.replace(CNP, [policy("b")])
    return cache, ModelMirror(cache)


def test_only_changed_objects_are_parsed_again(mirror: tuple[ClusterCache, ModelMirror]) -> None:
    cache, m = mirror
    state, policies = m.state()
    assert len(state.pods) == 50 and set(state.nodes) == {"n1"}
    assert m.parsed_last == 52
    _, again = m.state()
    assert m.parsed_last == 0 and again is policies
    cache.apply(R["pods"], "MODIFIED", slim_pod(7, labels={"a": "c"}))
    state, same = m.state()
    assert m.parsed_last == 1 and same is policies
    assert next(p for p in state.pods if p.name == "p-7").labels == {"a": "c"}
    cache.apply(R["pods"], "DELETED", slim_pod(8))
    state, _ = m.state()
    assert len(state.pods) == 49 and m.parsed_last == 0


def test_policy_changes_rebuild_the_policy_set(mirror: tuple[ClusterCache, ModelMirror]) -> None:
    cache, m = mirror
    _, first = m.state()
    cache.apply(CNP, "MODIFIED", policy("z"))
    _, second = m.state()
    assert second is not first
    cache.apply(CNP, "DELETED", policy("z"))
    _, third = m.state()
    assert third is not second


def test_unparsable_object_is_skipped_with_one_warning(mirror: tuple[ClusterCache, ModelMirror], caplog: pytest.LogCaptureFixture) -> None:
    cache, m = mirror
    bad = slim_pod(99)
    bad["spec"] = {"containers": [{"name": "c", "ports": [{"containerPort": "http"}]}], "nodeName": "n1"}
    cache.apply(R["pods"], "ADDED", bad)
    with caplog.at_level(logging.WARNING):
        state, _ = m.state()
        m.state()
    assert len(state.pods) == 50
    assert [r.message for r in caplog.records].count("object skipped: the core cannot parse it") == 1


def kube_pod(name: str, node: str, *, zone_label: str, gpus: int = 1) -> dict[str, Any]:
    """Pod `bert-<type>-<index>` of the PyTorchJob `bert` on `node`, labelled `zone=<zone_label>`,
    as the cache keeps it (slimmed)."""
    _, rtype, index = name.split("-")
    main = objects.container(name="c", gpus=gpus, request_gpus=True, limits=False,
                             ports=[("pytorchjob-port", 23456)])
    return slimmer(R["pods"])(objects.job_pod("PyTorchJob", "bert", rtype, int(index), name=name,
                                              node_name=node, extra={"zone": zone_label},
                                              containers=[main]))


def test_incremental_state_and_facts_diagnose_like_a_fresh_mirror() -> None:
    from agent.diagnosis.diagnose import JobScope, diagnose_cluster
    from agent.model.job import JobRef
    from agent.model.workload import JobKind
    from agent.settings import DiagnosisSettings
    from agent.sources.change import EventType

    node = slimmer(R["nodes"])
    cache = ClusterCache()
    cache.replace(R["nodes"], [node({"metadata": {"name": f"n-{z}", "labels": {"topology.kubernetes.io/zone": z}},
                                     "status": {"allocatable": {"nvidia.com/gpu": "8"}}}) for z in "ab"])
    cache.replace(R["pods"], [kube_pod("bert-master-0", "n-b", zone_label="b"),
                              *(kube_pod(f"bert-worker-{i}", "n-a", zone_label="a") for i in range(3)),
                              kube_pod("other-worker-0", "n-a", zone_label="a")])
    cache.replace(CNP, [slimmer(CNP)({"metadata": {"name": f"zone-{z}", "namespace": "ml"}, "spec": {
        "endpointSelector": {"matchLabels": {"zone": z}}, "ingress": [{"fromEndpoints": [{"matchLabels": {"zone": z}}]}]}})
        for z in "ab"])
    mirror = ModelMirror(cache)
    mirror.snapshot()  # the first one reads everything
    assert mirror.visited_last == 9
    settings = DiagnosisSettings()
    scope = JobScope(jobs=frozenset({JobRef(JobKind.PYTORCH, "ml", "bert")}))
    events = [
        (R["pods"], EventType.MODIFIED, kube_pod("bert-master-0", "n-a", zone_label="a")),  # co-located
        (R["pods"], EventType.ADDED, kube_pod("bert-worker-9", "n-b", zone_label="b", gpus=8)),  # split again
        (R["pods"], EventType.DELETED, kube_pod("other-worker-0", "n-a", zone_label="a")),
        (R["nodes"], EventType.MODIFIED, node({"metadata": {"name": "n-b", "labels": {"topology.kubernetes.io/zone": "b"}},
                                               "spec": {"unschedulable": True}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}})),
    ]
    verdicts = []
    for resource, event, obj in events:
        cache.apply(resource, event, obj)
        state, policies, facts = mirror.snapshot()
        assert mirror.visited_last == 1  # only the changed object was looked at
        got = diagnose_cluster(state, policies, settings=settings, only=scope, facts=facts)
        fresh_state, fresh_policies = ModelMirror(cache).state()
        want = diagnose_cluster(fresh_state, fresh_policies, settings=settings, only=scope)
        assert got == want
        verdicts.append(str(got.findings[0].verdict))
    assert verdicts[0] == "healthy" and verdicts[1] == "zone_split_blocked"


def filled(cache: ClusterCache) -> ClusterCache:
    node = slimmer(R["nodes"])
    cache.replace(R["nodes"], [node({"metadata": {"name": f"n-{z}", "labels": {"topology.kubernetes.io/zone": z}},
                                     "status": {"allocatable": {"nvidia.com/gpu": "8"}}}) for z in "ab"])
    cache.replace(R["pods"], [kube_pod("bert-master-0", "n-b", zone_label="b"),
                              *(kube_pod(f"bert-worker-{i}", "n-a", zone_label="a") for i in range(3)),
                              *(slim_pod(i) for i in range(20))])
    cache.replace(CNP, [policy("b")])
    return cache


def test_the_first_state_loads_everything_as_incremental_updates_would() -> None:
    from agent.topology.facts import cluster_facts

    bulk = ModelMirror(filled(ClusterCache()))
    state, policies, facts = bulk.snapshot()
    assert (bulk.visited_last, bulk.parsed_last) == (27, 27)
    # the same objects arriving after a first (empty) state: parsed one by one
    cache = ClusterCache()
    incremental = ModelMirror(cache)
    incremental.snapshot()
    filled(cache)
    state_2, policies_2, facts_2 = incremental.snapshot()
    assert incremental.visited_last == 27
    assert (state_2, [p.id for p in policies_2.policies], facts_2) == (
        state, [p.id for p in policies.policies], facts)
    assert facts == cluster_facts(state.nodes, state.pods)
    # pods of a job share their parsed ports (the cache shares their containers)
    workers = [p for p in state.pods if p.name.startswith("bert-worker")]
    assert workers[0].ports is workers[1].ports


def test_a_large_first_load_freezes_what_it_built(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    import agent.runtime.mirror as mirror_module

    monkeypatch.setattr(mirror_module, "FREEZE_AT", 10)
    small = ModelMirror(ClusterCache())
    small.snapshot()
    assert small.frozen_loads == 0
    try:
        large = ModelMirror(filled(ClusterCache()))
        large.snapshot()
        assert large.frozen_loads == 1 and gc.get_freeze_count() > 0
        assert gc.isenabled()
        large.snapshot()  # later states are incremental: nothing more frozen
        assert large.frozen_loads == 1
    finally:
        gc.unfreeze()


CONFIG = R["configmaps.cilium-config"]


def cilium_config(labels: str) -> dict[str, Any]:
    return slimmer(CONFIG)({"metadata": {"name": "cilium-config", "namespace": "kube-system"},
                            "data": {"labels": labels, "debug": "false"}})


def test_an_unreadable_policy_is_kept_as_a_record_and_warned_about_once(
    mirror: tuple[ClusterCache, ModelMirror], caplog: pytest.LogCaptureFixture
) -> None:
    cache, m = mirror
    broken = slimmer(CNP)({"metadata": {"name": "future", "namespace": "ml"},
                           "spec": {"endpointSelector": {}, "ingress": [{"fromEndpoints": [{}],
                                                                         "newKind": 1}]}})
    cache.apply(CNP, "ADDED", broken)
    with caplog.at_level(logging.WARNING):
        _, policies = m.state()
        m.state()
    assert [p.id for p in policies.policies] == ["CiliumNetworkPolicy/ml/p"]
    [record] = policies.unreadable
    assert (record.id, record.field) == ("CiliumNetworkPolicy/ml/future", "spec.ingress[0].newKind")
    warnings = [r for r in caplog.records if r.message == "object skipped: the core cannot parse it"]
    assert len(warnings) == 1 and "spec.ingress[0].newKind" in warnings[0].__dict__["error"]


def test_cilium_config_decides_the_identity_filter(
    mirror: tuple[ClusterCache, ModelMirror]
) -> None:
    cache, m = mirror
    _, policies = m.state()
    assert policies.dataplane.cilium and policies.identity.keeps("a")
    assert "a" in policies.pod_label_keys()
    cache.replace(CONFIG, [cilium_config("k8s:!a")])
    _, changed = m.state()
    assert changed is not policies and not changed.identity.keeps("a")
    assert "kube-system/cilium-config" in changed.dataplane.reason
    assert changed.pod_label_keys() == frozenset()  # the policy's selector key left identities
    cache.replace(CONFIG, [])
    _, back = m.state()
    assert back.identity.keeps("a")


def test_without_cilium_kinds_or_cilium_config_the_dataplane_is_kubernetes() -> None:
    cache = ClusterCache()
    cache.replace(R["nodes"], [])
    cache.replace(R["pods"], [slim_pod(1, labels={"pod-template-hash": "x"})])
    cache.replace(CONFIG, [])
    _, policies = ModelMirror(cache).state()
    assert not policies.dataplane.cilium and policies.identity.keeps("pod-template-hash")


def test_the_dataplane_setting_overrides_the_cluster(
    mirror: tuple[ClusterCache, ModelMirror]
) -> None:
    from agent.settings import DataplaneSetting, DiagnosisSettings

    cache, _ = mirror
    settings = DiagnosisSettings(dataplane=DataplaneSetting.KUBERNETES)
    _, policies = ModelMirror(cache, settings=settings).state()
    assert not policies.dataplane.cilium
    assert policies.ignored == ("CiliumNetworkPolicy/ml/p",)
