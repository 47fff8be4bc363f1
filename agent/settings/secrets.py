"""The secrets the settings name but never hold: the environment's Slack tokens, and the secret a
`*_file` key names.

Who calls it: `agent.settings.loader` takes `EnvironmentSecrets` from the environment once (never
from the config file, never at import); the adapters that need a secret at start-up or per use
(Slack's tokens, the HTTP API token, Prometheus' bearer token, the Alertmanager webhook's
credentials) call `read_secret_file` with the key that names the file. What it does not do: keep a
file's secret in `Settings`, or log one (the fields are left out of `repr`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent.errors import ConfigError


@dataclass(frozen=True)
class EnvironmentSecrets:
    """Secrets taken from the environment once, by `load_settings` (never from the config file,
    never at import). Not a config key: `build` refuses `secrets` in a file or override."""

    slack_bot_token: str | None = field(default=None, repr=False)
    slack_signing_secret: str | None = field(default=None, repr=False)
    slack_app_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> EnvironmentSecrets:
        def get(name: str) -> str | None:
            value = environ.get(name, "").strip()
            return value or None

        return cls(
            slack_bot_token=get("SLACK_BOT_TOKEN"),
            slack_signing_secret=get("SLACK_SIGNING_SECRET"),
            slack_app_token=get("SLACK_APP_TOKEN"),
        )


def read_secret_file(path: str, *, key: str) -> str:
    """The secret in the file `path` that the setting `key` names (`slack.bot_token_file`),
    surrounding whitespace stripped; `ConfigError` naming the key and the file when it cannot be
    read, is not UTF-8 or is empty."""
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.reason if isinstance(exc, UnicodeDecodeError) else exc.strerror or exc
        raise ConfigError(f"{key}: cannot read {path}: {reason}") from exc
    if not value:
        raise ConfigError(f"{key}: {path} is empty")
    return value
