"""Secrets: the environment's Slack tokens taken once and kept out of `repr`, and the secret a
`*_file` key names read or refused naming the key and the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.settings import load_settings, read_secret_file


def test_slack_secrets_from_the_environment_once(tmp_path: Path) -> None:
    env = {"SLACK_BOT_TOKEN": "xoxb-env", "SLACK_SIGNING_SECRET": " s3cret \n"}
    settings = load_settings(None, env)
    env["SLACK_BOT_TOKEN"] = "changed later"
    assert settings.secrets.slack_bot_token == "xoxb-env"
    assert settings.secrets.slack_signing_secret == "s3cret"
    assert settings.secrets.slack_app_token is None
    assert "xoxb-env" not in repr(settings)
    with pytest.raises(ConfigError, match="not a config key"):
        load_settings(None, {"ZONEMEDIC_SECRETS__SLACK_BOT_TOKEN": "x"})


def test_a_secret_file_is_read_stripped(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("  xoxb-file \n", encoding="utf-8")
    assert read_secret_file(str(path), key="slack.bot_token_file") == "xoxb-file"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"^slack\.bot_token_file: cannot read .*/token: No such file or directory$"),
        (b"\xff\xfe", r"^slack\.bot_token_file: cannot read .*/token: invalid start byte$"),
        (b" \n\t", r"^slack\.bot_token_file: .*/token is empty$"),
    ],
)
def test_an_unreadable_or_empty_secret_file_names_the_key_and_the_file(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        read_secret_file(str(path), key="slack.bot_token_file")
