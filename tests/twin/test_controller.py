"""The shared controller scaffolding: subscriptions feed the queue, replay, stop and idle."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

import pytest

from agent.twin.clock import TwinClock
from agent.twin.controller import Controller, Subscription, owned_by
from agent.twin.resources import lookup
from agent.twin.store import Store
from agent.twin.watch import WatchEvent
from tests.twin.waiting import eventually

CONFIGMAPS = lookup("configmaps")
SERVICES = lookup("services")


def configmap(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
    }


def service(name: str) -> dict[str, Any]:
    return {**configmap(name), "kind": "Service"}


class Recorder(Controller):
    """Replays config maps, watches services from now on; reconciles by recording the key."""

    def __init__(self, store: Store) -> None:
        super().__init__(store, name="recorder", clock=TwinClock())
        self.seen: list[Hashable] = []
        self.lock = threading.Lock()

    def _subscriptions(self) -> list[Subscription]:
        return [Subscription(CONFIGMAPS, self._on, since="0"), Subscription(SERVICES, self._on)]

    def _on(self, event: WatchEvent) -> None:
        self._queue.add((event.type, event.object["kind"], event.object["metadata"]["name"]))

    def _reconcile(self, key: Hashable) -> float | None:
        with self.lock:
            self.seen.append(key)
        return None

    def recorded(self) -> set[Hashable]:
        with self.lock:
            return set(self.seen)


def test_subscriptions_feed_the_queue_with_and_without_replay() -> None:
    store = Store()
    store.create(CONFIGMAPS, configmap("before"))
    store.create(SERVICES, service("before"))
    recorder = Recorder(store)
    recorder.start()
    try:
        store.create(SERVICES, service("after"))
        expected = {("ADDED", "ConfigMap", "before"), ("ADDED", "Service", "after")}
        assert eventually(lambda: recorder.recorded() == expected and recorder.idle())
        # the service that existed before start is not replayed (since=None)
        assert ("ADDED", "Service", "before") not in recorder.recorded()
    finally:
        recorder.stop()


def test_stop_unsubscribes() -> None:
    store = Store()
    recorder = Recorder(store)
    recorder.start()
    recorder.stop()
    # stop() removed both subscriptions from the store: nothing is left to deliver anything.
    assert store.close_watches() == 0
    store.create(CONFIGMAPS, configmap("late"))
    assert recorder.recorded() == set()
    assert recorder.idle()


def test_get_live_skips_gone_and_terminating_objects() -> None:
    store = Store()
    recorder = Recorder(store)
    store.create(CONFIGMAPS, configmap("here"))
    terminating = configmap("leaving")
    terminating["metadata"]["finalizers"] = ["example.com/hold"]
    store.create(CONFIGMAPS, terminating)
    store.delete(CONFIGMAPS, "leaving", namespace="default")
    assert store.get(CONFIGMAPS, "leaving", namespace="default")["metadata"]["deletionTimestamp"]
    found = recorder._get_live(CONFIGMAPS, "here", namespace="default")
    assert found is not None and found["metadata"]["name"] == "here"
    assert recorder._get_live(CONFIGMAPS, "leaving", namespace="default") is None
    assert recorder._get_live(CONFIGMAPS, "never", namespace="default") is None


@pytest.mark.parametrize(
    ("refs", "expected"),
    [
        ([{"uid": "u1"}], True),
        ([{"uid": "u2"}, {"uid": "u1"}], True),
        ([{"uid": "u2"}], False),
        ([], False),
        (None, False),
    ],
)
def test_owned_by(refs: list[dict[str, str]] | None, expected: bool) -> None:
    assert owned_by({"metadata": {"ownerReferences": refs}}, "u1") is expected
