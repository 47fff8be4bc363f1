"""Slack secrets at start-up: from files or the environment captured at load; a missing one stops
start-up naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.chatops.credentials import load_credentials
from agent.errors import ConfigError
from agent.settings import EnvironmentSecrets, SlackMode, SlackSettings


def test_files_win_over_the_environment(tmp_path: Path) -> None:
    (tmp_path / "bot").write_text("xoxb-file\n")
    (tmp_path / "sign").write_text("signing-file")
    creds = load_credentials(
        SlackSettings(enabled=True, bot_token_file=str(tmp_path / "bot"),
                      signing_secret_file=str(tmp_path / "sign")),
        EnvironmentSecrets(slack_bot_token="xoxb-env", slack_signing_secret="env"),
    )
    assert (creds.bot_token, creds.signing_secret) == ("xoxb-file", "signing-file")
    assert "xoxb" not in repr(creds)


def test_environment_fallback_and_socket_mode() -> None:
    creds = load_credentials(
        SlackSettings(enabled=True, mode=SlackMode.SOCKET),
        EnvironmentSecrets(slack_bot_token="xoxb-env", slack_app_token="xapp-env"),
    )
    assert (creds.bot_token, creds.app_token, creds.signing_secret) == ("xoxb-env", "xapp-env", None)


@pytest.mark.parametrize(
    ("settings", "secrets", "message"),
    [
        (SlackSettings(enabled=True), EnvironmentSecrets(), "slack.bot_token_file or the environment variable SLACK_BOT_TOKEN"),
        (SlackSettings(enabled=True), EnvironmentSecrets(slack_bot_token="x"), "SLACK_SIGNING_SECRET"),
        (SlackSettings(enabled=True, mode=SlackMode.SOCKET), EnvironmentSecrets(slack_bot_token="x"), "SLACK_APP_TOKEN"),
        (SlackSettings(enabled=True, bot_token_file="/nonexistent/bot"), EnvironmentSecrets(), "slack.bot_token_file: cannot read /nonexistent/bot"),
    ],
)
def test_missing_secret_is_named(settings: SlackSettings, secrets: EnvironmentSecrets, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_credentials(settings, secrets)


def test_empty_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "bot").write_text("  \n")
    with pytest.raises(ConfigError, match="is empty"):
        load_credentials(SlackSettings(enabled=True, bot_token_file=str(tmp_path / "bot")),
                         EnvironmentSecrets(slack_signing_secret="s"))


def test_disabled_builds_nothing_and_says_so_once(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    import logging

    from agent.runtime.chat import build_chat
    from agent.settings import Settings

    caplog.set_level(logging.INFO, logger="agent.runtime.chat")
    chat = build_chat(Settings(), store=None)  # type: ignore[arg-type]
    assert chat.routes == [] and chat.deliverer is None and chat.app is None
    said = [r.getMessage() for r in caplog.records if "slack is disabled" in r.getMessage()]
    assert len(said) == 1 and "recorded but not posted" in said[0]


def test_enabled_without_secret_stops_naming_it() -> None:
    from agent.runtime.chat import build_chat
    from agent.settings import Settings

    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN"):
        build_chat(Settings(slack=SlackSettings(enabled=True)), store=None)  # type: ignore[arg-type]
