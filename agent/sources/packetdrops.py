"""Cilium's PacketDrop Events as re-diagnosis hints: the reader behind their list+watch loop.

Cilium's drop event emitter (`hubble.dropEventEmitter`) writes a Warning Event with reason
`PacketDrop` and source component `cilium` on the receiving pod of a drop at ingress and on the
sending pod of a drop at egress, at most once per interval per pod and message (a later repeat
bumps the Event's `count`). `agent.sources.kube` lists and watches them with the server-side
fieldSelector `reason=PacketDrop,source=cilium` (`PACKET_DROP_EVENTS`) and hands them here, slimmed,
through the cache's interface (`replace` for a list, `apply` for a watch event). Nothing is kept:
each Event becomes a `PacketDrop` passed at once to `on_drops` (a list's in one call); an Event
that names no pod, or that the server should not have sent (another reason or source), is counted
as ignored and dropped. Deletions (Events expire) mean nothing. What it does not do: map pods to
jobs, re-diagnose or write the timeline (the agent and its pipeline do).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.sources.change import EventType
from agent.sources.resources import Resource

REASON = "PacketDrop"
COMPONENT = "cilium"


@dataclass(frozen=True, slots=True)
class PacketDrop:
    """One PacketDrop Event: the pod it names, its message, how often Cilium counted it."""

    namespace: str
    pod: str
    message: str
    count: int = 1
    event: str = ""  # the Event's name
    at: str | None = None  # its lastTimestamp, as the server wrote it

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.pod}"


def packet_drop(obj: Mapping[str, Any]) -> PacketDrop | None:
    """The drop a slimmed Event tells, or None when it is not Cilium's PacketDrop on a pod."""
    if obj.get("reason") != REASON or (obj.get("source") or {}).get("component") != COMPONENT:
        return None
    involved = obj.get("involvedObject") or {}
    namespace, name = involved.get("namespace"), involved.get("name")
    if involved.get("kind") != "Pod" or not isinstance(namespace, str) or not isinstance(name, str):
        return None
    if not namespace or not name:
        return None
    count = obj.get("count")
    meta = obj.get("metadata") or {}
    return PacketDrop(
        namespace=namespace,
        pod=name,
        message=str(obj.get("message") or ""),
        count=count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1,
        event=str(meta.get("name") or ""),
        at=str(obj["lastTimestamp"]) if obj.get("lastTimestamp") else None,
    )


class DropEventReader:
    """The sink of the PacketDrop informer: turns Events into `PacketDrop`s for `on_drops`.
    `on_ignored` counts Events that tell no pod's drop."""

    def __init__(
        self,
        on_drops: Callable[[list[PacketDrop]], None],
        *,
        on_ignored: Callable[[int], None] = lambda n: None,
    ) -> None:
        self.on_drops = on_drops
        self.on_ignored = on_ignored

    def _read(self, objs: Iterable[Mapping[str, Any]]) -> None:
        drops: list[PacketDrop] = []
        ignored = 0
        for obj in objs:
            found = packet_drop(obj)
            if found is None:
                ignored += 1
            else:
                drops.append(found)
        if ignored:
            self.on_ignored(ignored)
        if drops:
            self.on_drops(drops)

    def replace(self, _resource: Resource, items: list[dict[str, Any]]) -> None:
        """A (re)list: every Event listed is read again (the timeline deduplicates)."""
        self._read(items)

    def apply(self, _resource: Resource, event: str, obj: dict[str, Any]) -> None:
        """A watch event: an added Event, or a repeat (its count bumped) of a drop."""
        if event in (EventType.ADDED, EventType.MODIFIED):
            self._read([obj])
