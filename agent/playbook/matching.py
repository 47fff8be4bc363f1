"""Which playbooks fire for an event, which jobs a playbook's conditions admit, and why an event
is not posted.

Called by the runtime's detection glue (a finding, a utilization drop, an alert) and by sweeps (a
schedule's digest filters jobs with `admits`). A coordinator/worker group declared in the
configuration (`declared`) is a training job whatever it requests: `min_gpus` does not exclude it
(its GPUs may be simulated by a taint and a node selector, or requested by another name).
`unposted_reason` says, in words, why no playbook posts an event (the condition each playbook's
conditions fail on), for the incident's record and the digest. Pure: plain data in, plain data
out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agent.playbook.matchers import matches_all
from agent.playbook.model import (
    Action,
    Conditions,
    Playbook,
    PlaybookActionKind,
    Trigger,
    TriggerKind,
)

# The actions that post an incident (a digest only lists it).
POSTING_ACTIONS = frozenset({PlaybookActionKind.NOTIFY, PlaybookActionKind.PROPOSE_COLOCATION})
# The detail key of the note an incident no playbook posts gets: `unposted_reason`'s words.
NOT_POSTED = "not_posted"

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
    declared: bool = False  # a group declared in the configuration: a training job by declaration


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


def refusal(conditions: Conditions, subject: Subject) -> str | None:
    """The first condition that does not hold for `subject`, in words; None when all hold
    (absent conditions hold)."""
    if conditions.namespaces_include and subject.namespace not in conditions.namespaces_include:
        return (f"namespace {subject.namespace} is not in conditions.namespaces.include "
                f"({', '.join(conditions.namespaces_include)})")
    if subject.namespace in conditions.namespaces_exclude:
        return f"namespace {subject.namespace} is in conditions.namespaces.exclude"
    if conditions.job_kinds and subject.kind not in conditions.job_kinds:
        return (f"kind {subject.kind} is not in conditions.job_kinds "
                f"({', '.join(conditions.job_kinds)})")
    for key, value in conditions.labels:
        if subject.labels.get(key) != value:
            return f"the job lacks the label {key}={value} (conditions.labels)"
    if subject.gpus < conditions.min_gpus and not subject.declared:
        return (f"the job's pods request {subject.gpus} GPU(s), fewer than conditions.min_gpus "
                f"{conditions.min_gpus}")
    if conditions.verdicts and (subject.verdict is None or subject.verdict not in conditions.verdicts):
        return (f"verdict {subject.verdict or 'none'} is not in conditions.verdicts "
                f"({', '.join(conditions.verdicts)})")
    return None


def admits(conditions: Conditions, subject: Subject) -> bool:
    """True when every condition holds for `subject` (absent conditions hold)."""
    return refusal(conditions, subject) is None


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


def unposted_reason(playbooks: Iterable[Playbook], event: Event) -> str | None:
    """Why no playbook posts `event` (notify or propose a fix), in words; None when one does.
    Each enabled playbook with a trigger for the event says what stops it: a condition, or that
    it has no posting action."""
    firings = fired(playbooks, event)
    if any(a.kind in POSTING_ACTIONS for f in firings for a in f.actions):
        return None
    reasons = []
    for playbook in playbooks:
        if not playbook.enabled or not any(_trigger_fires(t, event) for t in playbook.triggers):
            continue
        why = refusal(playbook.conditions, event.subject) if event.subject is not None else None
        reasons.append(f"playbook {playbook.name}: {why or 'it has no notify action'}")
    if not reasons:
        return f"no enabled playbook has a {event.trigger.value} trigger"
    return "; ".join(reasons)
