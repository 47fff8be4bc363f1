"""Playbooks as plain data: triggers -> conditions -> actions, with an approval policy.

Built by `agent.playbook.schema` from `playbooks/*.yaml`; read by `agent.playbook.matching` (which
playbooks fire for an event) and by the runtime (schedules, notify channels, approval policy). No
parsing, no validation and no I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum


class TriggerKind(StrEnum):
    ZONE_SPLIT = "zone_split"
    POLICY_BLOCKED = "policy_blocked"
    ZONE_LABEL_MISMATCH = "zone_label_mismatch"
    GPU_UTILIZATION_DROP = "gpu_utilization_drop"
    ALERT = "alert"
    SCHEDULE = "schedule"


class PlaybookActionKind(StrEnum):
    NOTIFY = "notify"
    PROPOSE_COLOCATION = "propose_colocation"
    DIGEST = "digest"


class MatchOp(StrEnum):
    """Alertmanager-style label matcher operators."""

    EQ = "="
    NE = "!="
    RE = "=~"
    NRE = "!~"


@dataclass(frozen=True)
class LabelMatcher:
    """`name op value`, e.g. `severity=~"warning|critical"` (regexes are fully anchored)."""

    name: str
    op: MatchOp
    value: str


@dataclass(frozen=True)
class Trigger:
    kind: TriggerKind
    matchers: tuple[LabelMatcher, ...] = ()  # alert only
    cron: str | None = None  # schedule only (5 fields, UTC)


@dataclass(frozen=True)
class Conditions:
    """All present conditions must hold (AND); an empty list/mapping means "no constraint"."""

    namespaces_include: tuple[str, ...] = ()
    namespaces_exclude: tuple[str, ...] = ()
    job_kinds: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    min_gpus: int = 0
    verdicts: tuple[str, ...] = ()


@dataclass(frozen=True)
class ApprovalPolicy:
    """Who may approve a co-location, how long a proposal lives, which namespaces opt in to auto.

    `expiry` None: the proposal lives the agent's `slack.approval_ttl`."""

    approvers: tuple[str, ...] = ()
    expiry: timedelta | None = None
    auto_namespaces: tuple[str, ...] = ()

    def is_auto(self, namespace: str) -> bool:
        return namespace in self.auto_namespaces


@dataclass(frozen=True)
class Action:
    kind: PlaybookActionKind
    channel: str | None = None
    approval: ApprovalPolicy | None = None  # propose_colocation only


@dataclass(frozen=True)
class Playbook:
    name: str
    source: str  # the file it came from
    triggers: tuple[Trigger, ...]
    actions: tuple[Action, ...]
    conditions: Conditions = field(default_factory=Conditions)
    description: str = ""
    enabled: bool = True

    def schedules(self) -> tuple[str, ...]:
        return tuple(t.cron for t in self.triggers if t.kind is TriggerKind.SCHEDULE and t.cron)
