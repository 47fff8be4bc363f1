"""`zonemedic incidents list|show|stats` through the real command line, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from agent.cli import main
from agent.model.incident import Actor, Verdict
from agent.model.lifecycle import (
    DecisionOutcome,
    DecisionSource,
    EventKind,
    IncidentStatus,
    MessageKind,
    RemediationActionKind,
)
from agent.store.repository import IncidentStore
from tests.store.helpers import finding

S = IncidentStatus
NOW = datetime.now(UTC).replace(microsecond=0)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def history(store: IncidentStore) -> dict[str, int]:
    """Four incidents: a resolved one with a decision and actions, a rejected one, an open policy
    block in another namespace, and one opened 40 days ago."""
    ids: dict[str, int] = {}
    resolved = store.record_finding(
        finding("resnet", at=NOW - timedelta(days=2), onset_at=NOW - timedelta(days=2, minutes=1),
                utilization_now=40.0, gpus=8)
    ).incident.id
    store.transition(resolved, S.OPEN, S.AWAITING_APPROVAL, actor="agent",
                     now=NOW - timedelta(days=2))
    store.record_decision(resolved, DecisionOutcome.APPROVE,
                          actor=Actor("U1", "alice", DecisionSource.SLACK),
                          now=NOW - timedelta(days=2) + timedelta(minutes=5), comment="ship it")
    store.transition(resolved, S.APPROVED, S.REMEDIATING, actor="agent",
                     now=NOW - timedelta(days=2) + timedelta(minutes=6))
    store.record_action(resolved, RemediationActionKind.APPLY, now=NOW - timedelta(days=2, minutes=-7),
                        actor="agent", succeeded=True, message="suspended and resumed in zone-a")
    store.transition(resolved, S.REMEDIATING, S.VERIFYING, actor="agent",
                     now=NOW - timedelta(days=2) + timedelta(minutes=8))
    store.record_action(resolved, RemediationActionKind.VERIFY, now=NOW - timedelta(days=1), actor="agent",
                        succeeded=True, utilization_after=85.0)
    store.transition(resolved, S.VERIFYING, S.RESOLVED, actor="agent", now=NOW - timedelta(days=1))
    ids["resolved"] = resolved
    rejected = store.record_finding(finding("bert", at=NOW - timedelta(hours=5))).incident.id
    store.request_approval(rejected, deadline=NOW + timedelta(hours=1), now=NOW, actor="agent")
    store.record_decision(rejected, DecisionOutcome.REJECT,
                          actor=Actor("U2", "bob", DecisionSource.SLACK), now=NOW)
    ids["rejected"] = rejected
    ids["blocked"] = store.record_finding(
        finding("a-training-job-with-a-very-long-name-that-will-not-fit-in-the-table",
                namespace="vision-research-team", verdict=Verdict.POLICY_BLOCKED, uid="u-long",
                at=NOW - timedelta(hours=1))
    ).incident.id
    ids["old"] = store.record_finding(finding("old", at=NOW - timedelta(days=40))).incident.id
    return ids


def _ids(out: str) -> list[int]:
    return [int(line.split()[0]) for line in out.splitlines()[1:]]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], ["blocked", "rejected", "resolved", "old"]),
        (["--job", "ml/resnet"], ["resolved"]),
        (["--namespace", "ml"], ["rejected", "resolved", "old"]),
        (["--status", "rejected"], ["rejected"]),
        (["--verdict", "policy_blocked"], ["blocked"]),
        (["--since", "7d"], ["blocked", "rejected", "resolved"]),
        (["--since", "3h", "--namespace", "vision-research-team"], ["blocked"]),
        (["--limit", "2"], ["blocked", "rejected"]),
    ],
)
def test_list_filters(capsys: pytest.CaptureFixture[str], db_url: str,
                      history: dict[str, int], flags: list[str], expected: list[str]) -> None:
    code, out, err = cli(capsys, "incidents", "list", "--database", db_url, *flags)
    assert (code, err) == (0, "")
    assert _ids(out) == [history[name] for name in expected]


def test_list_table_fits_100_columns(capsys: pytest.CaptureFixture[str], db_url: str,
                                     history: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = cli(capsys, "incidents", "list", "--database", db_url)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "OPENED", "(UTC)", "STATUS", "VERDICT", "JOB"]
    assert all(len(line) <= 100 for line in lines)
    blocked = next(line for line in lines if line.startswith(f"{history['blocked']} "))
    assert "policy_blocked" in blocked and "vision-research-team/a-training-" in blocked
    assert blocked.endswith("…")


def test_list_json(capsys: pytest.CaptureFixture[str], db_url: str,
                   history: dict[str, int]) -> None:
    code, out, _ = cli(capsys, "incidents", "list", "--database", db_url, "--output", "json",
                       "--job", "ml/resnet")
    assert code == 0
    data = json.loads(out)
    assert data["problems"] == []
    [incident] = data["incidents"]
    assert incident["id"] == history["resolved"]
    assert incident["status"] == "resolved" and incident["verdict"] == "zone_split_blocked"
    assert incident["utilization_before"] == 40.0 and incident["utilization_after"] == 85.0
    assert datetime.fromisoformat(incident["opened_at"]) == NOW - timedelta(days=2)


def test_list_survives_an_unreadable_row(capsys: pytest.CaptureFixture[str], db_url: str,
                                         store: IncidentStore, history: dict[str, int]) -> None:
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE incidents SET status = 'warped' WHERE id = :id"),
                     {"id": history["rejected"]})
    code, out, err = cli(capsys, "incidents", "list", "--database", db_url)
    assert code == 0
    assert err == f"zonemedic: warning: incident {history['rejected']}: unknown status value 'warped'\n"
    assert _ids(out) == [history["blocked"], history["resolved"], history["old"]]


def test_show(capsys: pytest.CaptureFixture[str], db_url: str, history: dict[str, int],
              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    code, out, err = cli(capsys, "incidents", "show", str(history["resolved"]), "--database", db_url)
    assert (code, err) == (0, "")
    assert out.startswith(f"Incident {history['resolved']}: zone_split_blocked [resolved]")
    assert all(len(line) <= 100 for line in out.splitlines())
    timeline = out[out.index("Timeline:"):out.index("Decisions:")]
    kinds = [line.split()[2] for line in timeline.splitlines()[1:]]
    assert kinds == ["detected", "awaiting_approval", "approved", "remediation_started",
                     "remediation_step", "verifying", "verified", "resolved"]
    assert 'approve  alice (U1) via slack  "ship it"' in out
    assert "apply     ok      suspended and resumed in zone-a" in out
    assert "utilization before 40%, after 85%" in out


def test_show_json(capsys: pytest.CaptureFixture[str], db_url: str,
                   history: dict[str, int]) -> None:
    code, out, _ = cli(capsys, "incidents", "show", str(history["rejected"]), "--database", db_url,
                       "--output", "json")
    assert code == 0
    data = json.loads(out)
    assert data["incident"]["status"] == "rejected"
    assert [d["actor_id"] for d in data["decisions"]] == ["U2"]
    assert data["diagnosis"]["job"]["name"] == "bert"
    assert data["incident"]["approval_deadline"] == (NOW + timedelta(hours=1)).isoformat()
    code, out, _ = cli(capsys, "incidents", "show", str(history["rejected"]), "--database", db_url)
    deadline = (NOW + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S")
    assert code == 0 and any(line.startswith("Approval:    deadline ") and deadline in line
                             for line in out.splitlines())


def test_show_corrupt_incident_is_named(capsys: pytest.CaptureFixture[str], db_url: str,
                                        store: IncidentStore, history: dict[str, int]) -> None:
    bad = "'[1, 2'" if store.engine.dialect.name == "sqlite" else "'[1, 2]'::jsonb"
    with store.engine.begin() as conn:
        conn.execute(text(f"UPDATE incidents SET diagnosis = {bad} WHERE id = :id"),
                     {"id": history["old"]})
    code, out, err = cli(capsys, "incidents", "show", str(history["old"]), "--database", db_url)
    assert code == 1 and out == ""
    assert err.startswith(f"zonemedic: incident {history['old']} cannot be read: column diagnosis")
    assert err.count("\n") == 1


def test_stats(capsys: pytest.CaptureFixture[str], db_url: str, history: dict[str, int],
               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = cli(capsys, "incidents", "stats", "--database", db_url, "--output", "json")
    assert code == 0
    data = json.loads(out)
    assert data["total"] == 3
    assert data["by_verdict"] == {"policy_blocked": 1, "zone_split_blocked": 2}
    assert data["by_outcome"] == {"open": 1, "rejected": 1, "resolved": 1}
    assert data["mean_time_to_detect"] == pytest.approx(60, abs=1)
    assert data["mean_time_to_resolve"] == pytest.approx(86400, abs=1)
    # 8 GPUs x 45 points x ~24 h since the fix
    assert data["gpu_hours_recovered"] == pytest.approx(8 * 0.45 * 24, rel=0.01)
    code, out, _ = cli(capsys, "incidents", "stats", "--database", db_url, "--since", "60d")
    assert code == 0
    assert "(60d): 4" in out.splitlines()[0]
    assert "Mean time to resolve:   1d" in out
    assert all(len(line) <= 100 for line in out.splitlines())


def _split(store: IncidentStore, name: str, *, at: datetime, usd: float, gb: float | None,
           source: str | None) -> int:  # fmt: skip
    """A split incident whose diagnosis carries an egress figure of basis `source`."""
    base = finding(name, at=at)
    waste: dict[str, object] = {"egress_usd_per_day": usd, "cross_zone_gb_per_day": gb}
    if source is not None:
        waste["egress_source"] = source
    record = replace(base, diagnosis={**base.diagnosis, "waste": waste}, estimated_cost=usd)
    return store.record_finding(record).incident.id


def test_stats_egress_while_split_and_saved_once_fixed(
    capsys: pytest.CaptureFixture[str], db_url: str, store: IncidentStore,
) -> None:
    fixed = _split(store, "resnet", at=NOW - timedelta(days=3), usd=6.0, gb=300.0,
                   source="measured")
    store.transition(fixed, S.OPEN, S.RESOLVED, actor="zonemedic", now=NOW - timedelta(days=2))
    _split(store, "bert", at=NOW - timedelta(hours=2), usd=2.5, gb=125.0, source="measured")
    _split(store, "gpt", at=NOW - timedelta(hours=1), usd=1.0, gb=50.0, source="estimated")
    _split(store, "vit", at=NOW - timedelta(hours=1), usd=0.5, gb=None, source=None)  # older
    gone = _split(store, "t5", at=NOW - timedelta(hours=1), usd=9.0, gb=1.0, source="measured")
    store.transition(gone, S.OPEN, S.SUPERSEDED, actor="zonemedic", now=NOW)  # not a fix
    broken = _split(store, "bad", at=NOW - timedelta(hours=1), usd=0.25, gb=5.0, source="measured")
    bad = "'[1, 2'" if store.engine.dialect.name == "sqlite" else "'[1, 2]'::jsonb"
    with store.engine.begin() as conn:  # an unreadable document: an estimate without GB
        conn.execute(text(f"UPDATE incidents SET diagnosis = {bad} WHERE id = :id"), {"id": broken})

    code, out, _ = cli(capsys, "incidents", "stats", "--database", db_url, "--output", "json")
    assert code == 0
    data = json.loads(out)
    assert data["egress_per_day_open"] == {
        "measured_usd": 2.5, "measured_gb": 125.0, "measured_incidents": 1,
        "estimated_usd": 1.75, "estimated_gb": 50.0, "estimated_incidents": 3,
    }
    saved = data["egress_saved"]  # $6/day and 300 GB/day x the ~2 days since the fix
    assert saved["measured_usd"] == pytest.approx(12.0, rel=0.01)
    assert saved["measured_gb"] == pytest.approx(600.0, rel=0.01)
    assert (saved["measured_incidents"], saved["estimated_incidents"]) == (1, 0)

    code, out, _ = cli(capsys, "incidents", "stats", "--database", db_url)
    assert code == 0
    lines = out.splitlines()
    assert "Egress while split:     $2.50/day measured (125.0 GB/day, 1 incident)" in lines
    assert f"{'':<24}$1.75/day estimated (50.0 GB/day, 3 incidents)" in lines
    assert any(line.startswith("Egress saved by fixes:  $12.0") and "measured" in line
               for line in lines)
    assert all(len(line) <= 100 for line in lines)


def test_stats_without_egress_figures_says_so(
    capsys: pytest.CaptureFixture[str], db_url: str, history: dict[str, int],
) -> None:
    code, out, _ = cli(capsys, "incidents", "stats", "--database", db_url)
    assert code == 0
    assert "Egress while split:     -" in out and "Egress saved by fixes:  -" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["list", "--since", "soon"], "--since: expected a duration"),
        (["list", "--since", "0d"], "--since: must be a positive age"),
        (["list", "--job", "noslash"], "--job: expected NAMESPACE/NAME, got 'noslash'"),
        (["list", "--job", "a/b/c"], "--job: expected NAMESPACE/NAME"),
        (["list", "--job", "ml/x", "--namespace", "other"], "contradicts --job"),
        (["list", "--status", "sleepy"], "--status: unknown value 'sleepy'"),
        (["list", "--verdict", "bad"], "--verdict: unknown value 'bad'"),
        (["list", "--limit", "many"], "--limit: expected a whole number"),
        (["list", "--limit", "0"], "--limit: must be from 1 to 10000, got 0"),
        (["list", "--limit", "٨٠"], "--limit: expected a whole number from 1 to 10000, got '٨٠'"),
        (["list", "--limit", "²"], "--limit: expected a whole number from 1 to 10000, got '²'"),
        (["list", "--limit", "1_0"], "--limit: expected a whole number"),
        (["list", "--since", "99999999999d"], "--since: at most 3650d"),
        (["list", "--since", "inf"], "--since: expected a duration"),
        (["list", "--since", "nan"], "--since: expected a duration"),
        (["list", "--since", "٧d"], "--since: expected a duration"),
        (["show", "٨٠"], "ID: expected a whole number from 1 to 2147483647, got '٨٠'"),
        (["show", "9" * 40], "ID: expected a whole number from 1 to 2147483647"),
        (["show", "99999999999999999999"], "ID: expected a whole number from 1 to 2147483647"),
        (["show", "2147483648"], "ID: must be from 1 to 2147483647, got 2147483648"),
        (["show", "-3"], "ID: expected a whole number from 1 to 2147483647, got '-3'"),
        (["list", "--output", "xml"], "--output: expected table or json"),
        (["show", "abc"], "ID: expected a whole number from 1 to 2147483647, got 'abc'"),
        (["show", "12345"], "incident 12345 not found"),
        (["stats", "--since", "forever"], "--since: expected a duration"),
    ],
)
def test_bad_flags_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], db_url: str,
                                        argv: list[str], message: str) -> None:
    code, out, err = cli(capsys, "incidents", *argv, "--database", db_url)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("zonemedic: error: ")
    assert message in err


def test_config_file_selects_the_database(capsys: pytest.CaptureFixture[str], db_url: str,
                                          history: dict[str, int], tmp_path: Path) -> None:
    config = tmp_path / "zonemedic.yaml"
    config.write_text(f"cluster_name: prod\ndatabase:\n  url: {db_url}\n")
    code, out, _ = cli(capsys, "incidents", "list", "--config", str(config), "--status", "rejected")
    assert code == 0 and _ids(out) == [history["rejected"]]


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("database:\n  uri: x\n", "database.uri: unknown key"),
        ("database:\n  url: 3\n", "database.url: expected a string, got 3"),
        ("database:\n  retention: often\n", "database.retention: expected a duration"),
    ],
)
def test_bad_config_names_the_key(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                  yaml_text: str, message: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(yaml_text)
    code, out, err = cli(capsys, "incidents", "list", "--config", str(config))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert message in err


def test_database_flag_overrides_environment(capsys: pytest.CaptureFixture[str], db_url: str,
                                             history: dict[str, int],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZONEMEDIC_DATABASE__URL", "sqlite:////nonexistent/dir/x.db")
    code, _, err = cli(capsys, "incidents", "list")
    assert code == 1 and "/nonexistent/dir/x.db does not exist" in err
    code, out, _ = cli(capsys, "incidents", "list", "--database", db_url, "--limit", "1")
    assert code == 0 and _ids(out) == [history["blocked"]]


def test_show_honours_the_output_width(capsys: pytest.CaptureFixture[str], db_url: str,
                                       store: IncidentStore, history: dict[str, int],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    reason = "the coordinator cannot reach its workers " * 3  # the line: ~180 characters
    store.add_event(history["resolved"], EventKind.NOTE, now=NOW, actor="agent",
                    detail={"reason": reason.strip()})

    def note_line(columns: str | None) -> str:
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", columns)
        code, out, _ = cli(capsys, "incidents", "show", str(history["resolved"]), "--database", db_url)
        assert code == 0
        return next(line for line in out.splitlines() if " note " in line)

    wide = note_line("200")
    assert wide.endswith(reason.strip()) and 150 < len(wide) <= 200
    narrow = note_line("100")
    assert len(narrow) == 100 and narrow.endswith("…")
    assert note_line(None) == wide  # a pipe (capsys) gets whole lines


def test_list_honours_the_output_width(capsys: pytest.CaptureFixture[str], db_url: str,
                                       history: dict[str, int],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli(capsys, "incidents", "list", "--database", db_url)
    assert code == 0
    job = "vision-research-team/a-training-job-with-a-very-long-name-that-will-not-fit-in-the-table"
    assert any(line.endswith(job) for line in out.splitlines())


def test_show_says_a_queued_message_is_not_sent_while_slack_is_off(
    capsys: pytest.CaptureFixture[str], db_url: str, store: IncidentStore,
    history: dict[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ZONEMEDIC_SLACK__ENABLED", raising=False)
    incident = history["blocked"]
    message = store.enqueue_message(MessageKind.POST, payload={"text": "split"}, now=NOW,
                                    incident_id=incident, channel="#ml-infra")
    off = tmp_path / "off.yaml"
    off.write_text(f"database: {{url: '{db_url}'}}\nslack: {{enabled: false}}\n")
    code, out, _ = cli(capsys, "incidents", "show", str(incident), "--config", str(off))
    assert code == 0
    lines = out.splitlines()
    assert "Messages:    Slack is off (slack.enabled: false): nothing is sent" in lines
    assert f"  #{message} post not sent: Slack is off; it waits in the outbox  #ml-infra" in lines
    assert "pending attempts 0" not in out
    code, out, _ = cli(capsys, "incidents", "show", str(incident), "--database", db_url)
    assert code == 0  # no configuration read: whether Slack is on is not known, the row as it is
    assert f"  #{message} post pending attempts 0  #ml-infra" in out.splitlines()
    monkeypatch.setenv("ZONEMEDIC_SLACK__ENABLED", "true")
    code, out, _ = cli(capsys, "incidents", "show", str(incident), "--config", str(off))
    assert code == 0 and "Slack is off" not in out and "pending attempts 0" in out


FORGED_NAME = "m\n  12:00:00  approve  dana"
FORGED_COMMENT = "\x1b[2J\x07ok\rfine"


def test_show_escapes_control_characters_from_outside(
    capsys: pytest.CaptureFixture[str], db_url: str, store: IncidentStore
) -> None:
    """A Slack display name with a newline used to print a forged second decision line, and a
    comment's escape sequences reached the terminal raw: every line is printable now."""
    incident = store.record_finding(finding("forged", at=NOW)).incident.id
    store.transition(incident, S.OPEN, S.AWAITING_APPROVAL, actor="agent", now=NOW)
    store.add_event(incident, EventKind.NOTE, now=NOW, actor="U9\rzonemedic",
                    detail={"refused": "approve", "reason": "no\nway"})
    store.record_decision(incident, DecisionOutcome.APPROVE, now=NOW, comment=FORGED_COMMENT,
                          actor=Actor("U9", FORGED_NAME, DecisionSource.SLACK))
    code, out, err = cli(capsys, "incidents", "show", str(incident), "--database", db_url)
    assert (code, err) == (0, "")
    assert not any(c in out for c in "\x1b\x07\r")
    # no forged decision line of its own: the name is shown escaped, on the real one's line
    assert not [line for line in out.splitlines() if line.startswith("  12:00:00")], out
    assert ('approve  m\\n  12:00:00  approve  dana (U9) via slack  "\\x1b[2J\\x07ok\\rfine"'
            in out), out
    assert "U9\\rzonemedic" in out and "reason=no\\nway" in out
    # the decision's answer names the winner: one printable line too
    code, out, err = cli(capsys, "incidents", "reject", str(incident), "--by", "x",
                         "--database", db_url)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "already approved by m\\n  12:00:00  approve  dana (via slack)" in err


def test_show_names_a_malformed_diagnosis_and_json_still_prints_it(
        capsys: pytest.CaptureFixture[str], db_url: str, store: IncidentStore,
        history: dict[str, int]) -> None:
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE incidents SET diagnosis = :d WHERE id = :id"),
                     {"d": json.dumps({"zones": ["zone-a"]}), "id": history["old"]})
    code, out, err = cli(capsys, "incidents", "show", str(history["old"]), "--database", db_url)
    assert (code, out) == (1, "")
    assert err == (f"zonemedic: incident {history['old']} cannot be read: column diagnosis: "
                   "diagnosis.zones: expected an object, got list\n")
    code, out, _ = cli(capsys, "incidents", "show", str(history["old"]), "--database", db_url,
                       "--output", "json")
    assert code == 0 and json.loads(out)["diagnosis"] == {"zones": ["zone-a"]}
