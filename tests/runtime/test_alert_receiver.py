"""The webhook remembers an alert as seen only once it is stored: a re-send of an alert whose storing
failed (store away, shutting down) is handled again, a re-send of a stored one is a duplicate; the
same alert in two concurrent requests is stored once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import orjson
import pytest

from agent.errors import UnavailableError
from agent.model.job import JobRef
from agent.model.workload import JobKind
from agent.runtime.alerts import AlertOutcome, AlertReceiver
from agent.sources.alertmanager import Alert

RESNET = JobRef(JobKind.PYTORCH, "ml", "resnet")


def body(*fingerprints: str) -> bytes:
    alerts = [
        {"labels": {"alertname": "Slow", "namespace": "ml", "created_by_name": "resnet"}, "fingerprint": f}
        for f in fingerprints
    ]
    return orjson.dumps({"status": "firing", "alerts": alerts})


class Store:
    """What `on_alert` does with an alert: store it, or fail as told per fingerprint."""

    def __init__(self) -> None:
        self.stored: list[str] = []
        self.failing: dict[str, Callable[[], bool]] = {}

    def on_alert(self, alert: Alert, jobs: list[JobRef]) -> bool:
        fail = self.failing.get(alert.fingerprint)
        if fail is not None and not fail():
            return False
        self.stored.append(alert.fingerprint)
        return True


def receiver(store: Store, *, wait: float = 5.0) -> AlertReceiver:
    return AlertReceiver(
        jobs_named=lambda ns, name: [RESNET] if (ns, name) == ("ml", "resnet") else [],
        job_of_pod=lambda ns, pod: None,
        ready=lambda: True,
        on_alert=store.on_alert,
        wait=wait,
    )


def unavailable() -> bool:
    raise UnavailableError("database away")


def shutting_down() -> bool:
    return False


@pytest.mark.parametrize(
    ("failure", "error"),
    [(unavailable, "the incident store cannot take alerts now; retry later"),
     (shutting_down, "the agent is shutting down; retry later")],
)
def test_an_alert_not_stored_is_handled_again_when_re_sent(failure: Callable[[], bool], error: str) -> None:
    store = Store()
    r = receiver(store)
    store.failing["b"] = failure
    refused = r.handle(body("a", "b", "c"))
    assert refused == AlertOutcome(503, {"error": error})
    assert store.stored == ["a"]  # alerts before the failing one are stored; the rest wait
    del store.failing["b"]
    accepted = r.handle(body("a", "b", "c"))  # Alertmanager re-sends the whole group
    assert accepted.status == 200
    assert (accepted.body["accepted"], accepted.body["duplicates"]) == (2, 1)
    assert store.stored == ["a", "b", "c"]
    assert r.handle(body("a", "b", "c")).body["duplicates"] == 3


def _concurrently(r: AlertReceiver, store: Store, first: Callable[[], bool]) -> tuple[AlertOutcome, AlertOutcome]:
    """Request 1 is inside `on_alert` (held there) when request 2 with the same alert arrives."""
    inside, release = threading.Event(), threading.Event()

    def held() -> bool:
        inside.set()
        release.wait(10)
        store.failing.pop("a")
        return first()

    store.failing["a"] = held
    results: dict[int, AlertOutcome] = {}
    one = threading.Thread(target=lambda: results.setdefault(1, r.handle(body("a"))))
    one.start()
    assert inside.wait(10)
    two = threading.Thread(target=lambda: results.setdefault(2, r.handle(body("a"))))
    two.start()
    if r.wait >= 1:  # request 2 waits for request 1 ...
        deadline = time.monotonic() + 30
        while r.waiting != 1:
            assert time.monotonic() < deadline, "request 2 never waited"
            time.sleep(0.005)
    else:  # ... or gives up first
        two.join(10)
        assert not two.is_alive()
    release.set()
    one.join(10)
    two.join(10)
    return results[1], results[2]


def test_the_same_alert_in_two_requests_is_stored_once() -> None:
    store = Store()
    first, second = _concurrently(receiver(store), store, lambda: True)
    assert (first.status, first.body["accepted"]) == (200, 1)
    assert (second.status, second.body["duplicates"]) == (200, 1)  # waited, then a duplicate
    assert store.stored == ["a"]


def test_a_waiting_request_stores_the_alert_when_the_first_one_failed() -> None:
    store = Store()
    first, second = _concurrently(receiver(store), store, unavailable)
    assert first.status == 503
    assert (second.status, second.body["accepted"]) == (200, 1)
    assert store.stored == ["a"]


def test_a_request_does_not_wait_forever_for_another() -> None:
    store = Store()
    first, second = _concurrently(receiver(store, wait=0.05), store, lambda: True)
    assert first.status == 200
    assert second == AlertOutcome(503, {"error": "alert Slow is being stored by another request; retry later"})
    assert store.stored == ["a"]
