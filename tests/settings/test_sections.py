"""The typed sections: their defaults, and each key's range and cross-key rule refused naming the
key (table-driven)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.settings import Settings, SlackMode, build, load_settings


def test_egress_settings() -> None:
    default = build(Settings, {})
    assert (default.egress.source.value, default.egress.query, default.egress.window) == (
        "auto", None, timedelta(hours=1))
    assert default.kubernetes.packet_drop_events is True
    custom = build(Settings, {"egress": {"source": "query", "query": "sum(rate(x[$window]))",
                                         "window": "15m"}})  # fmt: skip
    assert (custom.egress.query, custom.egress.window) == ("sum(rate(x[$window]))",
                                                           timedelta(minutes=15))


def test_defaults_and_nested_values() -> None:
    s = build(
        Settings,
        {
            "cluster_name": "prod",
            "prometheus": {"url": "http://127.0.0.1:9090", "timeout": "3s"},
            "leader_election": {"lease_duration": "20s"},
            "kubernetes": {"kubeconfig": None},
        },
    )
    assert s.cluster_name == "prod"
    assert s.prometheus.timeout == timedelta(seconds=3)
    assert s.leader_election.lease_duration == timedelta(seconds=20)
    assert s.leader_election.renew_deadline == timedelta(seconds=10)
    assert s.database.migrate_on_start is True
    assert s.kubernetes.kubeconfig is None
    assert s.diagnosis.protected_namespaces == ["kube-system", "kube-public", "kube-node-lease"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # ranges, naming the key
        ({"http": {"port": 70000}}, r"^http\.port: must be at most 65535, got 70000$"),
        ({"http": {"port": -1}}, r"^http\.port: must be at least 0, got -1$"),
        ({"log_level": "banana"}, r"^log_level: expected one of debug, info, warning, error, critical, got 'banana'$"),
        ({"prometheus": {"drop_threshold": 7}}, r"^prometheus\.drop_threshold: must be at most 1, got 7$"),
        ({"prometheus": {"retries": -2}}, r"^prometheus\.retries: must be at least 0, got -2$"),
        ({"prometheus": {"timeout": "0s"}}, r"^prometheus\.timeout: must be at least 0\.001s"),
        ({"database": {"pool_size": -1}}, r"^database\.pool_size: must be at least 1, got -1$"),
        ({"database": {"pool_size": 0}}, r"^database\.pool_size: must be at least 1, got 0$"),
        ({"diagnosis": {"price_per_gb": -0.5}}, r"^diagnosis\.price_per_gb: must be at least 0, got -0\.5$"),
        ({"diagnosis": {"bytes_per_step": -1}}, r"^diagnosis\.bytes_per_step: must be at least 0"),
        ({"diagnosis": {"groups": [{"name": "g", "selector": {}, "coordinator": {}, "workers": {},
                                    "ports": [80, 70000]}]}}, r"^diagnosis\.groups\[0\]\.ports\[1\]: must be at most 65535"),
        ({"leader_election": {"lease_duration": "10s", "renew_deadline": "10s"}},
         r"^leader_election\.lease_duration: must be longer than renew_deadline \(10s\), got 10s$"),
        ({"leader_election": {"renew_deadline": "2s", "retry_period": "5s"}},
         r"^leader_election\.renew_deadline: must be longer than retry_period \(5s\), got 2s$"),
        # numbers that overflow or are not finite
        ({"http": {"port": 2**70}}, r"^http\.port: must be at most 9223372036854775807"),
        ({"database": {"retention": "99999999999d"}}, r"^database\.retention: at most 3650d, got '99999999999d'$"),
        ({"database": {"retention": float("inf")}}, r"^database\.retention: expected a duration"),
        ({"database": {"retention": float("nan")}}, r"^database\.retention: expected a duration"),
        ({"prometheus": {"drop_threshold": float("nan")}}, r"^prometheus\.drop_threshold: expected a number"),
        ({"diagnosis": {"price_per_gb": float("inf")}}, r"^diagnosis\.price_per_gb: expected a number"),
        ({"detection": {"debounce": "٥s"}}, r"^detection\.debounce: expected a duration"),
        # the HTTP server's bounds
        ({"http": {"header_timeout": "0s"}}, r"^http\.header_timeout: must be at least 0.01s"),
        ({"http": {"body_timeout": "1h"}}, r"^http\.body_timeout: must be at most 600s"),
        ({"http": {"max_requests": 0}}, r"^http\.max_requests: must be at least 1"),
        ({"http": {"max_requests": 50, "max_connections": 50}},
         r"^http\.max_connections: must be more than max_requests \(50\)"),
        ({"http": {"max_header_bytes": 10}}, r"^http\.max_header_bytes: must be at least 1024"),
        ({"alertmanager": {"basic_auth": {"password_file": "/p"}}},
         r"^alertmanager\.basic_auth\.username: required key is missing"),
    ],
)
def test_values_out_of_range_are_refused_naming_the_key(
    data: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        build(Settings, data)


def test_slack_section_typed(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "slack: {enabled: true, mode: socket, channel: C1, usergroup_cache_ttl: 10m,\n"
        "        approvers: {users: [U1], usergroups: [S1]}}\n"
    )
    s = load_settings(path, {}).slack
    assert s.mode is SlackMode.SOCKET and s.channel == "C1"
    assert s.usergroup_cache_ttl == timedelta(minutes=10)
    assert s.approvers.users == ["U1"] and s.approvers.configured
