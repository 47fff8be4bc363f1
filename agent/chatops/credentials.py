"""Slack's secrets for the running agent: the bot token, the signing secret, the app token.

Who calls it: the chat wiring at start-up (`agent.runtime.chat`), once. Each secret comes from its
`slack.*_file` (read here, whitespace stripped) or else from the environment variable that
`load_settings` captured (SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, SLACK_APP_TOKEN). HTTP mode needs
the bot token and the signing secret; Socket Mode the bot token and the app token. A missing,
unreadable or empty secret is a `ConfigError` naming the key and the variable, so start-up stops.

What it does not do: check a token with Slack (the Bolt app does that on its first call).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.errors import ConfigError
from agent.settings import EnvironmentSecrets, SlackMode, SlackSettings, read_secret_file


@dataclass(frozen=True)
class SlackCredentials:
    bot_token: str = field(repr=False)
    signing_secret: str | None = field(default=None, repr=False)
    app_token: str | None = field(default=None, repr=False)


def _secret(path: str | None, env_value: str | None, *, key: str, variable: str) -> str:
    if path:
        return read_secret_file(path, key=f"slack.{key}")
    if env_value:
        return env_value
    raise ConfigError(
        f"slack is enabled but its secret is missing: set slack.{key} or the environment "
        f"variable {variable}"
    )


def load_credentials(slack: SlackSettings, secrets: EnvironmentSecrets) -> SlackCredentials:
    """The secrets the configured mode needs; `ConfigError` naming the first one missing."""
    bot = _secret(slack.bot_token_file, secrets.slack_bot_token, key="bot_token_file",
                  variable="SLACK_BOT_TOKEN")
    if slack.mode is SlackMode.SOCKET:
        app = _secret(slack.app_token_file, secrets.slack_app_token, key="app_token_file",
                      variable="SLACK_APP_TOKEN")
        return SlackCredentials(bot_token=bot, app_token=app)
    signing = _secret(slack.signing_secret_file, secrets.slack_signing_secret,
                      key="signing_secret_file", variable="SLACK_SIGNING_SECRET")
    return SlackCredentials(bot_token=bot, signing_secret=signing)
