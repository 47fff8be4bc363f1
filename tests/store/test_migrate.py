"""Migrations: the migrated schema equals the models (no autogenerate drift) on both backends;
upgrade is idempotent and safe from two starters at once; start-up migrates or refuses a stale
schema; the scripts are found beside the package or where `database.migrations_dir` says."""

from __future__ import annotations

import shutil
import sys
import threading
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import text

import agent
from agent.settings import DatabaseSettings, Settings
from agent.store.engine import make_engine
from agent.store.errors import SchemaOutOfDateError, StoreError
from agent.store.migrate import (
    alembic_config,
    candidate_dirs,
    current_revision,
    head_revision,
    migrations_dir,
    schema_diff,
    upgrade,
    upgrade_on_start,
)
from agent.store.repository import IncidentStore
from tests.store.helpers import CHAIN, HEAD

REPO = Path(__file__).resolve().parents[2]


def test_migrated_schema_equals_models(store: IncidentStore) -> None:
    assert current_revision(store.engine) == head_revision(DatabaseSettings())
    assert schema_diff(store.engine) == []


def test_drift_is_detected(store: IncidentStore) -> None:
    with store.engine.begin() as conn:
        conn.execute(text("DROP INDEX ix_incidents_job"))
    diff = schema_diff(store.engine)
    assert [d[0] for d in diff] == ["add_index"]
    assert diff[0][1].name == "ix_incidents_job"


def test_upgrade_from_empty_and_again(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        assert current_revision(engine) is None
        assert upgrade(engine, DatabaseSettings()) == HEAD
        assert upgrade(engine, DatabaseSettings()) == HEAD
        assert schema_diff(engine) == []
    finally:
        engine.dispose()


def test_upgrade_on_start_migrates_or_refuses(empty_url: str) -> None:
    stale = Settings(database=DatabaseSettings(url=empty_url, migrate_on_start=False))
    with pytest.raises(SchemaOutOfDateError, match=f"revision none, this zonemedic needs {HEAD}.*db upgrade"):
        upgrade_on_start(stale)
    store = upgrade_on_start(replace(stale, database=replace(stale.database,
                                                              migrate_on_start=True)))
    try:
        assert store.ready()
        assert current_revision(store.engine) == HEAD
    finally:
        store.close()
    checked = upgrade_on_start(stale)  # at head: the check passes
    checked.close()


def test_two_starters_migrate_once(empty_url: str) -> None:
    settings = Settings(database=DatabaseSettings(url=empty_url))
    errors: list[BaseException] = []
    stores: list[IncidentStore] = []

    def start() -> None:
        try:
            stores.append(upgrade_on_start(settings))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == [] and len(stores) == 2
    assert schema_diff(stores[0].engine) == []
    for s in stores:
        s.close()


def test_migrations_dir_is_found_beside_the_package_or_configured(tmp_path: Path) -> None:
    assert migrations_dir(DatabaseSettings()) == REPO / "migrations"
    assert migrations_dir(DatabaseSettings(migrations_dir=str(REPO / "migrations"))) == (
        REPO / "migrations"
    )
    with pytest.raises(StoreError, match=f"migration scripts not found at {tmp_path}"):
        migrations_dir(DatabaseSettings(migrations_dir=str(tmp_path)))


def test_installed_wheel_location_is_a_fallback(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A non-editable install has no migrations/ beside the package; a wheel shipping the scripts
    # as data-files puts them under <prefix>/share/zonemedic/migrations.
    fake_package = tmp_path / "site-packages" / "agent" / "__init__.py"
    fake_package.parent.mkdir(parents=True)
    fake_package.touch()
    shared = tmp_path / "prefix" / "share" / "zonemedic" / "migrations"
    shutil.copytree(REPO / "migrations", shared)
    monkeypatch.setattr(agent, "__file__", str(fake_package))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    assert candidate_dirs(DatabaseSettings())[0] == tmp_path / "site-packages" / "migrations"
    assert migrations_dir(DatabaseSettings()) == shared
    assert head_revision(DatabaseSettings()) == HEAD
    shutil.rmtree(shared)
    with pytest.raises(StoreError, match="site-packages/migrations or .*share/zonemedic/migrations"):
        migrations_dir(DatabaseSettings())


def test_revisions_form_one_line() -> None:
    script = ScriptDirectory.from_config(alembic_config(DatabaseSettings()))
    assert script.get_heads() == [HEAD]
    walked = [r.revision for r in script.walk_revisions("base", "heads")]
    assert list(reversed(walked)) == CHAIN


def test_upgrade_keeps_data_and_downgrade_round_trips(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        assert upgrade(engine, DatabaseSettings(), revision="0001") == "0001"
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO incidents (cluster, job_kind, job_namespace, job_name, verdict, "
                "fingerprint, status, severity, opened_at, updated_at, detections, diagnosis) VALUES "
                "('prod', 'PyTorchJob', 'ml', 'resnet', 'zone_split_blocked', 'fp', "
                "'awaiting_approval', 'critical', :t, :t, 1, '{}')"), {"t": "2026-11-01 12:00:00"})
            incident_id = conn.execute(text("SELECT id FROM incidents")).scalar_one()
            conn.execute(text(
                "INSERT INTO outbox_messages (incident_id, kind, status, attempts, "
                "next_attempt_at, created_at, payload) VALUES (:i, 'post', 'pending', 0, :t, :t, "
                "'{}')"),
                {"i": incident_id, "t": "2026-11-01 12:00:00"})
        assert upgrade(engine, DatabaseSettings()) == HEAD
        store = IncidentStore(engine)
        summary = store.get_incident(incident_id).incident
        assert summary.status.value == "awaiting_approval" and summary.approval_deadline is None
        # The old pending message is claimable under the new rules.
        claims = store.claim_messages(now=summary.opened_at, lease=timedelta(seconds=30))
        assert [c.message.incident_id for c in claims] == [incident_id]
        with engine.begin() as conn:
            command.downgrade(alembic_config(DatabaseSettings(), conn), "0001")
        assert current_revision(engine) == "0001"
        assert upgrade(engine, DatabaseSettings()) == HEAD
        assert schema_diff(engine) == []  # indexes (the dedupe one too) survived the round trip
        assert store.get_incident(incident_id).incident.id == incident_id
    finally:
        engine.dispose()


def test_upgrade_to_one_open_incident_per_job_keeps_the_one_under_way(empty_url: str) -> None:
    """A database from before the job index holds several open incidents of one job (one per
    verdict class): the upgrade keeps the one a remediation is under way on (else the newest),
    supersedes the others with a timeline event naming it, and the index then refuses a second."""
    engine = make_engine(empty_url)
    insert = text(
        "INSERT INTO incidents (cluster, job_kind, job_namespace, job_name, verdict, fingerprint, "
        "status, severity, opened_at, updated_at, detections, diagnosis) VALUES ('prod', "
        "'PyTorchJob', 'ml', :name, :verdict, :fp, :status, 'critical', :t, :t, 1, '{}')")
    rows = [("resnet", "zone_split_blocked", "remediating"), ("resnet", "gpu_utilization_drop", "open"),
            ("resnet", "alert", "open"), ("bert", "policy_blocked", "open"),
            ("bert", "zone_split_degraded", "awaiting_approval"), ("gpt", "alert", "open")]
    try:
        assert upgrade(engine, DatabaseSettings(), revision="0003_outbox_claims") == "0003_outbox_claims"
        with engine.begin() as conn:
            for i, (name, verdict, status) in enumerate(rows):
                conn.execute(insert, {"name": name, "verdict": verdict, "fp": f"fp{i}",
                                      "status": status, "t": "2026-11-01 12:00:00"})
        assert upgrade(engine, DatabaseSettings()) == HEAD
        assert schema_diff(engine) == []
        store = IncidentStore(engine)
        listing = store.list_incidents().incidents
        still = sorted((i.name, i.verdict.value) for i in listing if i.closed_at is None)
        assert still == [("bert", "zone_split_degraded"), ("gpt", "alert"),
                         ("resnet", "zone_split_blocked")]
        kept = {i.name: i.id for i in listing if i.closed_at is None}
        for incident in listing:
            if incident.closed_at is None:
                continue
            assert incident.status.value == "superseded"
            (event,) = [e for e in store.get_incident(incident.id).events
                        if e.kind.value == "superseded"]
            assert event.detail["reason"] == (
                f"one open incident per job: incident {kept[incident.name]} is kept open")
        with pytest.raises(Exception, match="(?i)unique"), engine.begin() as conn:
            conn.execute(insert, {"name": "gpt", "verdict": "policy_blocked", "fp": "fp-new",
                                  "status": "open", "t": "2026-11-01 12:00:00"})
    finally:
        engine.dispose()
