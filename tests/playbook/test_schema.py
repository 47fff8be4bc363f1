"""Playbook schema: the shipped playbooks load; every kind of mistake names file, line and field."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.playbook.loader import check_directory, load_playbooks
from agent.playbook.model import MatchOp, PlaybookActionKind, TriggerKind
from agent.playbook.schema import PlaybookError, parse_playbook

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
name: demo
description: a demo
triggers:
  - type: zone_split
  - type: alert
    matchers: ['alertname="GpuLow"', 'severity=~"warning|critical"']
  - type: schedule
    cron: "0 8 * * 1-5"
conditions:
  namespaces: {include: [ml], exclude: [ml-scratch]}
  job_kinds: [PyTorchJob, TFJob]
  labels: {team: vision}
  min_gpus: 8
  verdicts: [zone_split_blocked]
actions:
  - type: notify
    channel: "#ml"
  - type: propose_colocation
    approval: {approvers: [U1, U2], expiry: 30m, auto_namespaces: [ml-sandbox]}
  - type: digest
"""


def test_shipped_playbooks_load() -> None:
    playbooks = load_playbooks(REPO / "playbooks")
    names = {p.name for p in playbooks}
    assert names == {
        "zone-split", "policy-blocked", "zone-label-mismatch", "gpu-utilization-drop",
        "daily-digest",
    }
    mismatch = next(p for p in playbooks if p.name == "zone-label-mismatch")
    assert [t.kind for t in mismatch.triggers] == [TriggerKind.ZONE_LABEL_MISMATCH]
    digest = next(p for p in playbooks if p.name == "daily-digest")
    assert digest.schedules() == ("0 8 * * 1-5",)


def test_full_playbook_parses() -> None:
    pb = parse_playbook(GOOD, path=Path("demo.yaml"))
    assert [t.kind for t in pb.triggers] == [
        TriggerKind.ZONE_SPLIT,
        TriggerKind.ALERT,
        TriggerKind.SCHEDULE,
    ]
    assert pb.triggers[1].matchers[1].op is MatchOp.RE
    assert pb.conditions.namespaces_include == ("ml",)
    assert pb.conditions.namespaces_exclude == ("ml-scratch",)
    assert pb.conditions.labels == (("team", "vision"),)
    assert pb.conditions.min_gpus == 8
    colocate = pb.actions[1]
    assert colocate.kind is PlaybookActionKind.PROPOSE_COLOCATION
    assert colocate.approval is not None
    assert colocate.approval.expiry == timedelta(minutes=30)
    assert colocate.approval.is_auto("ml-sandbox")
    assert not colocate.approval.is_auto("ml")


@pytest.mark.parametrize(
    ("approval", "expiry"),
    [
        ("approval: {approvers: [U1, U2], expiry: 30m, auto_namespaces: [ml-sandbox]}",
         timedelta(minutes=30)),
        ("approval: {approvers: [U1]}", None),  # the agent's slack.approval_ttl
        ("type: propose_colocation", None),
    ],
)
def test_approval_expiry_is_optional(approval: str, expiry: timedelta | None) -> None:
    text = GOOD.replace(
        "approval: {approvers: [U1, U2], expiry: 30m, auto_namespaces: [ml-sandbox]}", approval
    ) if approval.startswith("approval") else GOOD.replace(
        "\n    approval: {approvers: [U1, U2], expiry: 30m, auto_namespaces: [ml-sandbox]}", "")
    pb = parse_playbook(text, path=Path("demo.yaml"))
    colocate = pb.actions[1]
    assert colocate.approval is not None and colocate.approval.expiry == expiry


def _replace(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (_replace("name: demo\n", ""), r"^demo\.yaml:1: name: required field is missing"),
        (_replace("description:", "descripton:"), r"^demo\.yaml:2: descripton: unknown field"),
        (_replace("type: zone_split", "type: zone_splt"), r"^demo\.yaml:4: triggers\[0\]\.type: 'zone_splt' is not one of"),
        (_replace('\'alertname="GpuLow"\'', "'alertname~GpuLow'"), r"^demo\.yaml:6: triggers\[1\]\.matchers\[0\]: .*not a matcher"),
        (_replace('severity=~"warning|critical"', 'severity=~"(warning"'), r"^demo\.yaml:6: triggers\[1\]\.matchers\[1\]: .*bad regular expression"),
        (_replace('"0 8 * * 1-5"', '"0 25 * * *"'), r"^demo\.yaml:8: triggers\[2\]\.cron: hour: must be from 0 to 23, got 25"),
        (_replace('"0 8 * * 1-5"', '"0 8 31 2 *"'), r"^demo\.yaml:8: triggers\[2\]\.cron: .*never fires"),
        (_replace('"0 8 * * 1-5"', '"0 8 * *"'), r"^demo\.yaml:8: triggers\[2\]\.cron: expected 5 fields"),
        (_replace("job_kinds: [PyTorchJob, TFJob]", "job_kinds: [PyTorchJob, TfJob]"), r"^demo\.yaml:11: conditions\.job_kinds\[1\]: 'TfJob' is not one of"),
        (_replace("min_gpus: 8", "min_gpus: -1"), r"^demo\.yaml:13: conditions\.min_gpus: must be from 0 to 1000000, got -1"),
        (_replace("min_gpus: 8", "min_gpus: 99999999999999999999999"), r"^demo\.yaml:13: conditions\.min_gpus: must be from 0 to 1000000"),
        (_replace("min_gpus: 8", "min_gpus: .inf"), r"^demo\.yaml:13: conditions\.min_gpus: expected an integer from 0 to 1000000"),
        (_replace("min_gpus: 8", "min_gpus: eight"), r"^demo\.yaml:13: conditions\.min_gpus: expected an integer"),
        (_replace("verdicts: [zone_split_blocked]", "verdicts: [split]"), r"^demo\.yaml:14: conditions\.verdicts\[0\]: 'split' is not one of"),
        (_replace("labels: {team: vision}", "labels: {team: 3}"), r"^demo\.yaml:12: conditions\.labels\.team: expected a string value"),
        (_replace("expiry: 30m", "expiry: soon"), r"^demo\.yaml:19: actions\[1\]\.approval\.expiry: expected a duration"),
        (_replace("approvers: [U1, U2]", "approvers: U1"), r"^demo\.yaml:19: actions\[1\]\.approval\.approvers: expected a list"),
        (_replace("  - type: digest\n", "  - type: digest\n    approval: {}\n"), r"^demo\.yaml:21: actions\[2\]\.approval: not allowed on a digest action"),
        (_replace("  - type: zone_split\n", "  - type: zone_split\n    cron: '* * * * *'\n"), r"^demo\.yaml:5: triggers\[0\]\.cron: not allowed on a zone_split trigger"),
        (_replace("    matchers: ['alertname=\"GpuLow\"', 'severity=~\"warning|critical\"']\n", ""), r"^demo\.yaml:5: triggers\[1\]\.matchers: required for an alert trigger"),
        (_replace("channel: \"#ml\"", "channel: 7"), r"^demo\.yaml:17: actions\[0\]\.channel: expected a non-empty string"),
        ("name: x\ntriggers: []\nactions: [{type: digest}]\n", r"^demo\.yaml:2: triggers: needs at least one trigger"),
        ("name: x\ntriggers: [{type: zone_split}]\nactions: [{type: notify}\n", r"^demo\.yaml:\d+: invalid YAML"),
        ("", r"^demo\.yaml: empty file"),
        # a tag no safe constructor knows is a located error, not a traceback (found by the fuzz test)
        ("!0 :", r"^demo\.yaml:1: invalid YAML: could not determine a constructor for the tag '!0'$"),
        (_replace("name: demo", "name: !!python/name:os.system x"), r"^demo\.yaml:1: name: invalid YAML: could not determine a constructor"),
        # a field name that is not a plain word is JSON-quoted: the error stays one line
        ('"a\\nb": 1\n', r'^demo\.yaml:1: \["a\\nb"\]: unknown field'),
        # hostile input: recursion, nesting, alias bombs and numbers that overflow
        (_replace("description:", "extra: &a [*a]\ndescription:"), r"^demo\.yaml:2: alias \*a refers to a node that contains it"),
        (_replace("description:", "x: &a {k: *a}\ndescription:"), r"^demo\.yaml:2: alias \*a refers to a node that contains it"),
        ("name: x\ndescription: " + "[" * 500 + "]" * 500 + "\n", r"^demo\.yaml:2: nested deeper than 100 levels"),
        ("name: x\ndescription: " + "[" * 5000 + "]" * 5000 + "\n", r"^demo\.yaml:2: (nested deeper than 100 levels|invalid YAML: exceeded maximum nesting depth)"),
        ("name: x\ndescription:\n" + "".join("  " * i + "- \n" for i in range(1, 150)), r"^demo\.yaml:\d+: nested deeper than 100 levels"),
        ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdef", "bcdefg", strict=True)), r"^demo\.yaml:5: aliases expand to more than 100000 nodes"),
        (_replace("expiry: 30m", "expiry: 99999999999d"), r"^demo\.yaml:19: actions\[1\]\.approval\.expiry: at most 3650d"),
        (_replace("expiry: 30m", "expiry: .nan"), r"^demo\.yaml:19: actions\[1\]\.approval\.expiry: expected a duration"),
        (_replace("expiry: 30m", "expiry: .inf"), r"^demo\.yaml:19: actions\[1\]\.approval\.expiry: expected a duration"),
        (_replace("expiry: 30m", "expiry: ٣٠m"), r"^demo\.yaml:19: actions\[1\]\.approval\.expiry: expected a duration"),
        ("- a\n- b\n", r"^demo\.yaml:1: expected a mapping"),
    ],
)
def test_bad_playbook_names_file_line_and_field(text: str, expected: str) -> None:
    with pytest.raises(PlaybookError, match=expected):
        parse_playbook(text, path=Path("demo.yaml"))


def test_directory_reports_each_bad_file_and_duplicate_names(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD)  # same name as a.yaml
    (tmp_path / "c.yaml").write_text(GOOD.replace("min_gpus: 8", "min_gpus: x"))
    (tmp_path / "notes.txt").write_text("ignored")
    playbooks, errors = check_directory(tmp_path)
    assert [p.name for p in playbooks] == ["demo"]
    messages = [str(e) for e in errors]
    assert len(messages) == 2
    assert "b.yaml: name: 'demo' is already used by" in messages[0]
    assert "c.yaml:13: conditions.min_gpus" in messages[1]
    with pytest.raises(PlaybookError, match="b.yaml"):
        load_playbooks(tmp_path)


_YAMLISH = st.text(alphabet="[]{}&*:,-!|>'\"#\n abtype:zone_splitactions.٨²0179\x00\x1b\x7f\x85\x9b\r\t\ufeff",
                   max_size=160)


@pytest.mark.parametrize("raw, line", [
    (b"name: x\ndescription: a\x00b\n", 2),   # NUL
    (b"name: x\x1b[31m\n", 1),                # ESC
    (b"name: x\ndescription: \x7f\n", 2),    # DEL
    (b"name: \xc2\x9b2J\n", 1),              # C1 CSI
])
def test_a_character_yaml_forbids_is_one_located_error(tmp_path: Path, raw: bytes,
                                                       line: int) -> None:
    """A file holding a character YAML does not allow is refused like any other bad file: one
    line naming the file, its line and the character (it used to escape as a ReaderError)."""
    (tmp_path / "bad.yaml").write_bytes(raw)
    playbooks, errors = check_directory(tmp_path)
    assert playbooks == []
    assert [str(e).split(": invalid YAML: ")[0] for e in errors] == [f"{tmp_path / 'bad.yaml'}:{line}"]
    assert "not allowed (character #x" in str(errors[0]) and "\n" not in str(errors[0])


@settings(max_examples=300, deadline=None)
@given(st.one_of(_YAMLISH, st.sampled_from(GOOD.splitlines(keepends=True)).map(lambda line: GOOD.replace(line, "", 1))))
def test_fuzz_any_text_is_a_playbook_or_one_located_error(text: str) -> None:
    try:
        parse_playbook(text, path=Path("demo.yaml"))
    except PlaybookError as exc:
        assert str(exc).startswith("demo.yaml")
        assert "\n" not in str(exc)
