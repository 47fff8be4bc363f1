"""The `remediation:` settings section: typed, validated, named in every error."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agent.errors import ConfigError
from agent.settings import RemediationSettings, Settings, build, load_settings


def test_defaults_and_overrides_from_file_and_environment(tmp_path: Any) -> None:
    assert Settings().remediation == RemediationSettings()
    path = tmp_path / "c.yaml"
    path.write_text("remediation: {suspend_timeout: 30s, verify_window: 5m, recovery_fraction: 0.9}\n")
    settings = load_settings(path, {"ZONEMEDIC_REMEDIATION__MAX_CONFLICT_RETRIES": "5"})
    r = settings.remediation
    assert (r.suspend_timeout, r.verify_window, r.recovery_fraction, r.max_conflict_retries) == (
        timedelta(seconds=30), timedelta(minutes=5), 0.9, 5)
    assert r.schedule_timeout == timedelta(minutes=5) and r.poll_interval == timedelta(seconds=2)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"recovery_fraction": 0}, "remediation.recovery_fraction: must be above 0 and at most 1"),
        ({"recovery_fraction": 1.5}, "remediation.recovery_fraction: must be above 0 and at most 1"),
        ({"recovery_fraction": "high"}, "remediation.recovery_fraction: expected a number"),
        ({"max_conflict_retries": -1}, "remediation.max_conflict_retries: must be between 0 and 20"),
        ({"suspend_timeout": 0}, "remediation.suspend_timeout: must be a positive duration"),
        ({"verify_window": "soon"}, "remediation.verify_window: expected a duration"),
        ({"poll_interval": "10m"}, "remediation.poll_interval: must not exceed the shortest timeout (120s)"),
        ({"retries": 3}, "remediation.retries: unknown key"),
        ({"max_per_hour": -1}, "remediation.max_per_hour: expected 0 or more, got -1"),
        ({"max_per_hour": "many"}, "remediation.max_per_hour: expected an integer"),
        ({"approval_ttl": "30m"}, "remediation.approval_ttl: unknown key"),  # it is slack's
        ({"pickup_interval": 0}, "remediation.pickup_interval: must be a positive duration"),
        ({"retry_after": "later"}, "remediation.retry_after: expected a duration"),
        ({"enabled": "yes"}, "remediation.enabled: expected true or false"),
    ],
)
def test_bad_values_are_refused_naming_the_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        build(Settings, {"remediation": data})
    assert message in str(info.value)


def test_decision_keys_defaults_and_overrides(tmp_path: Any) -> None:
    r = RemediationSettings()
    assert (r.enabled, r.max_per_hour, r.pickup_interval, r.retry_after) == (
        True, 10, timedelta(seconds=1), timedelta(seconds=30))
    assert Settings().slack.approval_ttl == timedelta(minutes=30)
    path = tmp_path / "c.yaml"
    path.write_text("remediation: {max_per_hour: 0, pickup_interval: 500ms}\n"
                    "slack: {approval_ttl: 2h}\n")
    settings = load_settings(path, {"ZONEMEDIC_REMEDIATION__ENABLED": "false"})
    r = settings.remediation
    assert (r.enabled, r.max_per_hour, r.pickup_interval) == (
        False, 0, timedelta(milliseconds=500))
    assert settings.slack.approval_ttl == timedelta(hours=2)


@pytest.mark.parametrize("value", ["0s", "-5m", "soon"])
def test_a_bad_approval_ttl_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError, match="slack.approval_ttl"):
        build(Settings, {"slack": {"approval_ttl": value}})
