"""Which playbooks fire for an event, and which jobs a playbook's conditions admit.

Called by the runtime's detection glue (a finding, a utilization drop, an alert) and by sweeps (a
schedule's digest filters jobs with `admits`). Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agent.playbook.matchers import matches_all
from agent.playbook.model import Action, Conditions, Playbook, Trigger, TriggerKind

_VERDICT_TRIGGERS = {
    "zone_split_blocked": TriggerKind.ZONE_SPLIT,
    "zone_split_degraded": TriggerKind.ZONE_SPLIT,
    "policy_blocked": TriggerKind.POLICY_BLOCKED,
    "zone_label_mismatch": TriggerKind.ZONE_LABEL_MISMATCH,
    "gpu_utilization_drop": TriggerKind.GPU_UTILIZATION_DROP,
}


def trigger_for_verdict(verdict: str) -> TriggerKind | None:
    """The trigger a finding's verdict raises (None for healthy and pending)."""
    return _VERDICT_TRIGGERS.get(verdict)


@dataclass(frozen=True)
class Subject:
    """The job an event is about, as far as conditions look at it."""

    namespace: str
    kind: str
    labels: Mapping[str, str] = field(default_factory=dict)
    gpus: int = 0
    verdict: str | None = None


@dataclass(frozen=True)
class Event:
    trigger: TriggerKind
    subject: Subject | None = None
    alert_labels: Mapping[str, str] = field(default_factory=dict)
    cron: str | None = None  # for schedule events: which schedule fired


@dataclass(frozen=True)
class Firing:
    playbook: Playbook
    actions: tuple[Action, ...]


def admits(conditions: Conditions, subject: Subject) -> bool:
    """True when every condition holds for `subject` (absent conditions hold)."""
    if conditions.namespaces_include and subject.namespace not in conditions.namespaces_include:
        return False
    if subject.namespace in conditions.namespaces_exclude:
        return False
    if conditions.job_kinds and subject.kind not in conditions.job_kinds:
        return False
    if any(subject.labels.get(k) != v for k, v in conditions.labels):
        return False
    if subject.gpus < conditions.min_gpus:
        return False
    return not (
        conditions.verdicts
        and (subject.verdict is None or subject.verdict not in conditions.verdicts)
    )


def _trigger_fires(trigger: Trigger, event: Event) -> bool:
    if trigger.kind is not event.trigger:
        return False
    if trigger.kind is TriggerKind.ALERT:
        return matches_all(trigger.matchers, event.alert_labels)
    if trigger.kind is TriggerKind.SCHEDULE:
        return event.cron is None or trigger.cron == event.cron
    return True


def fired(playbooks: Iterable[Playbook], event: Event) -> list[Firing]:
    """The enabled playbooks one of whose triggers fires and whose conditions admit the subject."""
    out = []
    for playbook in playbooks:
        if not playbook.enabled:
            continue
        if not any(_trigger_fires(t, event) for t in playbook.triggers):
            continue
        if event.subject is not None and not admits(playbook.conditions, event.subject):
            continue
        out.append(Firing(playbook=playbook, actions=playbook.actions))
    return out
