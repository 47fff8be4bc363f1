"""HTTP watch streams of the twin's API: chunked JSON events, bookmarks, timeouts and 410.

Serves `?watch=1` on a resource list: opens a store watch at the requested resourceVersion (an
ERROR event with a 410 Expired Status when it was compacted away), writes one JSON line per event
(a server-side Table row when kubectl asks for one), a BOOKMARK every `bookmark_interval` when the
client allows them, and ends the stream at `timeoutSeconds`, when a fault closes it, or when the
server stops. Used by the verb module (apiverbs.py); it does not authorize (the caller did).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import orjson

from agent.twin import tables
from agent.twin.apierror import ApiError
from agent.twin.apiexchange import Exchange
from agent.twin.apiquery import Query
from agent.twin.apistate import ApiState
from agent.twin.resources import ResourceType

if TYPE_CHECKING:
    from agent.twin.watch import WatchStream


def serve_watch(
    api: ApiState,
    ex: Exchange,
    rt: ResourceType,
    *,
    namespace: str | None,
    query: Query,
    as_table: bool,
) -> None:
    timeout = query.integer("timeoutSeconds")
    bookmarks = query.flag("allowWatchBookmarks")
    try:
        stream = api.store.open_watch(
            rt,
            namespace=namespace,
            since=query.one("resourceVersion"),
            label_selector=query.one("labelSelector"),
            field_selector=query.one("fieldSelector"),
        )
    except ApiError as err:
        if err.code != 410:
            raise
        ex.start_stream()
        ex.chunk(orjson.dumps({"type": "ERROR", "object": err.status()}) + b"\n")
        ex.end_stream()
        return
    ex.start_stream()
    api.track_watch(stream, add=True)
    try:
        _pump(api, ex, rt, stream, timeout=timeout, bookmarks=bookmarks, as_table=as_table)
        ex.end_stream()
    except OSError:  # BrokenPipeError, ConnectionResetError: the client went away
        ex.drop_connection()
    finally:
        stream.close()
        api.track_watch(stream, add=False)


def _pump(
    api: ApiState,
    ex: Exchange,
    rt: ResourceType,
    stream: WatchStream,
    *,
    timeout: int | None,
    bookmarks: bool,
    as_table: bool,
) -> None:
    deadline = time.monotonic() + timeout if timeout else None
    while not api.stopping:
        wait = api.bookmark_interval
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
            if wait <= 0:
                return
        event = stream.next(wait)
        if event is not None:
            if as_table:
                obj = tables.table(
                    rt,
                    [event.object],
                    now=api.clock(),
                    resource_version=event.object["metadata"]["resourceVersion"],
                )
                ex.chunk(orjson.dumps({"type": event.type, "object": obj}) + b"\n")
            else:
                raw = event.raw if event.raw is not None else orjson.dumps(event.object)
                ex.chunk(b'{"type":"%s","object":%s}\n' % (event.type.encode(), raw))
            continue
        if stream.closed:
            return
        if bookmarks:
            mark = {
                "kind": rt.kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(stream.bookmark_rv())},
            }
            ex.chunk(orjson.dumps({"type": "BOOKMARK", "object": mark}) + b"\n")
