"""The admission records in the store: decisions listed and summarised, a group's kept decision,
the shared serving certificate (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

from agent.model.admission import AdmissionOutcome, AdmissionQuery, AdmissionRecord
from agent.store.admissions import RENEW_BEFORE, StoredCertificate
from agent.store.repository import IncidentStore
from tests.store.helpers import T0, finding, minutes

HOUR = timedelta(hours=1)


def record(name: str, outcome: AdmissionOutcome, *, at_minutes: float, zone: str | None = "a",
           namespace: str = "ml") -> AdmissionRecord:  # fmt: skip
    return AdmissionRecord(
        cluster="prod", request_uid=f"uid-{name}", decided_at=T0 + minutes(at_minutes),
        job_kind="PyTorchJob", job_namespace=namespace, job_name=name, object_kind="PyTorchJob",
        object_name=name, outcome=outcome, zone=zone, mode="enforce",
        warning=f"zonemedic: {outcome.value} {name}",
    )  # fmt: skip


def test_decisions_are_listed_newest_first_and_filtered(store: IncidentStore) -> None:
    store.record_admission(record("one", AdmissionOutcome.PLACED, at_minutes=1))
    store.record_admission(record("two", AdmissionOutcome.NO_ZONE, at_minutes=2, zone=None))
    store.record_admission(record("three", AdmissionOutcome.PLACED, at_minutes=3, namespace="x"))
    assert [r.job_name for r in store.list_admissions()] == ["three", "two", "one"]
    placed = store.list_admissions(AdmissionQuery(outcome=AdmissionOutcome.PLACED))
    assert [r.job_name for r in placed] == ["three", "one"]
    assert [r.job_name for r in store.list_admissions(AdmissionQuery(namespace="x"))] == ["three"]
    recent = store.list_admissions(AdmissionQuery(since=T0 + minutes(2)))
    assert [r.job_name for r in recent] == ["three", "two"]
    (two,) = [r for r in store.list_admissions() if r.job_name == "two"]
    assert two.zone is None and two.decided_at == T0 + minutes(2)
    assert two.to_dict()["outcome"] == "no_zone"


def test_restarts_avoided_are_the_placed_jobs_no_incident_was_opened_for_after(
    store: IncidentStore,
) -> None:
    store.record_admission(record("clean", AdmissionOutcome.PLACED, at_minutes=1))
    store.record_admission(record("split-anyway", AdmissionOutcome.PLACED, at_minutes=1))
    store.record_admission(record("warned", AdmissionOutcome.WARNED, at_minutes=1))
    store.record_finding(finding("split-anyway", at=T0 + minutes(5)))
    store.record_finding(finding("clean", at=T0 - minutes(60)))  # an incident before: not after
    summary = store.admission_summary(since=T0, now=T0 + HOUR)
    assert (summary.placed, summary.restarts_avoided) == (2, 1)
    assert summary.by_outcome == {"placed": 2, "warned": 1}
    assert summary.line() == "2 job(s) placed at admission this week, 1 restart(s) avoided"
    assert store.admission_summary(since=T0 + HOUR, now=T0 + 2 * HOUR).placed == 0


def test_a_groups_first_decision_is_kept_and_the_first_writer_wins(store: IncidentStore) -> None:
    kept = dict(cluster="prod", namespace="ml", group="lab")
    assert store.kept_group_zone(**kept, now=T0, memory=HOUR) is None
    first = store.keep_group_zone(**kept, zone="a", object_kind="Deployment", object_name="coord",
                                  now=T0, memory=HOUR)  # fmt: skip
    second = store.keep_group_zone(**kept, zone="b", object_kind="Deployment", object_name="w",
                                   now=T0 + minutes(1), memory=HOUR)  # fmt: skip
    assert (first, second) == ("a", "a")
    assert store.kept_group_zone(**kept, now=T0 + minutes(30), memory=HOUR) == "a"
    # past its memory the group decides afresh
    assert store.kept_group_zone(**kept, now=T0 + 2 * HOUR, memory=HOUR) is None
    again = store.keep_group_zone(**kept, zone="b", object_kind="Deployment", object_name="w",
                                  now=T0 + 2 * HOUR, memory=HOUR)  # fmt: skip
    assert again == "b"


def test_every_replica_serves_the_one_kept_certificate(store: IncidentStore) -> None:
    made: list[str] = []

    def make(tag: str) -> StoredCertificate:
        made.append(tag)
        return StoredCertificate(f"ca-{tag}", f"cert-{tag}", f"key-{tag}", T0 + timedelta(days=365))

    first = store.shared_certificate(cluster="prod", now=T0, make=lambda: make("1"))
    second = store.shared_certificate(cluster="prod", now=T0, make=lambda: make("2"))
    assert first == second and first.cert_pem == "cert-1" and made == ["1"]
    # close to its end, the next start makes a new one
    late = T0 + timedelta(days=365) - RENEW_BEFORE
    renewed = store.shared_certificate(cluster="prod", now=late, make=lambda: make("3"))
    assert renewed.cert_pem == "cert-3"
