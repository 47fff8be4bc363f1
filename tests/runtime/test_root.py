"""The composition root builds each part from the settings once, and shares them through `Parts`."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from agent.runtime.leader import AlwaysLeader, LeaderElector
from agent.runtime.root import Root
from agent.settings import PrometheusSettings, Settings, load_settings
from agent.sources.change import Change
from agent.sources.prometheus import PrometheusSource
from agent.sources.resources import RESOURCES
from agent.twin import kubeconfig


def settings_for(tmp_path: Path, *, leader_election: bool, prometheus_url: str | None) -> Settings:
    settings = load_settings(None, {})
    path = kubeconfig.write(tmp_path / "kubeconfig", "http://127.0.0.1:9")  # never dialled here
    return replace(
        settings,
        data_dir=str(tmp_path),
        kubernetes=replace(settings.kubernetes, kubeconfig=str(path)),
        leader_election=replace(
            settings.leader_election,
            enabled=leader_election,
            namespace="ops",
            lease_duration=timedelta(seconds=9),
            renew_deadline=timedelta(seconds=6),
            retry_period=timedelta(seconds=1),
        ),
        prometheus=PrometheusSettings(url=prometheus_url),
    )


@pytest.mark.parametrize(
    ("leader_election", "prometheus_url", "elector_type", "has_prometheus"),
    [
        (True, "http://127.0.0.1:9090", LeaderElector, True),
        (True, None, LeaderElector, False),
        (False, "http://127.0.0.1:9090", AlwaysLeader, True),
        (False, None, AlwaysLeader, False),
    ],
)
def test_parts_follow_the_settings(
    tmp_path: Path,
    leader_election: bool,
    prometheus_url: str | None,
    elector_type: type,
    has_prometheus: bool,
) -> None:
    root = Root(settings_for(tmp_path, leader_election=leader_election, prometheus_url=prometheus_url), playbooks=[])
    elector = root.elector(identity="me", on_started_leading=lambda: None, on_stopped_leading=lambda: None)
    assert type(elector) is elector_type
    if isinstance(elector, LeaderElector):
        assert (elector.identity, elector.client.namespace, elector.client.name) == ("me", "ops", "zonemedic-leader")
        assert (elector.lease_duration, elector.renew_deadline, elector.retry_period) == (9, 6, 1)
    assert isinstance(root.prometheus, PrometheusSource) is has_prometheus
    assert root.api.api_client.configuration.host == "http://127.0.0.1:9"  # from the kubeconfig


def test_parts_share_what_the_root_built_and_cache_changes_reach_on_change(tmp_path: Path) -> None:
    changes: list[Change] = []
    root = Root(
        settings_for(tmp_path, leader_election=False, prometheus_url=None),
        playbooks=[],
        on_change=changes.append,
    )
    leading = [True]
    parts = root.parts(is_leader=lambda: leading[0])
    assert (parts.cache, parts.api, parts.metrics) == (root.cache, root.api, root.metrics)
    assert parts.prometheus is None and parts.background_jobs == []
    assert root.source.cache is root.cache and root.source.api is root.api
    assert parts.is_leader()
    leading[0] = False
    assert not parts.is_leader()
    policies = next(r for r in RESOURCES if r.name == "ciliumnetworkpolicies.v2.cilium.io")
    policy = {"metadata": {"name": "p", "namespace": "ml", "uid": "u1"}, "spec": {}}
    change = root.cache.replace(policies, [policy])  # a new policy: its namespace is re-diagnosed
    assert change.namespaces == {"ml"} and changes == [change]
