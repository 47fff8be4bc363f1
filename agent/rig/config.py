"""The one settings builder of the rig: an agent's configuration file, as `zonemedic run --config`
reads it.

Who calls it: `agent.rig.rig.AgentRig.settings` and `.config_file` (the demo, the end-to-end
tests, the soak). `AgentConfig` holds what a rig's agent differs in (its cluster's kubeconfig, its
database, its leader election, Prometheus, Slack, playbooks, and any other section's keys) and
`document()` renders the plain data of the file: every agent of a rig, in-process or a process,
is configured by the same keys through the same loader, never by settings built another way.
`SlackConfig.write_secrets` puts the fake Slack's token and signing secret in files beside the
configuration (the keys `slack.bot_token_file` and `slack.signing_secret_file` name them).

What it does not do: validate (the settings builder does, naming a bad key), start anything, or
read the environment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Prometheus as a rig's agent reads it: a short timeout, no retry, a 20 s drop window.
PROMETHEUS_OPTIONS: Mapping[str, Any] = {"timeout": "3s", "retries": 0, "drop_duration": "20s",
                                         "baseline_offset": "5m"}
# A leader lease that changes hands within seconds (a replica's death is seen quickly).
SHORT_LEASE: Mapping[str, Any] = {"lease_duration": "3s", "renew_deadline": "2s",
                                  "retry_period": "500ms"}
BOT_TOKEN_FILE = "slack-bot-token"
SIGNING_SECRET_FILE = "slack-signing-secret"


@dataclass(frozen=True)
class SlackConfig:
    """The `slack` section over a fake Slack at `api_url` (HTTP mode): its channel, the approvers
    in force, how often the outbox is delivered, and the workspace's secrets (written to files)."""

    api_url: str
    bot_token: str
    signing_secret: str
    channel: str
    approvers: Sequence[str]
    usergroups: Sequence[str] | None = None  # None: the key is left to its default
    deliver_every: str = "200ms"

    def write_secrets(self, directory: Path) -> None:
        (directory / BOT_TOKEN_FILE).write_text(self.bot_token)
        (directory / SIGNING_SECRET_FILE).write_text(self.signing_secret)

    def section(self, directory: Path) -> dict[str, Any]:
        approvers: dict[str, Any] = {"users": list(self.approvers)}
        if self.usergroups is not None:
            approvers["usergroups"] = list(self.usergroups)
        return {"enabled": True, "mode": "http", "api_url": self.api_url, "channel": self.channel,
                "approvers": approvers, "deliver_every": self.deliver_every,
                "bot_token_file": str(directory / BOT_TOKEN_FILE),
                "signing_secret_file": str(directory / SIGNING_SECRET_FILE)}


@dataclass(frozen=True)
class AgentConfig:
    """One agent's configuration in a rig's directory `directory` (its `data_dir`; the SQLite
    database `zonemedic.db` there unless `database` names another).

    `leader_election`: None turns the election off (the agent leads alone at once), else the
    section's keys. `prometheus_url`: None runs without metrics. `slack`: None leaves the chat
    layer off. `sections`: any other section's keys (`diagnosis`, `remediation`, `egress`...),
    merged over the rig's own (`detection.metrics_interval` 1 s)."""

    directory: Path
    kubeconfig: Path
    playbooks_dir: Path
    cluster_name: str = "twin"
    log_level: str = "info"
    database: str | None = None
    database_options: Mapping[str, Any] = field(default_factory=dict)
    leader_election: Mapping[str, Any] | None = None
    prometheus_url: str | None = None
    prometheus_options: Mapping[str, Any] = field(default_factory=lambda: dict(PROMETHEUS_OPTIONS))
    slack: SlackConfig | None = None
    sections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        """The configuration file's plain data."""
        database = self.database or f"sqlite:///{self.directory / 'zonemedic.db'}"
        election = ({"enabled": False} if self.leader_election is None
                    else dict(self.leader_election))  # fmt: skip
        document: dict[str, Any] = {
            "cluster_name": self.cluster_name,
            "data_dir": str(self.directory),
            "log_level": self.log_level,
            "kubernetes": {"kubeconfig": str(self.kubeconfig)},
            "database": {"url": database, **self.database_options},
            "http": {"host": "127.0.0.1", "port": 0},
            "leader_election": election,
            "playbooks_dir": str(self.playbooks_dir),
            "detection": {"metrics_interval": "1s"},
        }
        if self.prometheus_url is not None:
            document["prometheus"] = {"url": self.prometheus_url, **self.prometheus_options}
        if self.slack is not None:
            document["slack"] = self.slack.section(self.directory)
        for name, keys in self.sections.items():
            document[name] = {**document.get(name, {}), **keys}
        return document
