"""Kubernetes source: discovery, then one list+watch loop per served resource into the cache.

Called by the composition root (`KubeSource.start()`, `wait_synced()`, `stop()`) and by
`zonemedic sweep --once` (start, wait for sync, read the cache, stop). Each `Informer` lists with
`limit`/`continue` paging (the next page is fetched on a helper thread while the current one is
slimmed, so the server's serialization and the transfer overlap the parsing; each page's raw
objects are dropped once slimmed, so memory holds one raw page at a time; `list_stats` tells the
pages, objects, time and the largest page's cost), then watches from the list's resourceVersion
with `allowWatchBookmarks` and a server-side `timeoutSeconds`; a stream that ends or breaks
resumes from the last resourceVersion seen (bookmarks included); a 410 Gone (as an HTTP answer
or an `ERROR` event) relists; 5xx, 429 (Retry-After honoured) and network errors back off
exponentially with full jitter. Bodies are parsed with orjson from unread responses
(`_preload_content=False`) and slimmed before they reach the cache. A resource with a
`field_selector` is listed and watched with it. Readers (`add_reader`: Cilium's PacketDrop Events)
get an informer of their own feeding them instead of the cache. What it does not do: diagnose, or
write to the cluster.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from agent.sources.backoff import Backoff
from agent.sources.cache import ClusterCache
from agent.sources.change import EventType
from agent.sources.gcpause import freeze_at_end, gc_paused
from agent.sources.kubeapi import KubeApi, KubeApiError, iter_lines
from agent.sources.resources import RESOURCES, Resource, group_versions, select_served
from agent.sources.slim import Sharer, slimmer

log = logging.getLogger(__name__)

LIST_PAGE = 5000
FREEZE_AT = 20_000  # objects: a list this large is frozen once every list has ended (gcpause)


@dataclass
class ListStats:
    """The last full list of an informer: pages, objects, wall seconds, and its largest page
    (objects, and seconds from asking for it to having slimmed it)."""

    pages: int = 0
    items: int = 0
    seconds: float = 0.0
    largest_page_items: int = 0
    largest_page_seconds: float = 0.0

    @property
    def pages_per_second(self) -> float:
        return self.pages / self.seconds if self.seconds > 0 else 0.0


class Sink(Protocol):
    """Where an informer puts what it lists (`replace`) and watches (`apply`): the cluster cache,
    or a reader that keeps nothing (Cilium's PacketDrop Events)."""

    def replace(self, resource: Resource, items: list[dict[str, Any]]) -> Any: ...

    def apply(self, resource: Resource, event: str, obj: dict[str, Any]) -> Any: ...


class GoneError(Exception):
    """The resourceVersion we asked for is too old (HTTP 410 / ERROR event with code 410)."""


class RestartReason:
    GONE = "gone"
    ERROR = "error"
    STREAM = "stream"


def discover(api: KubeApi, *, timeout: float = 10.0) -> dict[tuple[str, str], set[str]]:
    """Plurals served by each group/version we care about; an unserved one is simply absent."""
    served: dict[tuple[str, str], set[str]] = {}
    for group, version in group_versions():
        try:
            doc = api.json("GET", f"/apis/{group}/{version}", timeout=timeout)
        except KubeApiError as exc:
            if exc.status == 404:
                continue
            raise
        names = {
            str(r.get("name"))
            for r in (doc.get("resources") or [])
            if isinstance(r, dict) and "/" not in str(r.get("name"))
        }
        served[(group, version)] = names
    return served


class Informer:
    """List+watch of one resource into the cache, on its own thread."""

    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        cache: Sink,
        *,
        on_restart: Callable[[str, str], None] = lambda resource, reason: None,
        watch_timeout: int = 300,
        request_timeout: float = 30.0,
        rand: Callable[[], float] = random.random,
        share: Callable[[Any], Any] | None = None,
        page_size: int = LIST_PAGE,
    ) -> None:
        self.api = api
        self.page_size = page_size
        self.resource = resource
        self.cache = cache
        self.on_restart = on_restart
        self.watch_timeout = watch_timeout
        self.request_timeout = request_timeout
        self.slim = slimmer(resource, share or Sharer())
        self.backoff = Backoff(rand=rand)
        self.rand = rand
        self.resource_version: str | None = None
        self.lists = 0
        self.list_stats = ListStats()
        self.watches = 0
        self._stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    # -- list ----------------------------------------------------------------------------------

    def list(self) -> str:
        """Full list (paged) into the cache; returns the list's resourceVersion.

        The cyclic garbage collector is paused meanwhile: parsing a large list creates millions
        of objects that only reference counting frees, and collections triggered by them
        (scanning the growing cache each time) would otherwise cost more than the parse. The
        pause is shared by every informer listing at once; a list of `FREEZE_AT` objects or more
        freezes what the process holds when the last of them ends."""
        with gc_paused():  # one pause for every informer listing at once (see gcpause)
            version = self._list()
            if self.list_stats.items >= FREEZE_AT:
                freeze_at_end()  # the cache's objects are long-lived: out of the collector's way
            return version

    def _fetch_page(self, token: str | None) -> tuple[Any, float]:
        """One page of the list (parsed) and when it was asked for."""
        asked = time.perf_counter()
        query = [*self.resource.query(), ("limit", str(self.page_size))]
        if token:
            query.append(("continue", token))
        doc = self.api.json(
            "GET", self.resource.list_path(), query=query, timeout=self.request_timeout * 4
        )
        return doc, asked

    def _list(self) -> str:
        started = time.perf_counter()
        stats = ListStats()
        items: list[dict[str, Any]] = []
        token: str | None = None
        with ThreadPoolExecutor(1, thread_name_prefix=f"list-{self.resource.name}") as pool:
            pending: Future[tuple[Any, float]] = pool.submit(self._fetch_page, None)
            while True:
                try:
                    doc, asked = pending.result()
                except KubeApiError as exc:
                    if exc.status == 410 and token:
                        # continue token expired: start the list again
                        items, token, stats = [], None, ListStats()
                        pending = pool.submit(self._fetch_page, None)
                        continue
                    raise
                meta = doc.get("metadata") or {}
                token = meta.get("continue") or None
                if token:  # the next page travels while this one is slimmed
                    pending = pool.submit(self._fetch_page, token)
                page = doc.get("items") or []
                del doc
                for obj in page:
                    if isinstance(obj, dict):
                        items.append(self.slim(obj))
                stats.pages += 1
                cost = time.perf_counter() - asked
                if len(page) > stats.largest_page_items or (
                    len(page) == stats.largest_page_items and cost > stats.largest_page_seconds
                ):
                    stats.largest_page_items, stats.largest_page_seconds = len(page), cost
                del page
                if not token:
                    break
        self.cache.replace(self.resource, items)
        stats.items = len(items)
        stats.seconds = time.perf_counter() - started
        self.list_stats = stats
        self.lists += 1
        return str(meta.get("resourceVersion") or "")

    # -- watch ---------------------------------------------------------------------------------

    def watch(self, resource_version: str) -> str:
        """Watch from `resource_version` until the stream ends; return the last version seen."""
        timeout = self.watch_timeout + int(self.watch_timeout * self.rand() * 0.2)
        query = [
            *self.resource.query(),
            ("watch", "1"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout)),
        ]
        try:
            response = self.api.open(
                "GET",
                self.resource.list_path(),
                query=query,
                timeout=(self.request_timeout, timeout + 30),
            )
        except KubeApiError as exc:
            if exc.status == 410:
                raise GoneError(exc.reason) from exc
            raise
        self._response = response
        self.watches += 1
        version = resource_version
        try:
            if self._stop.is_set():
                return version
            for line in iter_lines(response):
                event = orjson.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    code = int(obj.get("code") or 0)
                    if code == 410:
                        raise GoneError(str(obj.get("message") or "gone"))
                    raise KubeApiError(code, str(obj.get("message") or "watch error"))
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if kind in (EventType.ADDED, EventType.MODIFIED, EventType.DELETED):
                    self.cache.apply(self.resource, kind, self.slim(obj))
                if rv:
                    version = str(rv)
                self.resource_version = version
                self.backoff.reset()
        finally:
            self._response = None
            response.release_conn()
        return version

    # -- loop ----------------------------------------------------------------------------------

    def run(self) -> None:
        from urllib3.exceptions import HTTPError

        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self.list()
                    self.resource_version = version
                    self.backoff.reset()
                version = self.watch(version)
            except GoneError:
                self.on_restart(self.resource.name, RestartReason.GONE)
                log.info("watch expired, relisting", extra={"resource": self.resource.name})
                version = None
                if self.backoff.attempts:
                    self._stop.wait(self.backoff.next())
                else:
                    self.backoff.attempts = 1  # relist at once the first time only
            except KubeApiError as exc:
                self.on_restart(self.resource.name, RestartReason.ERROR)
                delay = self.backoff.next(exc.retry_after)
                if self.resource.best_effort and exc.status in (403, 404):
                    self.cache.replace(self.resource, [])  # synced and empty; look again later
                    version = None
                log.warning(
                    "list/watch failed",
                    extra={"resource": self.resource.name, "error": str(exc), "retry_in": delay},
                )
                self._stop.wait(delay)
            except (HTTPError, OSError, ValueError) as exc:
                if self._stop.is_set():
                    break
                self.on_restart(self.resource.name, RestartReason.STREAM)
                delay = self.backoff.next()
                log.info(
                    "watch stream broken, resuming",
                    extra={"resource": self.resource.name, "error": str(exc)[:200]},
                )
                self._stop.wait(delay)
            except Exception:  # top-level loop: log and keep watching
                log.exception("informer crashed, relisting", extra={"resource": self.resource.name})
                version = None
                self._stop.wait(self.backoff.next())

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.run, name=f"watch-{self.resource.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(OSError, AttributeError):
                response.shutdown()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)


class KubeSource:
    """Discovery + informers for every served resource, feeding one `ClusterCache`."""

    def __init__(
        self,
        api: KubeApi,
        cache: ClusterCache,
        *,
        on_restart: Callable[[str, str], None] = lambda resource, reason: None,
        watch_timeout: int = 300,
        resources: tuple[Resource, ...] = RESOURCES,
        readers: Sequence[tuple[Resource, Sink]] = (),
    ) -> None:
        self.api = api
        self.cache = cache
        self.on_restart = on_restart
        self.watch_timeout = watch_timeout
        self.all_resources = resources
        self.readers = list(readers)
        self.informers: list[Informer] = []

    def add_reader(self, resource: Resource, sink: Sink) -> None:
        """Also list+watch `resource` into `sink` (before `start`): outside the cache, so its
        sync is not waited for and a failure of it delays nothing else."""
        self.readers.append((resource, sink))

    def start(self, *, discovery_timeout: float = 30.0) -> list[Resource]:
        """Discover (retrying until `discovery_timeout`), then start one informer per resource."""
        deadline = time.monotonic() + discovery_timeout
        backoff = Backoff()
        while True:
            try:
                served = discover(self.api)
                break
            except KubeApiError as exc:
                if time.monotonic() > deadline:
                    raise
                delay = backoff.next(exc.retry_after)
                log.warning("discovery failed", extra={"error": str(exc), "retry_in": delay})
                time.sleep(delay)
        chosen = select_served(served, self.all_resources)
        self.cache.expect(chosen)
        targets: list[tuple[Resource, Sink]] = [(r, self.cache) for r in chosen]
        for resource, sink in [*targets, *self.readers]:
            informer = Informer(
                self.api,
                resource,
                sink,
                on_restart=self.on_restart,
                watch_timeout=self.watch_timeout,
            )
            self.informers.append(informer)
            informer.start()
        log.info("watching", extra={"resources": [r.name for r in chosen],
                                    "readers": [r.name for r, _ in self.readers]})  # fmt: skip
        return chosen

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.cache.synced:
                return True
            time.sleep(0.02)
        return self.cache.synced

    def stop(self, timeout: float = 5.0) -> None:
        for informer in self.informers:
            informer.stop()
        deadline = time.monotonic() + timeout
        for informer in self.informers:
            informer.join(max(0.0, deadline - time.monotonic()))
