"""Playbook firings into the outbox of a real SQLite store: a firing the store refused (another
connection holds the write lock) is kept and queued once the store is back, exactly once (dedupe
keys); one the store rejects for good (its incident gone) is dropped instead of blocking the rest."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.approval.requests import ApprovalRequests
from agent.model.document import IncidentDocument, UtilizationEvidence
from agent.model.finding import Finding
from agent.model.incident import IncidentSummary
from agent.model.job import JobRef
from agent.model.lifecycle import MessageKind, RemediationActionKind
from agent.model.verdict import Verdict
from agent.model.workload import JobKind
from agent.playbook.loader import load_playbooks
from agent.playbook.matching import Event
from agent.playbook.model import TriggerKind
from agent.remediation.plan import Refusal
from agent.remediation.preview_action import preview_action
from agent.runtime.plan_previews import PlanPreviews, Preview, placement_key
from agent.runtime.playbooks import PlaybookActions
from agent.settings import Settings
from agent.sources.cache import ClusterCache
from agent.sources.kubeapi import KubeApi
from agent.store.errors import StoreUnavailableError
from agent.store.repository import IncidentStore, open_store
from tests.store.helpers import finding
from tests.support.databases import TEST_DB_SETTINGS

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
KEY = JobRef(JobKind.PYTORCH, "ml", "resnet")


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[IncidentStore]:
    template: Path = request.getfixturevalue("sqlite_template")  # a migrated database
    db = tmp_path / "zm.db"
    db.write_bytes(template.read_bytes())
    settings = replace(TEST_DB_SETTINGS, write_retry=timedelta(milliseconds=300),
                       busy_timeout=timedelta(milliseconds=100))
    s = open_store(settings, url=f"sqlite:///{db}")
    yield s
    s.close()


class WriteLock:
    def __init__(self, store: IncidentStore) -> None:
        self.path = store.engine.url.database or ""

    def __enter__(self) -> None:
        self.conn = sqlite3.connect(self.path, isolation_level=None)
        self.conn.execute("BEGIN EXCLUSIVE")

    def __exit__(self, *exc: object) -> None:
        self.conn.execute("ROLLBACK")
        self.conn.close()


def actions(store: IncidentStore) -> PlaybookActions:
    return PlaybookActions(
        playbooks=load_playbooks(REPO / "playbooks"), store=store, cache=ClusterCache(),
        cluster="prod", channel="#default", approval_ttl=timedelta(minutes=30), now=lambda: NOW,
    )


def document(*, remediable: bool = False, target_zone: str | None = None,
             zones: dict[str, int] | None = None) -> IncidentDocument:
    """The typed document of a blocked split of `KEY` (no metrics configured)."""
    found = Finding(KEY, Verdict.ZONE_SPLIT_BLOCKED, zones or {}, None, remediable=remediable,
                    target_zone=target_zone)  # fmt: skip
    return IncidentDocument.of_finding(found, uid=None, metrics=UtilizationEvidence("none"))


def split(actions: PlaybookActions) -> Event:
    return Event(TriggerKind.ZONE_SPLIT, actions.subject(KEY, "zone_split_blocked", gpus=4))


def posts(store: IncidentStore, incident: IncidentSummary) -> list[str]:
    messages = store.get_incident(incident.id).messages
    return sorted(str(m.payload["action"]) for m in messages if m.kind is MessageKind.POST)


def test_a_refused_firing_is_queued_once_the_store_is_back(store: IncidentStore) -> None:
    incident = store.record_finding(finding("resnet")).incident
    a = actions(store)
    with WriteLock(store), pytest.raises(StoreUnavailableError):
        a.fire(split(a), incident, document())
    assert a.unfired == 1 and posts(store, incident) == []
    assert a.retry_unfired() == 1
    assert a.unfired == 0 and posts(store, incident) == ["notify", "propose_colocation"]
    a.fire(split(a), incident, document())  # fired again: queued once
    assert a.retry_unfired() == 0
    assert posts(store, incident) == ["notify", "propose_colocation"]


def test_while_the_store_still_refuses_the_firing_stays(store: IncidentStore) -> None:
    incident = store.record_finding(finding("resnet")).incident
    a = actions(store)
    with WriteLock(store):
        with pytest.raises(StoreUnavailableError):
            a.fire(split(a), incident, document())
        with pytest.raises(StoreUnavailableError):
            a.retry_unfired()
        assert a.unfired == 1
    assert a.retry_unfired() == 1 and len(posts(store, incident)) == 2


def test_a_firing_rejected_for_good_is_dropped(store: IncidentStore) -> None:
    incident = store.record_finding(finding("resnet")).incident
    gone = replace(incident, id=incident.id + 1000)  # an incident that is not (or no longer) there
    a = actions(store)
    with WriteLock(store):
        for target in (gone, incident):
            with pytest.raises(StoreUnavailableError):
                a.fire(split(a), target, document())
    assert a.unfired == 2
    assert a.retry_unfired() == 2  # the gone one logged and dropped, the other queued
    assert a.unfired == 0 and posts(store, incident) == ["notify", "propose_colocation"]


def test_a_preview_is_recorded_before_the_messages_once_even_when_the_store_refused(
    store: IncidentStore,
) -> None:

    incident = store.record_finding(finding("resnet")).incident
    previews = PlanPreviews(KubeApi(None), store, now=lambda: NOW)
    a = PlaybookActions(
        playbooks=load_playbooks(REPO / "playbooks"), store=store, cache=ClusterCache(),
        cluster="prod", channel="#default", approval_ttl=timedelta(minutes=30), now=lambda: NOW,
        approvals=ApprovalRequests(store, settings=Settings(), now=lambda: NOW),
        previews=previews,
    )  # fmt: skip
    zones = {"zone-a": 3, "zone-b": 1}
    refusal = Refusal(JobRef(JobKind.PYTORCH, "ml", "resnet"), "zone zone-a has no room")
    preview = Preview(preview_action(refusal, zones=zones, target_zone="zone-a"),
                      placement_key(None, "zone-a", zones))  # fmt: skip
    with WriteLock(store), pytest.raises(StoreUnavailableError):
        a.fire(split(a), incident, document(remediable=True, target_zone="zone-a"),
               preview=preview)
    assert a.retry_unfired() == 1
    detail = store.get_incident(incident.id)
    plans = [x for x in detail.actions if x.kind is RemediationActionKind.PLAN]
    assert len(plans) == 1 and plans[0].payload["refusal"] == "zone zone-a has no room"
    first_post = min((m for m in detail.messages), key=lambda m: m.id)
    assert first_post.payload["finding"]["proposed_fix"]["refusal"] == "zone zone-a has no room"
    assert detail.incident.status.value == "open", "a refused fix is not put up for approval"


# --------------------------------------------------------------------------------------------
# declared groups, and incidents no playbook posts


def test_a_declared_group_is_posted_whatever_its_pods_request(store: IncidentStore) -> None:
    record = replace(finding("lab", namespace="ml-lab"), kind="Group")
    incident = store.record_finding(record).incident
    a = actions(store)
    group = JobRef(JobKind.GROUP, "ml-lab", "lab")  # simulates its GPUs: a taint and a node selector
    a.fire(Event(TriggerKind.ZONE_SPLIT, a.subject(group, "zone_split_blocked", gpus=0)),
           incident, document())
    assert posts(store, incident) == ["notify", "propose_colocation"]
    assert not [e for e in store.get_incident(incident.id).events if "not_posted" in e.detail]
    assert a.not_posted([incident]) == {}


def test_an_incident_no_playbook_posts_says_why_in_show_and_the_digest(store: IncidentStore) -> None:
    from agent.commands.incidents import render_detail

    incident = store.record_finding(finding("cpu-only")).incident
    a = actions(store)
    a.fire(Event(TriggerKind.ZONE_SPLIT, a.subject(replace(KEY, name="cpu-only"),
                                                   "zone_split_blocked", gpus=0)),
           incident, document())
    assert posts(store, incident) == []
    reason = ("playbook zone-split: the job's pods request 0 GPU(s), fewer than "
              "conditions.min_gpus 1")
    detail = store.get_incident(incident.id)
    assert [e.detail["not_posted"] for e in detail.events if "not_posted" in e.detail] == [reason]
    assert f"Not posted:  no playbook posts it: {reason}" in render_detail(detail).splitlines()
    digest = next(p for p in a.playbooks if p.name == "daily-digest")
    assert a.post_digest(digest, {"at": NOW.isoformat(), "jobs": 1}) == 1
    [claimed] = store.claim_messages(now=NOW, lease=timedelta(minutes=1))
    assert claimed.message.kind is MessageKind.DIGEST
    assert claimed.message.payload["not_posted"] == {str(incident.id): reason}


# --------------------------------------------------------------------------------------------
# a firing as data: written with its incident by the store's batch


def _auto(playbooks: list[Any], namespace: str) -> list[Any]:
    """The playbooks with `namespace` opted in to automatic co-location."""
    out = []
    for pb in playbooks:
        steps = tuple(
            replace(step, approval=replace(step.approval, auto_namespaces=(namespace,)))
            if step.approval is not None else step for step in pb.actions)  # fmt: skip
        out.append(replace(pb, actions=steps))
    return out


def _fresh(request: pytest.FixtureRequest, path: Path) -> IncidentStore:
    template: Path = request.getfixturevalue("sqlite_template")
    path.write_bytes(template.read_bytes())
    return open_store(TEST_DB_SETTINGS, url=f"sqlite:///{path}")


REMEDIABLE = document(remediable=True, target_zone="zone-a", zones={"zone-a": 3, "zone-b": 1})
NO_ROOM = Preview(
    preview_action(Refusal(JobRef(JobKind.PYTORCH, "ml", "resnet"), "zone zone-a has no room"),
                   zones={"zone-a": 3, "zone-b": 1}, target_zone="zone-a"),
    placement_key(None, "zone-a", {"zone-a": 3, "zone-b": 1}))  # fmt: skip


@pytest.mark.parametrize(
    ("case", "document", "preview", "gpus", "status", "writes"),
    [
        ("approval requested", REMEDIABLE, None, 4, "awaiting_approval", (0, 2, 2)),
        ("the fix refused: previewed, not put up", REMEDIABLE, NO_ROOM, 4, "open", (1, 2, 2)),
        ("not posted: no GPUs", document(), None, 0, "open", (0, 2, 0)),
        ("not remediable", document(), None, 4, "open", (0, 1, 2)),
    ],
)
def test_a_follow_up_written_with_its_incident_is_what_fire_writes(
    request: pytest.FixtureRequest, tmp_path: Path, case: str, document: IncidentDocument,
    preview: Preview | None, gpus: int, status: str, writes: tuple[int, int, int],
) -> None:
    """`writes`: (actions, events, messages) of the incident."""
    details = []
    for how in ("fire", "follow_up"):
        store = _fresh(request, tmp_path / f"{how}.db")
        try:
            a = PlaybookActions(
                playbooks=load_playbooks(REPO / "playbooks"), store=store, cache=ClusterCache(),
                cluster="prod", channel="#default", approval_ttl=timedelta(minutes=30),
                now=lambda: NOW, previews=PlanPreviews(KubeApi(None), store, now=lambda: NOW),
                approvals=ApprovalRequests(store, settings=Settings(), now=lambda: NOW),
            )  # fmt: skip
            event = Event(TriggerKind.ZONE_SPLIT, a.subject(KEY, "zone_split_blocked", gpus=gpus))
            if how == "fire":
                incident = store.record_finding(finding("resnet")).incident
                a.fire(event, incident, document, preview=preview)
            else:
                ups: list[Any] = []

                def follow(_i: int, outcome: Any, a: PlaybookActions = a, ups: list[Any] = ups,
                           event: Event = event) -> Any:  # fmt: skip
                    ups.append(a.follow_up(event, outcome.incident, document, preview=preview))
                    return ups[-1]

                (outcome,) = store.record_findings([finding("resnet")], follow=follow)
                assert ups[-1] is not None, case
                incident = outcome.incident
            details.append(store.get_incident(incident.id))
        finally:
            store.close()
    fired, written = details
    assert fired.incident.status.value == status, case
    assert (len(fired.actions), len(fired.events), len(fired.messages)) == writes, case
    assert written.incident == fired.incident, case
    assert [(e.kind, e.actor, e.detail) for e in written.events] == [
        (e.kind, e.actor, e.detail) for e in fired.events], case  # fmt: skip
    assert [(m.kind, m.channel, m.payload, m.dedupe_key) for m in written.messages] == [
        (m.kind, m.channel, m.payload, m.dedupe_key) for m in fired.messages], case  # fmt: skip
    assert [(x.kind, x.payload, x.message) for x in written.actions] == [
        (x.kind, x.payload, x.message) for x in fired.actions], case  # fmt: skip


def test_an_automatic_approval_is_left_to_fire(store: IncidentStore) -> None:
    a = PlaybookActions(
        playbooks=_auto(load_playbooks(REPO / "playbooks"), "ml"), store=store,
        cache=ClusterCache(), cluster="prod", channel="#default",
        approval_ttl=timedelta(minutes=30), now=lambda: NOW,
        approvals=ApprovalRequests(store, settings=Settings(), now=lambda: NOW),
    )  # fmt: skip
    incident = store.record_finding(finding("resnet")).incident
    event = Event(TriggerKind.ZONE_SPLIT, a.subject(KEY, "zone_split_blocked", gpus=4))
    assert a.follow_up(event, incident, REMEDIABLE) is None
    a.fire(event, incident, REMEDIABLE)
    assert store.get_incident(incident.id).incident.status.value == "approved"
