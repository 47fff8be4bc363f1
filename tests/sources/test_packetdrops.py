"""Cilium's PacketDrop Events read through their own informer: the server selects them by reason
and source (no other Event reaches the agent), listed ones and watched ones (added, count bumped)
become PacketDrops at once, nothing is cached, and an Event that names no pod is ignored."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.settings import KubernetesSettings
from agent.sources.cache import ClusterCache
from agent.sources.kube import KubeSource
from agent.sources.kubeapi import KubeApi, build_api_client
from agent.sources.packetdrops import DropEventReader, PacketDrop, packet_drop
from agent.sources.resources import PACKET_DROP_EVENTS
from agent.sources.slim import slim_event
from agent.twin import apiserver, kubeconfig
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from agent.twin.store import Store
from tests.support.waiting import wait

EVENTS = lookup("events")
NAMESPACES = lookup("namespaces")
MESSAGE = "Incoming packet dropped (policy_denied) from ml/w-0 (10.0.1.4) TCP/23456."


def event(name: str, *, reason: str = "PacketDrop", component: str = "cilium", kind: str = "Pod",
          pod: str = "m-0", message: str = MESSAGE, count: int = 1) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": "ml", "resourceVersion": "7",
                     "managedFields": [{"manager": "cilium"}]},
        "involvedObject": {"apiVersion": "v1", "kind": kind, "name": pod, "namespace": "ml"},
        "reason": reason, "message": message, "type": "Warning", "count": count,
        "source": {"component": component, "host": "node-1"},
        "firstTimestamp": "2026-03-01T10:00:00Z", "lastTimestamp": "2026-03-01T10:02:00Z",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (event("a", count=3), PacketDrop("ml", "m-0", MESSAGE, 3, "a", "2026-03-01T10:02:00Z")),
        (event("b", reason="BackOff"), None),
        (event("c", component="kubelet"), None),
        (event("d", kind="Node"), None),
        (event("e", pod=""), None),
        ({**event("f"), "count": "many"}, PacketDrop("ml", "m-0", MESSAGE, 1, "f",
                                                     "2026-03-01T10:02:00Z")),
    ],
)  # fmt: skip
def test_packet_drop_of_a_slimmed_event(obj: dict[str, Any], expected: PacketDrop | None) -> None:
    assert packet_drop(slim_event(obj)) == expected


def test_slim_event_keeps_what_the_reader_needs_and_cuts_long_messages() -> None:
    slim = slim_event(event("a", message="x" * 5000))
    assert set(slim) == {"apiVersion", "kind", "metadata", "involvedObject", "reason", "message",
                         "type", "count", "source", "lastTimestamp"}  # fmt: skip
    assert "managedFields" not in slim["metadata"] and len(slim["message"]) == 1024
    assert slim["source"] == {"component": "cilium"}


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[tuple[Store, KubeApi]]:
    store = Store()
    store.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    server = apiserver.serve(store)
    path = kubeconfig.write(tmp_path / "kubeconfig", server.url)
    api = KubeApi(build_api_client(KubernetesSettings(kubeconfig=str(path))))
    try:
        yield store, api
    finally:
        server.stop()
        store.close()


def test_listed_and_watched_drops_reach_the_reader_and_nothing_else(
    twin: tuple[Store, KubeApi],
) -> None:
    store, api = twin
    store.create(EVENTS, event("listed"))
    store.create(EVENTS, event("scheduled", reason="Scheduled", component="default-scheduler"))
    seen: list[PacketDrop] = []
    ignored: list[int] = []
    lock = threading.Lock()

    def on_drops(drops: list[PacketDrop]) -> None:
        with lock:
            seen.extend(drops)

    cache = ClusterCache()
    source = KubeSource(api, cache, resources=())
    source.add_reader(PACKET_DROP_EVENTS, DropEventReader(on_drops, on_ignored=ignored.append))
    source.start()
    try:
        wait(lambda: len(seen) == 1, timeout=10, what="the listed drop")
        assert seen[0].event == "listed" and seen[0].where == "ml/m-0"
        store.create(EVENTS, event("watched", pod="w-1",
                                   message=MESSAGE.replace("w-0", "m-0")))  # fmt: skip
        store.create(EVENTS, event("backoff", reason="BackOff", component="kubelet"))
        wait(lambda: len(seen) == 2, timeout=10, what="the watched drop")
        assert (seen[1].pod, seen[1].message) == ("w-1", MESSAGE.replace("w-0", "m-0"))
        store.patch(EVENTS, "watched", {"count": 2}, namespace="ml", patch_type=PatchType.MERGE)
        wait(lambda: len(seen) == 3, timeout=10, what="the repeat (count bumped)")
        assert seen[2].count == 2
        store.delete(EVENTS, "listed", namespace="ml")  # expiry tells nothing
        store.create(EVENTS, event("last", pod="w-2"))
        wait(lambda: len(seen) == 4, timeout=10, what="the next drop")
        assert [d.event for d in seen] == ["listed", "watched", "watched", "last"]
        assert ignored == []  # the server sent no other Event
        assert cache.count("events") == 0 and cache.synced is False  # nothing cached or awaited
    finally:
        source.stop()

