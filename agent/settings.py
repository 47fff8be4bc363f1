"""Typed settings: read once from a YAML file plus `ZONEMEDIC_` environment overrides, then passed down.

Who calls it: the CLI (`load_settings`) and nothing else; every other module receives the section it
needs as an argument. It reads no environment at import time. Unknown keys and wrong types raise
`ConfigError` naming the key (e.g. `database.url: expected a string, got 3`).

Environment overrides name the key path in upper case with `__` between levels:
`ZONEMEDIC_DATABASE__URL=postgresql+psycopg://...`, `ZONEMEDIC_HTTP__PORT=9090`. Values are parsed as
YAML scalars/flow collections, so `ZONEMEDIC_KUBERNETES__NAMESPACES__INCLUDE='[a, b]'` works.

What it does not do: validate that a URL answers or a file exists (the adapters do that at start).
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import yaml

from agent.errors import ConfigError

ENV_PREFIX = "ZONEMEDIC_"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: object, *, key: str = "duration") -> timedelta:
    """Parse `500ms`, `15s`, `30m`, `2h`, `7d` (or a bare number of seconds) into a timedelta."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a duration like 15s, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ConfigError(f"{key}: a duration cannot be negative, got {value!r}")
        return timedelta(seconds=float(value))
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    raise ConfigError(
        f"{key}: expected a duration like 500ms, 15s, 30m, 2h or 7d, got {value!r}"
    )


class PodZoneLabelMode(StrEnum):
    AUTO = "auto"


@dataclass(frozen=True)
class GroupSpec:
    """A generic coordinator/worker group that is not a Kubeflow job (diagnosis config)."""

    name: str
    selector: dict[str, str]
    coordinator: dict[str, str]
    workers: dict[str, str]
    namespace: str | None = None
    ports: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class DiagnosisSettings:
    """What `zonemedic diagnose --config` reads, and the agent's `diagnosis:` section."""

    pod_zone_label: str = "auto"
    protected_namespaces: list[str] = field(
        default_factory=lambda: ["kube-system", "kube-public", "kube-node-lease"]
    )
    groups: list[GroupSpec] = field(default_factory=list)
    bytes_per_step: int = 0
    price_per_gb: float = 0.01
    steps_per_day: float = 0.0  # training steps a job runs per day, for egress $/day (0: unknown)


@dataclass(frozen=True)
class NamespaceFilter:
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class KubernetesSettings:
    kubeconfig: str | None = None
    context: str | None = None
    namespaces: NamespaceFilter = field(default_factory=NamespaceFilter)


@dataclass(frozen=True)
class PrometheusSettings:
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    bearer_token_file: str | None = None
    timeout: timedelta = timedelta(seconds=10)
    verify_tls: bool = True
    ca_file: str | None = None
    retries: int = 2
    drop_threshold: float = 0.7
    drop_duration: timedelta = timedelta(minutes=10)
    baseline_offset: timedelta = timedelta(hours=1)


@dataclass(frozen=True)
class DatabaseSettings:
    url: str = "sqlite:///var/lib/zonemedic/zonemedic.db"
    migrate_on_start: bool = True
    retention: timedelta = timedelta(days=180)
    connect_timeout: timedelta = timedelta(seconds=5)  # one connection attempt
    start_timeout: timedelta = timedelta(seconds=60)  # keep retrying an unreachable DB at start
    write_retry: timedelta = timedelta(seconds=30)  # keep retrying a write while the DB is away
    busy_timeout: timedelta = timedelta(seconds=30)  # SQLite: wait this long for the write lock
    pool_size: int = 5  # PostgreSQL connection pool
    migrations_dir: str | None = None  # Alembic scripts; default: migrations/ beside the package


@dataclass(frozen=True)
class HttpSettings:
    host: str = "0.0.0.0"
    port: int = 8080
    api_token_file: str | None = None
    # the longest a request (Alertmanager webhook, /readyz) waits for the database: then 503
    database_timeout: timedelta = timedelta(seconds=2)


@dataclass(frozen=True)
class LeaderElectionSettings:
    enabled: bool = True
    namespace: str = "zonemedic"
    name: str = "zonemedic-leader"
    lease_duration: timedelta = timedelta(seconds=15)
    renew_deadline: timedelta = timedelta(seconds=10)
    retry_period: timedelta = timedelta(seconds=2)


@dataclass(frozen=True)
class DetectionSettings:
    """The running agent's detection and sweep timing (`zonemedic run`)."""

    debounce: timedelta = timedelta(milliseconds=500)
    max_delay: timedelta = timedelta(seconds=2)
    metrics_interval: timedelta = timedelta(minutes=1)
    sweep_misfire_grace: timedelta = timedelta(minutes=5)


class SlackMode(StrEnum):
    """How Slack reaches the agent: `http` (POST /slack/events) or `socket` (Socket Mode)."""

    HTTP = "http"
    SOCKET = "socket"


@dataclass(frozen=True)
class SlackApprovers:
    """Who may approve from Slack: listed users, or members of listed user groups. Both empty:
    approvals are off (findings are posted without buttons), never "anyone in the channel"."""

    users: list[str] = field(default_factory=list)
    usergroups: list[str] = field(default_factory=list)

    @property
    def configured(self) -> bool:
        return bool(self.users or self.usergroups)


@dataclass(frozen=True)
class RemediationSettings:
    """Timing and limits of an approved remediation (`remediation:`).

    `suspend_timeout`: how long to wait for a suspended job's pods to be gone;
    `schedule_timeout`: how long restarted pods may stay unbound before rolling back;
    `verify_window`: how long verification may take (flows allowed, utilization recovered);
    `recovery_fraction`: the share of the pre-split baseline (or of 100% without one) the job's
    GPU utilization must reach; `max_conflict_retries`: re-plans after a 409 on the suspend patch;
    `poll_interval`: how often the executor looks at the cluster while waiting.

    Decisions and the leader's executor loop: `enabled` (false: the leader never starts a
    remediation; decisions are still recorded); `max_per_hour`: remediations the leader
    starts per hour in the cluster (0: none); `pickup_interval`: how often the leader looks for
    approved incidents and for approvals past their deadline; `retry_after`: the pause before the
    leader retries an incident whose remediation raised or stopped unfinished. Protected
    namespaces are `diagnosis.protected_namespaces`: never remediated, never auto-approved.
    `preview`: when a remediable finding opens an incident, plan the fix at once (reading the
    job, its pods, the nodes and the target zone's pods from the API) so the finding's message
    and `incidents show` carry its diff, or why it cannot be applied.
    """

    suspend_timeout: timedelta = timedelta(minutes=2)
    schedule_timeout: timedelta = timedelta(minutes=5)
    verify_window: timedelta = timedelta(minutes=15)
    recovery_fraction: float = 0.8
    max_conflict_retries: int = 3
    poll_interval: timedelta = timedelta(seconds=2)
    enabled: bool = True
    preview: bool = True
    max_per_hour: int = 10
    pickup_interval: timedelta = timedelta(seconds=1)
    retry_after: timedelta = timedelta(seconds=30)

    def __post_init__(self) -> None:
        for name in ("suspend_timeout", "schedule_timeout", "verify_window", "poll_interval",
                     "pickup_interval", "retry_after"):
            if getattr(self, name) <= timedelta(0):
                raise ConfigError(f"remediation.{name}: must be a positive duration")
        if self.max_per_hour < 0:
            raise ConfigError(
                f"remediation.max_per_hour: expected 0 or more, got {self.max_per_hour}"
            )
        if not 0.0 < self.recovery_fraction <= 1.0:
            raise ConfigError(
                "remediation.recovery_fraction: must be above 0 and at most 1, "
                f"got {self.recovery_fraction!r}"
            )
        if not 0 <= self.max_conflict_retries <= 20:
            raise ConfigError(
                "remediation.max_conflict_retries: must be between 0 and 20, "
                f"got {self.max_conflict_retries!r}"
            )
        shortest = min(self.suspend_timeout, self.schedule_timeout, self.verify_window)
        if self.poll_interval > shortest:
            raise ConfigError(
                "remediation.poll_interval: must not exceed the shortest timeout "
                f"({shortest.total_seconds():g}s)"
            )


@dataclass(frozen=True)
class SlackSettings:
    """The `slack:` section. Secrets never live here: `*_file` paths, or the environment variables
    SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, SLACK_APP_TOKEN (read once by `load_settings`).
    `approval_ttl`: how long a proposed fix awaits a decision when its playbook sets no
    `approval.expiry`, whichever way the decision arrives (Slack, the CLI, the HTTP API); past it
    the incident expires and a decision records nothing."""

    enabled: bool = False
    mode: SlackMode = SlackMode.HTTP
    api_url: str | None = None  # default: Slack's; tests and the demo point it at a local fake
    channel: str | None = None
    approvers: SlackApprovers = field(default_factory=SlackApprovers)
    approval_ttl: timedelta = timedelta(minutes=30)
    usergroup_cache_ttl: timedelta = timedelta(minutes=5)
    deliver_every: timedelta = timedelta(seconds=2)
    digest_period: timedelta = timedelta(days=1)
    bot_token_file: str | None = None
    signing_secret_file: str | None = None
    app_token_file: str | None = None

    def __post_init__(self) -> None:
        for name in ("approval_ttl", "usergroup_cache_ttl", "deliver_every", "digest_period"):
            if getattr(self, name) <= timedelta(0):
                raise ConfigError(f"slack.{name}: must be a positive duration")


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


@dataclass(frozen=True)
class Settings:
    """The agent's whole configuration (one YAML file)."""

    cluster_name: str = "default"
    data_dir: str = "/var/lib/zonemedic"
    log_level: str = "info"
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    leader_election: LeaderElectionSettings = field(default_factory=LeaderElectionSettings)
    playbooks_dir: str = "playbooks"
    diagnosis: DiagnosisSettings = field(default_factory=DiagnosisSettings)
    detection: DetectionSettings = field(default_factory=DetectionSettings)
    slack: SlackSettings = field(default_factory=SlackSettings)
    remediation: RemediationSettings = field(default_factory=RemediationSettings)
    secrets: EnvironmentSecrets = field(
        default_factory=EnvironmentSecrets, repr=False, metadata={"environment_only": True}
    )


T = TypeVar("T")


def _type_name(tp: Any) -> str:
    if tp is str:
        return "a string"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is bool:
        return "true or false"
    if tp is timedelta:
        return "a duration"
    origin = typing.get_origin(tp)
    if origin is list:
        return "a list"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "a mapping"
    return str(tp)


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, key)
    if tp is timedelta:
        return parse_duration(value, key=key)
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        try:
            return tp(value)
        except ValueError:
            known = ", ".join(m.value for m in tp)
            raise ConfigError(f"{key}: expected one of {known}, got {value!r}") from None
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_convert(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        key_tp, val_tp = typing.get_args(tp)
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        out = {}
        for k, v in value.items():
            out[_convert(key_tp, k, f"{key}")] = _convert(val_tp, v, f"{key}.{k}")
        return out
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return build(tp, value, prefix=key)
    raise ConfigError(f"{key}: unsupported setting type {tp!r}")  # pragma: no cover


def build(cls: type[T], data: object, *, prefix: str = "") -> T:
    """Build dataclass `cls` from a mapping, rejecting unknown keys and wrong types by name."""
    where = prefix or "config"
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for raw_key, value in data.items():
        name = str(raw_key)
        key = f"{prefix}.{name}" if prefix else name
        if name in fields and fields[name].metadata.get("environment_only"):
            raise ConfigError(f"{key}: not a config key (secrets come from files or the environment)")
        if name not in fields:
            known = ", ".join(sorted(n for n, f in fields.items()
                                     if not f.metadata.get("environment_only")))
            raise ConfigError(f"{key}: unknown key (known keys: {known})")
        kwargs[name] = _convert(hints[name], value, key)
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        key = f"{prefix}.{missing[0]}" if prefix else missing[0]
        raise ConfigError(f"{key}: required key is missing")
    return cls(**kwargs)


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML file that must hold a mapping (or nothing); errors name the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}:{line} invalid YAML: {getattr(exc, 'problem', exc)}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _apply_env(data: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        path = [p.lower() for p in name[len(ENV_PREFIX) :].split("__") if p]
        if not path:
            continue
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"{name}: cannot parse value {raw!r}") from exc
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = {}
                node[part] = child
            if not isinstance(child, dict):
                raise ConfigError(f"{name}: {part} is not a section")
            node = child
        node[path[-1]] = value
    return data


def load_settings(path: Path | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read the agent's settings once: the file (if any), then environment overrides."""
    data: dict[str, Any] = read_yaml_mapping(path) if path is not None else {}
    if environ:
        data = _apply_env(data, environ)
    settings = build(Settings, data)
    return dataclasses.replace(settings, secrets=EnvironmentSecrets.from_environ(environ or {}))


def load_diagnosis_settings(path: Path | None) -> DiagnosisSettings:
    """Read a `zonemedic diagnose --config` file (the keys of the agent's `diagnosis:` section)."""
    data = read_yaml_mapping(path) if path is not None else {}
    return build(DiagnosisSettings, data)
