"""20 HTTP watchers and 10 HTTP writers for 10 s: no event lost, every stream in order."""

from __future__ import annotations

import http.client
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from tests.twin.apiserver_harness import running_twin

WATCHERS = 10 * 2
WRITERS = 10
DURATION = 10.0
NS = "default"


def _connection(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)


def _call(conn: http.client.HTTPConnection, method: str, path: str, body: Any = None,
          content_type: str = "application/json") -> dict[str, Any]:
    data = orjson.dumps(body) if body is not None else None
    conn.request(method, path, body=data, headers={"Content-Type": content_type})
    resp = conn.getresponse()
    out: dict[str, Any] = orjson.loads(resp.read())
    assert resp.status in (200, 201), out
    return out


def test_no_event_lost_or_reordered_under_concurrent_writes(tmp_path: Path) -> None:
    with running_twin(tmp_path) as twin:
        url = twin.server.url
        start_rv = twin.store.resource_version
        received: list[list[tuple[int, str, str]]] = [[] for _ in range(WATCHERS)]
        ready = threading.Barrier(WATCHERS + 1)
        stop = threading.Event()

        def watcher(i: int) -> None:
            conn = _connection(url)
            conn.request("GET", f"/api/v1/namespaces/{NS}/pods?watch=1&resourceVersion="
                                f"{start_rv}&allowWatchBookmarks=true")
            resp = conn.getresponse()
            ready.wait()
            for line in resp:
                event = orjson.loads(line)
                if event["type"] == "BOOKMARK":
                    if stop.is_set() and event["object"]["metadata"]["resourceVersion"] == \
                            twin.store.resource_version:
                        break
                    continue
                meta = event["object"]["metadata"]
                received[i].append((int(meta["resourceVersion"]), meta["name"], event["type"]))
            conn.close()

        writes: list[list[tuple[str, str]]] = [[] for _ in range(WRITERS)]

        def writer(w: int) -> None:
            conn = _connection(url)
            base = f"/api/v1/namespaces/{NS}/pods"
            n = 0
            deadline = time.monotonic() + DURATION
            while time.monotonic() < deadline:
                name = f"w{w}-{n}"
                _call(conn, "POST", base, {"metadata": {"name": name, "labels": {"n": str(n)}},
                                           "spec": {"containers": [{"name": "c", "image": "i"}]}})
                writes[w].append((name, "ADDED"))
                _call(conn, "PATCH", f"{base}/{name}", {"metadata": {"labels": {"p": "1"}}},
                      "application/merge-patch+json")
                writes[w].append((name, "MODIFIED"))
                _call(conn, "DELETE", f"{base}/{name}")
                writes[w].append((name, "DELETED"))
                n += 1
            conn.close()

        watch_threads = [threading.Thread(target=watcher, args=(i,), daemon=True)
                         for i in range(WATCHERS)]
        for t in watch_threads:
            t.start()
        ready.wait(timeout=30)
        write_threads = [threading.Thread(target=writer, args=(w,), daemon=True)
                         for w in range(WRITERS)]
        for t in write_threads:
            t.start()
        for t in write_threads:
            t.join(timeout=DURATION + 30)
        stop.set()
        for t in watch_threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in watch_threads)

        expected: dict[str, list[str]] = defaultdict(list)
        for log in writes:
            for name, kind in log:
                expected[name].append(kind)
        total = sum(len(log) for log in writes)
        assert total >= 3 * WRITERS  # every writer got through at least one cycle
        for events in received:
            versions = [rv for rv, _, _ in events]
            assert versions == sorted(versions) and len(set(versions)) == len(versions)
            assert len(events) == total
            per_name: dict[str, list[str]] = defaultdict(list)
            for _, name, kind in events:
                per_name[name].append(kind)
            assert per_name == expected
