"""Watch fan-out of the twin's store: the event history, subscriptions and HTTP watch streams.

`WatchHub` keeps a bounded history of write events (so a watch or list may resume from a
resourceVersion, or get 410 Expired once it was compacted away), feeds every subscription's queue
under the store's lock, and remembers each stored object's JSON so lists and watches send bytes
encoded once per write. `WatchStream` is the consumer end of an HTTP watch (selector filtering with
the ADDED/DELETED translation the real server does when an object enters or leaves a selector);
`subscribe` is the in-process watch used by the twin's controllers.

Called by the store facade (store.py) and, through it, by the HTTP layer. It does not store objects
or decide what a write is; the object table (objects.py) reports each write here.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from agent.twin.apierror import bad_request, expired
from agent.twin.resources import ResourceType

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str, str]  # ResourceType.key


class EventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"
    ERROR = "ERROR"


@dataclass(frozen=True)
class WatchEvent:
    """One watch event: type ADDED/MODIFIED/DELETED (BOOKMARK/ERROR on HTTP) and the object."""

    type: str
    object: Obj
    raw: bytes | None = None  # the object as JSON, when the store already encoded it


@dataclass(frozen=True)
class StoredEvent:
    """One write as the history keeps it."""

    rv: int
    key: Key
    namespace: str
    type: EventType
    obj: Obj  # stored (immutable) object
    old: Obj | None
    raw: bytes  # obj encoded as JSON, once for every watcher


_STOP = object()


class Subscription:
    """A filtered feed of events into a queue, fed under the store lock."""

    def __init__(self, key: Key, namespace: str | None) -> None:
        self.key = key
        self.namespace = namespace
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def wants(self, event: StoredEvent) -> bool:
        return event.key == self.key and (
            self.namespace is None or event.namespace == self.namespace
        )


Matcher = Callable[[Mapping[str, Any]], bool]


class WatchStream:
    """The consumer end of an HTTP watch: events in order, filtered by selectors.

    `next(timeout)` returns a WatchEvent whose object is a stored (immutable) object: serialize
    it, do not mutate it. It returns None on timeout; `closed` turns True when the store or a
    fault closed the stream.
    """

    def __init__(
        self, hub: WatchHub, sub: Subscription, match: Matcher | None, start_rv: int
    ) -> None:
        self._hub = hub
        self._sub = sub
        self._match = match
        self.closed = False
        self.last_rv = start_rv

    def next(self, timeout: float) -> WatchEvent | None:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                item = self._sub.queue.get(timeout=remaining)
            except queue.Empty:
                return None
            if item is _STOP:
                self.closed = True
                return None
            event: StoredEvent = item
            self.last_rv = max(self.last_rv, event.rv)
            translated = self._translate(event)
            if translated is not None:
                return translated

    def _translate(self, event: StoredEvent) -> WatchEvent | None:
        if self._match is None:
            return WatchEvent(event.type.value, event.obj, event.raw)
        now = self._match(event.obj)
        if event.type is EventType.DELETED:
            return WatchEvent(event.type.value, event.obj, event.raw) if now else None
        before = event.old is not None and self._match(event.old)
        if event.type is EventType.ADDED or event.old is None:
            return WatchEvent(event.type.value, event.obj, event.raw) if now else None
        if now and before:
            return WatchEvent(EventType.MODIFIED.value, event.obj, event.raw)
        if now:
            return WatchEvent(EventType.ADDED.value, event.obj, event.raw)
        if before:
            return WatchEvent(EventType.DELETED.value, event.obj, event.raw)
        return None

    def bookmark_rv(self) -> int:
        """A resourceVersion up to which every event for this stream has been returned."""
        return self._hub.bookmark_rv(self._sub, self.last_rv)

    def close(self) -> None:
        self._hub.unsubscribe(self._sub)
        self.closed = True


def _clone(obj: Obj) -> Obj:
    copied: Obj = orjson.loads(orjson.dumps(obj))
    return copied


class WatchHub:
    """History, subscriptions and the per-object JSON cache; every method that touches them takes
    the store's lock (`lock`), which the store holds around each write."""

    def __init__(
        self, lock: threading.RLock, *, current_rv: Callable[[], int], history_limit: int
    ) -> None:
        self.lock = lock
        self._current_rv = current_rv
        self._history: deque[StoredEvent] = deque()
        self._history_limit = max(1, history_limit)
        self._compacted = 0  # requests for versions below this get 410
        self._subs: list[Subscription] = []
        self._type_rv: dict[Key, int] = {}
        # uid -> (stored object, its JSON): lists and watches send bytes encoded once per write.
        self._encoded: dict[str, tuple[Obj, bytes]] = {}

    # ------------------------------------------------------------------ writes

    def emit(self, kind: EventType, rt: ResourceType, obj: Obj, *, old: Obj | None) -> None:
        """Record a write (the lock is held) and queue it for every subscription that wants it."""
        raw = orjson.dumps(obj)
        uid = obj["metadata"]["uid"]
        if kind is EventType.DELETED:
            self._encoded.pop(uid, None)
        else:
            self._encoded[uid] = (obj, raw)
        rv = self._current_rv()
        event = StoredEvent(rv, rt.key, obj["metadata"].get("namespace", ""), kind, obj, old, raw)
        self._type_rv[rt.key] = rv
        if len(self._history) >= self._history_limit:
            dropped = self._history.popleft()
            self._compacted = max(self._compacted, dropped.rv)
        self._history.append(event)
        for sub in self._subs:
            if sub.wants(event):
                sub.queue.put(event)

    def encode(self, objs: list[Obj]) -> list[bytes]:
        """JSON for stored objects, reusing the encoding made at write."""
        encoded = self._encoded
        out = []
        for obj in objs:
            hit = encoded.get(obj["metadata"]["uid"])
            out.append(hit[1] if hit is not None and hit[0] is obj else orjson.dumps(obj))
        return out

    def type_version(self, key: Key) -> int:
        with self.lock:
            return self._type_rv.get(key, 0)

    # ------------------------------------------------------------------ versions

    @property
    def compacted(self) -> int:
        return self._compacted

    def check_version(self, resource_version: str | None) -> int | None:
        """Validate a requested resourceVersion: None for ""/"0"; 410 when compacted away."""
        if resource_version is None or resource_version in ("", "0"):
            return None
        try:
            wanted = int(resource_version)
        except ValueError as exc:
            raise bad_request(
                f'resourceVersion: Invalid value: "{resource_version}": must be an integer'
            ) from exc
        if wanted < self._compacted:
            raise expired(f"too old resource version: {wanted} ({self._compacted})")
        return wanted

    def compact(self) -> str:
        """Forget all history: any watch or list at an older resourceVersion now gets 410."""
        with self.lock:
            self._history.clear()
            self._compacted = self._current_rv()
            return str(self._compacted)

    # ------------------------------------------------------------------ subscriptions

    def _start(
        self, rt: ResourceType, sub: Subscription, since: str, current: Mapping[tuple[str, str], Obj]
    ) -> int:
        """Register `sub` and queue what it must see first; the lock is held."""
        wanted = self.check_version(since)
        if since in ("", "0"):
            for key in sorted(current):
                if sub.namespace is None or key[0] == sub.namespace:
                    obj = current[key]
                    raw = self.encode([obj])[0]
                    sub.queue.put(
                        StoredEvent(
                            self._current_rv(), rt.key, key[0], EventType.ADDED, obj, None, raw
                        )
                    )
        elif wanted is not None:
            for event in self._events_after(wanted):
                if sub.wants(event):
                    sub.queue.put(event)
        self._subs.append(sub)
        return wanted if wanted is not None else self._current_rv()

    def _events_after(self, rv: int) -> Iterator[StoredEvent]:
        history = self._history
        # Walk back from the newest event to the first one newer than rv.
        i = len(history)
        while i > 0 and history[i - 1].rv > rv:
            i -= 1
        for j in range(i, len(history)):
            yield history[j]

    def open_watch(
        self,
        rt: ResourceType,
        current: Mapping[tuple[str, str], Obj],
        *,
        namespace: str | None,
        since: str,
        match: Matcher | None,
    ) -> WatchStream:
        """An HTTP-style watch; the lock is held by the caller, who passes the type's objects."""
        sub = Subscription(rt.key, namespace if rt.namespaced else None)
        start = self._start(rt, sub, since, current)
        return WatchStream(self, sub, match, start)

    def subscribe(
        self,
        rt: ResourceType,
        current: Mapping[tuple[str, str], Obj],
        callback: Callable[[WatchEvent], None],
        *,
        namespace: str | None,
        since: str | None,
    ) -> Callable[[], None]:
        """An in-process watch delivering copies on its own thread; the lock is held by the
        caller. Returns the unsubscribe function."""
        sub = Subscription(rt.key, namespace if rt.namespaced else None)
        if since is None:
            self._subs.append(sub)
        else:
            self._start(rt, sub, since, current)

        def deliver() -> None:
            while True:
                item = sub.queue.get()
                if item is _STOP:
                    return
                event: StoredEvent = item
                try:
                    callback(WatchEvent(event.type.value, _clone(event.obj)))
                except Exception:  # a subscriber's bug must not stop its delivery
                    log.exception("twin store subscriber for %s failed", rt.plural)

        thread = threading.Thread(target=deliver, name=f"twin-watch-{rt.plural}", daemon=True)
        thread.start()

        def unsubscribe() -> None:
            self.unsubscribe(sub)

        return unsubscribe

    def unsubscribe(self, sub: Subscription) -> None:
        with self.lock:
            if sub in self._subs:
                self._subs.remove(sub)
                sub.queue.put(_STOP)

    def bookmark_rv(self, sub: Subscription, last: int) -> int:
        with self.lock:
            return self._current_rv() if sub.queue.empty() else last

    def close_all(self) -> int:
        """End every open subscription and watch stream (a fault, or shutdown)."""
        with self.lock:
            subs, self._subs = self._subs, []
            for sub in subs:
                sub.queue.put(_STOP)
            return len(subs)
