"""The outbox on SQLite and PostgreSQL: enqueue and dedupe, claims with tokens and leases, backoff
and dead messages, the `posted` event, order per incident, and two deliverers claiming at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from agent.model.incident import ClaimedMessage
from agent.model.lifecycle import EventKind, MessageKind, MessageStatus
from agent.store.errors import InvalidRecordError, MessageNotFoundError
from agent.store.repository import IncidentStore, OutboxPolicy, open_store
from tests.store.helpers import T0, finding
from tests.support.databases import TEST_DB_SETTINGS

LEASE = timedelta(seconds=30)


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


def _ids(claims: list[ClaimedMessage]) -> list[int]:
    return [c.message.id for c in claims]


def _status(store: IncidentStore, incident_id: int, message_id: int) -> MessageStatus:
    [found] = [m for m in store.get_incident(incident_id).messages if m.id == message_id]
    return found.status


def test_enqueue_claim_backoff_dead_and_posted(store: IncidentStore) -> None:
    store.outbox_policy = OutboxPolicy(base=seconds(5), cap=seconds(30), max_attempts=3)
    incident_id = store.record_finding(finding()).incident.id
    key = f"post:{incident_id}"
    first = store.enqueue_message(MessageKind.POST, payload={"text": "split"}, now=T0,
                                  incident_id=incident_id, channel="#ml", dedupe_key=key)
    again = store.enqueue_message(MessageKind.POST, payload={"text": "split"}, now=T0,
                                  incident_id=incident_id, channel="#ml", dedupe_key=key)
    assert first == again
    [claim] = store.claim_messages(now=T0, lease=LEASE)
    assert claim.message.id == first and claim.claimed_until == T0 + LEASE
    assert claim.message.payload == {"text": "split"}
    assert store.claim_messages(now=T0 + seconds(29), lease=LEASE) == []  # held
    failed = store.mark_failed(first, token=claim.token, now=T0 + seconds(1), error="ratelimited")
    assert failed is not None
    assert failed.status is MessageStatus.PENDING and failed.attempts == 1
    assert failed.next_attempt_at == T0 + seconds(6) and failed.last_error == "ratelimited"
    assert store.claim_messages(now=T0 + seconds(5), lease=LEASE) == []  # backing off
    [retry] = store.claim_messages(now=T0 + seconds(6), lease=LEASE)  # released by mark_failed
    assert retry.message.id == first and retry.token != claim.token
    second = store.mark_failed(first, token=retry.token, now=T0 + seconds(7), error="500")
    assert second is not None and second.next_attempt_at == T0 + seconds(17)
    [last] = store.claim_messages(now=T0 + seconds(17), lease=LEASE)
    dead = store.mark_failed(first, token=last.token, now=T0 + seconds(20), error="500 again")
    assert dead is not None
    assert dead.status is MessageStatus.DEAD and dead.last_error == "500 again"
    assert store.claim_messages(now=T0 + timedelta(days=1), lease=LEASE) == []

    other = store.enqueue_message(MessageKind.POST, payload={"text": "x"}, now=T0,
                                  incident_id=incident_id)
    [claim] = store.claim_messages(now=T0 + seconds(30), lease=LEASE)
    assert store.mark_delivered(other, token=claim.token, now=T0 + seconds(31),
                                external_ref="1700000000.0001")
    detail = store.get_incident(incident_id)
    assert detail.events[-1].kind is EventKind.POSTED
    assert detail.events[-1].detail["ref"] == "1700000000.0001"
    by_id = {m.id: m for m in detail.messages}
    assert by_id[other].status is MessageStatus.DELIVERED and by_id[other].attempts == 1
    assert by_id[first].status is MessageStatus.DEAD and by_id[first].attempts == 3


def test_an_expired_claim_cannot_post_twice_or_revive_a_dead_message(store: IncidentStore) -> None:
    store.outbox_policy = OutboxPolicy(max_attempts=1)
    incident_id = store.record_finding(finding()).incident.id
    posted = store.enqueue_message(MessageKind.POST, payload={}, now=T0, incident_id=incident_id)
    [slow] = store.claim_messages(now=T0, lease=LEASE)
    [taken] = store.claim_messages(now=T0 + LEASE, lease=LEASE)  # the slow claim expired
    assert taken.message.id == posted and taken.token != slow.token
    assert store.mark_delivered(posted, token=taken.token, now=T0 + seconds(31))
    assert not store.mark_delivered(posted, token=slow.token, now=T0 + seconds(40))
    assert not store.mark_delivered(posted, token=taken.token, now=T0 + seconds(41))  # done
    assert store.mark_failed(posted, token=slow.token, now=T0 + seconds(41), error="late") is None
    detail = store.get_incident(incident_id)
    assert [e.kind for e in detail.events].count(EventKind.POSTED) == 1
    assert detail.messages[0].status is MessageStatus.DELIVERED

    doomed = store.enqueue_message(MessageKind.UPDATE, payload={}, now=T0, incident_id=incident_id)
    [slow] = store.claim_messages(now=T0 + seconds(50), lease=LEASE)
    [taken] = store.claim_messages(now=T0 + seconds(80), lease=LEASE)
    died = store.mark_failed(doomed, token=taken.token, now=T0 + seconds(81), error="gone")
    assert died is not None and died.status is MessageStatus.DEAD
    assert not store.mark_delivered(doomed, token=slow.token, now=T0 + seconds(82))
    assert store.mark_failed(doomed, token=slow.token, now=T0 + seconds(82), error="x") is None
    assert _status(store, incident_id, doomed) is MessageStatus.DEAD


def test_an_expired_claim_nobody_took_over_still_completes(store: IncidentStore) -> None:
    message_id = store.enqueue_message(MessageKind.DIGEST, payload={}, now=T0)
    [claim] = store.claim_messages(now=T0, lease=LEASE)
    assert store.mark_delivered(message_id, token=claim.token, now=T0 + LEASE + seconds(5))
    assert store.claim_messages(now=T0 + timedelta(hours=1), lease=LEASE) == []


def test_order_per_incident(store: IncidentStore) -> None:
    x = store.record_finding(finding("x")).incident.id
    y = store.record_finding(finding("y")).incident.id
    x1, x2, x3 = (store.enqueue_message(MessageKind.UPDATE, payload={"n": n}, now=T0,
                                        incident_id=x) for n in range(3))
    y1 = store.enqueue_message(MessageKind.POST, payload={}, now=T0, incident_id=y)
    digest = store.enqueue_message(MessageKind.DIGEST, payload={}, now=T0)
    claims = {c.message.id: c for c in store.claim_messages(now=T0, lease=LEASE)}
    assert sorted(claims) == sorted([x1, y1, digest])  # only the first of each incident
    assert store.mark_failed(x1, token=claims[x1].token, now=T0, error="429") is not None
    assert store.mark_delivered(y1, token=claims[y1].token, now=T0)
    # x1 backs off for 5 s: x2 waits behind it rather than overtaking it.
    assert store.claim_messages(now=T0 + seconds(1), lease=LEASE) == []
    [again] = store.claim_messages(now=T0 + seconds(5), lease=LEASE)
    assert again.message.id == x1
    assert store.mark_delivered(x1, token=again.token, now=T0 + seconds(5))
    [nxt] = store.claim_messages(now=T0 + seconds(5), lease=LEASE)
    assert nxt.message.id == x2 and nxt.message.payload == {"n": 1}
    # A dead message no longer holds its incident's queue.
    store.outbox_policy = OutboxPolicy(max_attempts=1)
    dead = store.mark_failed(x2, token=nxt.token, now=T0 + seconds(6), error="channel gone")
    assert dead is not None and dead.status is MessageStatus.DEAD
    assert _ids(store.claim_messages(now=T0 + seconds(6), lease=LEASE)) == [x3]


@pytest.fixture
def second_store(db_url: str) -> Iterator[IncidentStore]:
    other = open_store(TEST_DB_SETTINGS, url=db_url)  # another replica: its own engine and pool
    yield other
    other.close()


def test_two_deliverers_never_claim_the_same_message(
    store: IncidentStore, second_store: IncidentStore
) -> None:
    incidents = [store.record_finding(finding(f"job-{n}")).incident.id for n in range(4)]
    expected = [store.enqueue_message(MessageKind.DIGEST, payload={"n": n}, now=T0)
                for n in range(40)]
    expected += [store.enqueue_message(MessageKind.UPDATE, payload={}, now=T0, incident_id=i)
                 for i in incidents for _ in range(3)]
    barrier = threading.Barrier(2)
    claimed: dict[str, list[int]] = {"a": [], "b": []}
    errors: list[BaseException] = []

    def deliver(name: str, deliverer: IncidentStore) -> None:
        try:
            barrier.wait(timeout=30)
            deadline = time.monotonic() + 60
            # Claim until every message was claimed by one of the two (order per incident means
            # one deliverer may find nothing while the other holds an incident's earlier message).
            while len(claimed["a"]) + len(claimed["b"]) < len(expected):
                assert time.monotonic() < deadline, "the deliverers stalled"
                for c in deliverer.claim_messages(now=T0, limit=3, lease=timedelta(hours=1)):
                    claimed[name].append(c.message.id)
                    assert deliverer.mark_delivered(c.message.id, token=c.token, now=T0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=deliver, args=(name, s))
               for name, s in (("a", store), ("b", second_store))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a deliverer did not finish"
    assert errors == []
    everything = claimed["a"] + claimed["b"]
    assert sorted(everything) == sorted(expected)  # each message claimed exactly once
    assert set(claimed["a"]).isdisjoint(claimed["b"])


def test_bad_claims_and_unknown_messages(store: IncidentStore) -> None:
    message_id = store.enqueue_message(MessageKind.DIGEST, payload={}, now=T0)
    with pytest.raises(InvalidRecordError, match="positive lease"):
        store.claim_messages(now=T0, lease=timedelta(0))
    with pytest.raises(InvalidRecordError, match="positive lease and limit"):
        store.claim_messages(now=T0, limit=0, lease=LEASE)
    [claim] = store.claim_messages(now=T0, lease=LEASE)  # the refusals claimed nothing
    assert claim.message.id == message_id
    assert not store.mark_delivered(message_id, token="not-the-token", now=T0)
    with pytest.raises(MessageNotFoundError):
        store.mark_delivered(message_id + 100, token=claim.token, now=T0)
    with pytest.raises(MessageNotFoundError):
        store.mark_failed(message_id + 100, token=claim.token, now=T0, error="x")
