"""The typed sections of the agent's settings: one frozen dataclass per section of the YAML file.

Who calls it: `agent.settings.builder` builds them (through `agent.settings.loader`); every other
module receives the section it needs as an argument (`DiagnosisSettings`, `DatabaseSettings`, ...).
A key's range is written in its annotation (`Annotated[int, Within(0, 65535)]`,
`agent.settings.bounds`); rules across keys live in the section's `__post_init__` and raise
`ConfigError` naming the key (`http.max_connections: must be more than max_requests (100) ...`).
What it does not do: read a file or the environment, or convert raw values (the builder does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Annotated

from agent.errors import ConfigError
from agent.settings.admission import AdmissionSettings
from agent.settings.bounds import NOT_NEGATIVE, PORT, POSITIVE, Within
from agent.settings.secrets import EnvironmentSecrets

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class PodZoneLabelMode(StrEnum):
    AUTO = "auto"


class DataplaneSetting(StrEnum):
    """`diagnosis.dataplane`: learn it from the cluster, or say which dataplane enforces policy."""

    AUTO = "auto"
    CILIUM = "cilium"
    KUBERNETES = "kubernetes"


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_CILIUM_VERSION = re.compile(r"v?(\d{1,3})\.(\d{1,3})(?:\.\d{1,5})?")


def cilium_release(text: str) -> tuple[int, int] | None:
    """(major, minor) of a Cilium version such as `1.18`, `v1.19.2` (None: not a version)."""
    found = _CILIUM_VERSION.fullmatch(text.strip())
    return (int(found.group(1)), int(found.group(2))) if found else None


@dataclass(frozen=True)
class GroupSpec:
    """A generic coordinator/worker group that is not a Kubeflow job (diagnosis config)."""

    name: str
    selector: dict[str, str]
    coordinator: dict[str, str]
    workers: dict[str, str]
    namespace: str | None = None
    ports: list[Annotated[int, Within(1, 65535)]] = field(default_factory=list)
    # placed pod by pod at admission (a Pod CREATE webhook for this group's pods: bare Pods, a
    # StatefulSet's, anything the webhook does not patch a template of); `size`/`gpus`: the
    # gang's pods and GPUs in all, coordinator included (unknown: what the cache and the pod show)
    admit_pods: bool = False
    size: Annotated[int, Within(1, 10_000)] | None = None
    gpus: Annotated[int, Within(0, 1_000_000)] | None = None

    def __post_init__(self) -> None:
        if self.admit_pods and not _DNS_LABEL.match(self.name):
            raise ConfigError(f"diagnosis.groups[{self.name}].name: a group with admit_pods "
                              "names its own webhook: its name must be a DNS label (lower case "
                              f"letters, digits, '-'), got {self.name!r}")  # fmt: skip
        if (self.size is not None or self.gpus is not None) and not self.admit_pods:
            raise ConfigError(f"diagnosis.groups[{self.name}]: size and gpus are read only for a "
                              "group placed pod by pod (admit_pods: true)")  # fmt: skip


@dataclass(frozen=True)
class DiagnosisSettings:
    """What `zonemedic diagnose --config` reads, and the agent's `diagnosis:` section."""

    pod_zone_label: str = "auto"
    protected_namespaces: list[str] = field(
        default_factory=lambda: ["kube-system", "kube-public", "kube-node-lease"]
    )
    groups: list[GroupSpec] = field(default_factory=list)
    bytes_per_step: Annotated[int, NOT_NEGATIVE] = 0
    price_per_gb: Annotated[float, Within(0.0, 1e6)] = 0.01
    # training steps a job runs per day, for the egress $/day estimate (0: unknown)
    steps_per_day: Annotated[float, Within(0.0, 1e9)] = 0.0
    # which dataplane enforces network policies: auto (Cilium objects or cilium-config in the
    # cluster mean Cilium, else plain Kubernetes NetworkPolicy), cilium, kubernetes
    dataplane: DataplaneSetting = DataplaneSetting.AUTO
    # Cilium's `labels` value (identity-relevant label patterns); null: read cilium-config
    cilium_labels: str | None = None
    # the Cilium release whose default label filter applies; null: detected, else the newest
    cilium_version: str | None = None

    def __post_init__(self) -> None:
        if self.cilium_version is not None and cilium_release(self.cilium_version) is None:
            raise ConfigError(
                f"diagnosis.cilium_version: expected a release like 1.19 or 1.18.4, "
                f"got {self.cilium_version!r}"
            )
        for word in (self.cilium_labels or "").split():
            rest = word.partition(":")[2] if ":" in word else word
            regex = rest.removeprefix("!")
            try:
                re.compile(regex)
            except re.error as exc:
                raise ConfigError(
                    f"diagnosis.cilium_labels: pattern {word!r}: {exc}"
                ) from None
            if not regex:
                raise ConfigError(f"diagnosis.cilium_labels: pattern {word!r} has no prefix")

@dataclass(frozen=True)
class NamespaceFilter:
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class KubernetesSettings:
    """The cluster (`kubernetes:`). `packet_drop_events`: watch Cilium's `PacketDrop` Events
    (its drop event emitter): a drop naming a job's pod re-diagnoses the job, and its message goes
    into the incident's timeline."""

    kubeconfig: str | None = None
    context: str | None = None
    namespaces: NamespaceFilter = field(default_factory=NamespaceFilter)
    packet_drop_events: bool = True


@dataclass(frozen=True)
class PrometheusSettings:
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    bearer_token_file: str | None = None
    timeout: Annotated[timedelta, POSITIVE] = timedelta(seconds=10)
    verify_tls: bool = True
    ca_file: str | None = None
    retries: Annotated[int, Within(0, 100)] = 2
    drop_threshold: Annotated[float, Within(0.0, 1.0)] = 0.7  # a share of the baseline
    drop_duration: Annotated[timedelta, POSITIVE] = timedelta(minutes=10)
    baseline_offset: Annotated[timedelta, POSITIVE] = timedelta(hours=1)


class EgressSource(StrEnum):
    """Where measured cross-zone bytes come from (`egress.source`)."""

    AUTO = "auto"  # Beyla's counters, else OBI's (one query asks for both)
    BEYLA = "beyla"
    OBI = "obi"
    QUERY = "query"  # `egress.query`
    NONE = "none"  # never measured: the estimate of diagnosis.steps_per_day only


EGRESS_WINDOW_PLACEHOLDER = "$window"


@dataclass(frozen=True)
class EgressSettings:
    """Measured cross-zone egress (`egress:`), read from Prometheus (`prometheus.url`) once per
    metrics refresh for all jobs. `window`: the rate window, and what "measured over the last ..."
    says. `query` (with `source: query`): PromQL answering cross-zone bytes per second, one series
    per flow, labelled as Beyla labels its network metrics (`k8s_src_namespace`, and
    `k8s_src_owner_name` or `k8s_src_name`; the same with `dst`; `src_zone`/`dst_zone` optional,
    a series whose two zones are equal is not cross-zone); `$window` in it is replaced by the
    window as a PromQL duration (`3600s`). The price is `diagnosis.price_per_gb`."""

    source: EgressSource = EgressSource.AUTO
    query: str | None = None
    window: Annotated[timedelta, Within(low=timedelta(seconds=10))] = timedelta(hours=1)

    def __post_init__(self) -> None:
        if self.source is EgressSource.QUERY and not (self.query or "").strip():
            raise ConfigError("egress.query: required when egress.source is query")
        if self.query is not None and self.source is not EgressSource.QUERY:
            raise ConfigError(
                f"egress.query: only read when egress.source is query (it is {self.source.value})"
            )


@dataclass(frozen=True)
class DatabaseSettings:
    url: str = "sqlite:///var/lib/zonemedic/zonemedic.db"
    migrate_on_start: bool = True
    retention: Annotated[timedelta, Within(low=timedelta(hours=1))] = timedelta(days=180)
    connect_timeout: Annotated[timedelta, POSITIVE] = timedelta(seconds=5)  # one attempt
    start_timeout: Annotated[timedelta, POSITIVE] = timedelta(seconds=60)  # retry at start
    write_retry: Annotated[timedelta, POSITIVE] = timedelta(seconds=30)  # retry a write
    busy_timeout: Annotated[timedelta, POSITIVE] = timedelta(seconds=30)  # SQLite write lock
    pool_size: Annotated[int, Within(1, 1000)] = 5  # PostgreSQL connection pool
    migrations_dir: str | None = None  # Alembic scripts; default: migrations/ beside the package


@dataclass(frozen=True)
class HttpSettings:
    host: str = "0.0.0.0"
    port: Annotated[int, PORT] = 8080
    api_token_file: str | None = None
    # the longest a request (Alertmanager webhook, /readyz) waits for the database: then 503
    database_timeout: Annotated[timedelta, POSITIVE] = timedelta(seconds=2)
    # What one client may hold (`agent.runtime.limits`): a request head must arrive within
    # header_timeout, its body within body_timeout (then 408 and closed); an idle connection is
    # closed after keep_alive_timeout; at most max_requests requests are handled at once (then
    # 503; /healthz and /readyz always answer), at most max_connections are open (then 503 for
    # every request); a request head is at most max_header_bytes.
    header_timeout: Annotated[timedelta, Within(timedelta(milliseconds=10), timedelta(minutes=5))] = (
        timedelta(seconds=10))
    body_timeout: Annotated[timedelta, Within(timedelta(milliseconds=10), timedelta(minutes=10))] = (
        timedelta(seconds=30))
    keep_alive_timeout: Annotated[timedelta, Within(timedelta(seconds=1), timedelta(minutes=10))] = (
        timedelta(seconds=5))
    max_requests: Annotated[int, Within(1, 100_000)] = 100
    max_connections: Annotated[int, Within(2, 1_000_000)] = 1000
    max_header_bytes: Annotated[int, Within(1024, 1024 * 1024)] = 16 * 1024

    def __post_init__(self) -> None:
        if self.max_connections <= self.max_requests:
            raise ConfigError(
                "http.max_connections: must be more than max_requests "
                f"({self.max_requests}), so the probes find a connection, got {self.max_connections}"
            )


@dataclass(frozen=True)
class BasicAuthSettings:
    """HTTP basic auth credentials: the user name, and a file holding the password."""

    username: str
    password_file: str

    def __post_init__(self) -> None:
        if not self.username or ":" in self.username:
            raise ConfigError("alertmanager.basic_auth.username: expected a name without ':', "
                              f"got {self.username!r}")


@dataclass(frozen=True)
class AlertmanagerSettings:
    """The credentials `POST /alertmanager` requires: what Alertmanager's `http_config` sends, a
    bearer token (`authorization.credentials_file`) or basic auth. Either is accepted when both
    are set; neither: the webhook is open to anyone who reaches the HTTP port (`config check`
    and start-up say so)."""

    bearer_token_file: str | None = None
    basic_auth: BasicAuthSettings | None = None

    @property
    def open(self) -> bool:
        return self.bearer_token_file is None and self.basic_auth is None


@dataclass(frozen=True)
class LeaderElectionSettings:
    enabled: bool = True
    namespace: str = "zonemedic"
    name: str = "zonemedic-leader"
    lease_duration: Annotated[timedelta, POSITIVE] = timedelta(seconds=15)
    renew_deadline: Annotated[timedelta, POSITIVE] = timedelta(seconds=10)
    retry_period: Annotated[timedelta, POSITIVE] = timedelta(seconds=2)

    def __post_init__(self) -> None:
        if self.lease_duration <= self.renew_deadline:
            raise ConfigError(
                "leader_election.lease_duration: must be longer than renew_deadline "
                f"({self.renew_deadline.total_seconds():g}s), got {self.lease_duration.total_seconds():g}s"
            )
        if self.renew_deadline <= self.retry_period:
            raise ConfigError(
                "leader_election.renew_deadline: must be longer than retry_period "
                f"({self.retry_period.total_seconds():g}s), got {self.renew_deadline.total_seconds():g}s"
            )


@dataclass(frozen=True)
class DetectionSettings:
    """The running agent's detection and sweep timing (`zonemedic run`)."""

    debounce: timedelta = timedelta(milliseconds=500)
    max_delay: Annotated[timedelta, POSITIVE] = timedelta(seconds=2)
    metrics_interval: Annotated[timedelta, POSITIVE] = timedelta(minutes=1)
    sweep_misfire_grace: timedelta = timedelta(minutes=5)
    # A cluster-wide diagnosis this often on the leader, whatever the events said: what a lost
    # event or a batch dropped by an unexpected error missed is recorded within this.
    resync: Annotated[timedelta, POSITIVE] = timedelta(minutes=10)
    # A job whose pods still await their zone-mirroring labels is recorded anyway after this
    # long, with the verdict at hand and a reason saying the labels were still unsettled.
    label_settle_timeout: Annotated[timedelta, Within(timedelta(seconds=1), timedelta(minutes=10))] = (
        timedelta(seconds=45)
    )


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
    and `incidents show` carry its diff, or why it cannot be applied. `auto_hold`: after a job's
    co-location rolled back, its next incidents are not approved automatically for this long (a
    person decides), so a fix that does not work is not retried in a loop.
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
    auto_hold: timedelta = timedelta(hours=24)

    def __post_init__(self) -> None:
        for name in ("suspend_timeout", "schedule_timeout", "verify_window", "poll_interval",
                     "pickup_interval", "retry_after", "auto_hold"):
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
class Settings:
    """The agent's whole configuration (one YAML file)."""

    cluster_name: str = "default"
    data_dir: str = "/var/lib/zonemedic"
    log_level: Annotated[str, Within(choices=LOG_LEVELS)] = "info"
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    alertmanager: AlertmanagerSettings = field(default_factory=AlertmanagerSettings)
    leader_election: LeaderElectionSettings = field(default_factory=LeaderElectionSettings)
    # None: the playbooks shipped with the package (`agent.playbook.loader.playbooks_directory`)
    playbooks_dir: str | None = None
    diagnosis: DiagnosisSettings = field(default_factory=DiagnosisSettings)
    egress: EgressSettings = field(default_factory=EgressSettings)
    detection: DetectionSettings = field(default_factory=DetectionSettings)
    slack: SlackSettings = field(default_factory=SlackSettings)
    remediation: RemediationSettings = field(default_factory=RemediationSettings)
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)
    secrets: EnvironmentSecrets = field(
        default_factory=EnvironmentSecrets, repr=False, metadata={"environment_only": True}
    )

    def __post_init__(self) -> None:
        if (self.admission.enabled and self.admission.port != 0
                and self.admission.port == self.http.port):  # fmt: skip
            raise ConfigError(f"admission.port: must differ from http.port ({self.http.port}): "
                              "the webhook serves HTTPS on a port of its own")
