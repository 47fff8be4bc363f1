"""The twin's Cilium drop event emitter: `PacketDrop` Kubernetes Events for the dataplane's drops.

Called by the training runtime for every connection attempt the dataplane denies. It behaves as
Cilium's emitter (`hubble.dropEventEmitter`, source component `cilium`) does: a Warning Event with
reason `PacketDrop` on the destination pod of a drop at ingress ("Incoming packet dropped
(policy_denied) from <ns>/<pod> (<ip>) TCP/<port>.") and on the source pod of a drop at egress
("Outgoing packet dropped (policy_denied) to <ns>/<pod> (<ip>) TCP/<port>."), only for the
configured drop reasons (Cilium's default: `policy_denied`, `auth_required`; an explicit deny rule's
`policy_deny` is not among them), and at most once per interval for one pod and message: a repeat
within the interval is not written, a later one bumps the Event's count. It does not decide drops.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from typing import Any

from agent.twin.clock import TwinClock
from agent.twin.dataplane import DropHop, FlowResult
from agent.twin.operator_events import EventRecorder
from agent.twin.store import Store

COMPONENT = "cilium"
REASON = "PacketDrop"
DEFAULT_REASONS = frozenset({"policy_denied", "auth_required"})
MAX_REMEMBERED = 100_000  # (pod, message) pairs whose last emission is kept


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = obj.get("metadata") or {}
    return found


def _endpoint(pod: Mapping[str, Any]) -> str:
    meta = _meta(pod)
    ip = str((pod.get("status") or {}).get("podIP") or "")
    return f"{meta.get('namespace')}/{meta.get('name')} ({ip})"


def drop_message(
    src: Mapping[str, Any], dst: Mapping[str, Any], *, port: int, protocol: str, result: FlowResult
) -> tuple[Mapping[str, Any], str]:
    """The pod an Event names and its message, as Cilium writes them."""
    reason = str(result.drop_reason.value if result.drop_reason else "policy_denied").lower()
    l4 = f"{protocol.upper()}/{port}"
    if result.hop is DropHop.EGRESS:
        return src, f"Outgoing packet dropped ({reason}) to {_endpoint(dst)} {l4}."
    return dst, f"Incoming packet dropped ({reason}) from {_endpoint(src)} {l4}."


class DropEventEmitter:
    def __init__(
        self,
        store: Store,
        *,
        clock: TwinClock,
        interval: float = 120.0,
        reasons: Collection[str] = DEFAULT_REASONS,
    ) -> None:
        self._recorder = EventRecorder(store, component=COMPONENT)
        self._clock = clock
        self._interval = interval
        self._reasons = frozenset(reasons)
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str, str], float] = {}

    def emit(
        self,
        src: Mapping[str, Any],
        dst: Mapping[str, Any],
        *,
        port: int,
        result: FlowResult,
        protocol: str = "TCP",
    ) -> bool:
        """Write (or count) the Event of one denied attempt; False when none is due."""
        if result.allowed or result.drop_reason is None:
            return False
        if result.drop_reason.value.lower() not in self._reasons:
            return False
        pod, message = drop_message(src, dst, port=port, protocol=protocol, result=result)
        meta = _meta(pod)
        key = (str(meta.get("namespace")), str(meta.get("name")), message)
        now = self._clock.now()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                return False
            if len(self._last) >= MAX_REMEMBERED:
                self._last.clear()
            self._last[key] = now
        involved_meta: dict[str, Any] = {"name": meta.get("name"),
                                         "namespace": meta.get("namespace")}  # fmt: skip
        if result.hop is DropHop.EGRESS and meta.get("uid"):
            involved_meta["uid"] = meta["uid"]  # Cilium knows the local pod's uid
        involved = {"apiVersion": "v1", "kind": "Pod", "metadata": involved_meta}
        self._recorder.record(involved, reason=REASON, message=message, warning=True)
        return True
