"""Which playbooks fire: triggers, alert matchers, conditions (table-driven)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.playbook.matchers import matches, parse_matcher
from agent.playbook.matching import (
    Event,
    Subject,
    admits,
    fired,
    refusal,
    trigger_for_verdict,
    unposted_reason,
)
from agent.playbook.model import Conditions, TriggerKind
from agent.playbook.schema import parse_playbook

PLAYBOOK = """\
name: split
triggers:
  - type: zone_split
  - type: alert
    matchers: ['alertname="GpuLow"', 'severity!="info"']
conditions:
  namespaces: {include: [ml, ml-b], exclude: [ml-b]}
  job_kinds: [PyTorchJob]
  labels: {team: vision}
  min_gpus: 4
  verdicts: [zone_split_blocked, zone_split_degraded]
actions:
  - type: notify
"""

SUBJECT = Subject(
    namespace="ml",
    kind="PyTorchJob",
    labels={"team": "vision"},
    gpus=8,
    verdict="zone_split_blocked",
)


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ('a="x"', {"a": "x"}, True),
        ('a="x"', {"a": "y"}, False),
        ('a=""', {}, True),
        ('a!="x"', {}, True),
        ('a=~"x|y"', {"a": "y"}, True),
        ('a=~"x"', {"a": "xx"}, False),  # anchored
        ('a!~"x.*"', {"a": "xyz"}, False),
        ("a=x", {"a": "x"}, True),
    ],
)
def test_matchers(text: str, labels: dict[str, str], expected: bool) -> None:
    assert matches(parse_matcher(text), labels) is expected


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({}, True),
        ({"namespace": "other"}, False),
        ({"namespace": "ml-b"}, False),
        ({"kind": "TFJob"}, False),
        ({"labels": {"team": "nlp"}}, False),
        ({"labels": {}}, False),
        ({"gpus": 3}, False),
        ({"gpus": 4}, True),
        ({"verdict": "policy_blocked"}, False),
        ({"verdict": None}, False),
    ],
)
def test_conditions(change: dict[str, object], expected: bool) -> None:
    pb = parse_playbook(PLAYBOOK, path=Path("p.yaml"))
    subject = Subject(**{**SUBJECT.__dict__, **change})  # type: ignore[arg-type]
    assert admits(pb.conditions, subject) is expected


def test_empty_conditions_admit_everything() -> None:
    assert admits(Conditions(), Subject(namespace="x", kind="Group"))


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (Event(TriggerKind.ZONE_SPLIT, SUBJECT), ["split"]),
        (Event(TriggerKind.POLICY_BLOCKED, SUBJECT), []),
        (Event(TriggerKind.ALERT, SUBJECT, {"alertname": "GpuLow", "severity": "warning"}), ["split"]),
        (Event(TriggerKind.ALERT, SUBJECT, {"alertname": "GpuLow", "severity": "info"}), []),
        (Event(TriggerKind.ALERT, SUBJECT, {"alertname": "Other"}), []),
        (Event(TriggerKind.ZONE_SPLIT, Subject(namespace="ml", kind="PyTorchJob")), []),
    ],
)
def test_fired(event: Event, expected: list[str]) -> None:
    pb = parse_playbook(PLAYBOOK, path=Path("p.yaml"))
    disabled = parse_playbook(PLAYBOOK.replace("name: split", "name: quiet\nenabled: false"), path=Path("q.yaml"))
    assert [f.playbook.name for f in fired([pb, disabled], event)] == expected


@pytest.mark.parametrize(
    ("verdict", "trigger"),
    [
        ("zone_split_blocked", TriggerKind.ZONE_SPLIT),
        ("zone_split_degraded", TriggerKind.ZONE_SPLIT),
        ("policy_blocked", TriggerKind.POLICY_BLOCKED),
        ("healthy", None),
        ("pending", None),
    ],
)
def test_trigger_for_verdict(verdict: str, trigger: TriggerKind | None) -> None:
    assert trigger_for_verdict(verdict) is trigger


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({}, None),
        ({"namespace": "other"}, "namespace other is not in conditions.namespaces.include (ml, ml-b)"),
        ({"namespace": "ml-b"}, "namespace ml-b is in conditions.namespaces.exclude"),
        ({"kind": "TFJob"}, "kind TFJob is not in conditions.job_kinds (PyTorchJob)"),
        ({"labels": {}}, "the job lacks the label team=vision (conditions.labels)"),
        ({"gpus": 0}, "the job's pods request 0 GPU(s), fewer than conditions.min_gpus 4"),
        ({"gpus": 0, "declared": True}, None),  # a declared group: a training job by declaration
        ({"verdict": "policy_blocked"},
         "verdict policy_blocked is not in conditions.verdicts (zone_split_blocked, zone_split_degraded)"),
        ({"verdict": None}, "verdict none is not in conditions.verdicts (zone_split_blocked, "
                            "zone_split_degraded)"),
    ],
)
def test_refusal_names_the_condition(change: dict[str, object], why: str | None) -> None:
    pb = parse_playbook(PLAYBOOK, path=Path("p.yaml"))
    subject = Subject(**{**SUBJECT.__dict__, **change})  # type: ignore[arg-type]
    assert refusal(pb.conditions, subject) == why
    assert admits(pb.conditions, subject) is (why is None)


def test_unposted_reason() -> None:
    pb = parse_playbook(PLAYBOOK, path=Path("p.yaml"))
    digest_only = parse_playbook(
        "name: quiet\ntriggers: [{type: zone_split}]\nactions: [{type: digest}]\n", path=Path("q.yaml"))
    assert unposted_reason([pb], Event(TriggerKind.ZONE_SPLIT, SUBJECT)) is None
    poor = Subject(**{**SUBJECT.__dict__, "gpus": 1})
    assert unposted_reason([pb, digest_only], Event(TriggerKind.ZONE_SPLIT, poor)) == (
        "playbook split: the job's pods request 1 GPU(s), fewer than conditions.min_gpus 4; "
        "playbook quiet: it has no notify action")
    assert unposted_reason([pb], Event(TriggerKind.POLICY_BLOCKED, SUBJECT)) == (
        "no enabled playbook has a policy_blocked trigger")


@pytest.mark.parametrize(
    ("kinds", "kind", "why"),
    [
        ("[TrainJob, JobSet]", "TrainJob", None),
        ("[TrainJob, JobSet]", "JobSet", None),
        ("[TrainJob]", "JobSet", "kind JobSet is not in conditions.job_kinds (TrainJob)"),
        ("[JobSet]", "TrainJob", "kind TrainJob is not in conditions.job_kinds (JobSet)"),
        ("[PyTorchJob]", "TrainJob", "kind TrainJob is not in conditions.job_kinds (PyTorchJob)"),
    ],
)
def test_job_kinds_name_trainjobs_and_jobsets(kinds: str, kind: str, why: str | None) -> None:
    pb = parse_playbook(PLAYBOOK.replace("job_kinds: [PyTorchJob]", f"job_kinds: {kinds}"),
                        path=Path("p.yaml"))
    subject = Subject(**{**SUBJECT.__dict__, "kind": kind})  # type: ignore[arg-type]
    assert refusal(pb.conditions, subject) == why
