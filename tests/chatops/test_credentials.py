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
