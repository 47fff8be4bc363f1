"""The composition root builds each part from the settings once, shares the clients through
`Parts`, and returns the routes and the leader's background jobs it built."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.runtime.background import BackgroundJob
from agent.runtime.leader import AlwaysLeader, LeaderElector
from agent.runtime.root import Hooks, Injected, Root
from agent.settings import PrometheusSettings, Settings, load_settings
from agent.sources.change import Change
from agent.sources.prometheus import PrometheusSource
from agent.sources.resources import RESOURCES
from agent.store.migrate import upgrade_on_start
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
    clients = root.clients()
    elector = clients.elector(identity="me", on_started_leading=lambda: None, on_stopped_leading=lambda: None)
    assert type(elector) is elector_type
    if isinstance(elector, LeaderElector):
        assert (elector.identity, elector.client.namespace, elector.client.name) == ("me", "ops", "zonemedic-leader")
        assert (elector.lease_duration, elector.renew_deadline, elector.retry_period) == (9, 6, 1)
    assert isinstance(clients.prometheus, PrometheusSource) is has_prometheus
    assert clients.api.api_client.configuration.host == "http://127.0.0.1:9"  # from the kubeconfig


def test_parts_share_what_the_root_built_and_cache_changes_reach_on_change(tmp_path: Path) -> None:
    changes: list[Change] = []
    root = Root(settings_for(tmp_path, leader_election=False, prometheus_url=None), playbooks=[])
    clients = root.clients(on_change=changes.append)
    leading = [True]
    parts = clients.parts(playbooks=[], is_leader=lambda: leading[0])
    assert (parts.cache, parts.api, parts.metrics) == (clients.cache, clients.api, clients.metrics)
    assert parts.prometheus is None
    assert clients.source.cache is clients.cache and clients.source.api is clients.api
    assert parts.is_leader()
    leading[0] = False
    assert not parts.is_leader()
    policies = next(r for r in RESOURCES if r.name == "ciliumnetworkpolicies.v2.cilium.io")
    policy = {"metadata": {"name": "p", "namespace": "ml", "uid": "u1"}, "spec": {}}
    change = clients.cache.replace(policies, [policy])  # a new policy: its namespace is re-diagnosed
    assert change.namespaces == {"ml"} and changes == [change]


def hooks(changes: list[Change]) -> Hooks:
    return Hooks(on_change=changes.append, on_alert=lambda alert, jobs: True,
                 on_packet_drops=lambda drops: None, on_started_leading=lambda: None,
                 on_stopped_leading=lambda: None)


def test_compose_returns_the_routes_and_the_leaders_background_jobs(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, leader_election=False, prometheus_url="http://127.0.0.1:9")
    settings = replace(settings, database=replace(settings.database, url=f"sqlite:///{tmp_path / 'zm.db'}"))
    store = upgrade_on_start(settings)
    try:
        changes: list[Change] = []
        root = Root(settings, store=store, playbooks=[])
        composed = root.compose(hooks(changes), identity="me")
        assert [job.name for job in composed.background_jobs] == [
            "metrics-refresh", "remediation-executor", "approval-expiry"]  # Slack is off: no deliverer
        assert composed.routes.extra == () and composed.routes.incidents is not None
        assert composed.pipeline.store is store and composed.pipeline.cache is composed.parts.cache
        assert composed.parts.cache is composed.clients.cache
        assert composed.remediation is not None
        assert composed.remediation.executor.store is store
        assert composed.database_readiness() == {"database": True, "database_writes": True}
        with pytest.raises(ConfigError, match="once"):  # every part is built once
            root.compose(hooks(changes), identity="me")
    finally:
        store.close()


def test_a_background_job_named_twice_stops_the_composition(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, leader_election=False, prometheus_url=None)
    settings = replace(settings, database=replace(settings.database, url=f"sqlite:///{tmp_path / 'zm.db'}"))
    store = upgrade_on_start(settings)
    try:
        twice = BackgroundJob("approval-expiry", every=timedelta(seconds=1), run=lambda: None)
        root = Root(settings, store=store, playbooks=[], injected=Injected(background_jobs=(twice,)))
        with pytest.raises(ConfigError, match="'approval-expiry' is registered twice"):
            root.compose(hooks([]), identity="me")
    finally:
        store.close()
    with pytest.raises(ConfigError, match="must be positive"):
        BackgroundJob("never", every=timedelta(0), run=lambda: None)
