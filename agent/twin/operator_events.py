"""core/v1 Events written by the twin's controllers (Scheduled, FailedScheduling, Pulled, ...).

Called by the scheduler, the operators and the kubelet. Repeats of the same (object, reason,
message) bump `count` and `lastTimestamp` on the existing Event instead of writing a new one, as
client-go's event correlator does. It does not read events back or expire them.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agent.twin.apierror import ApiError
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from agent.twin.store import Store

log = logging.getLogger(__name__)
EVENTS = lookup("events")


def timestamp(seconds: float | None = None) -> str:
    when = time.time() if seconds is None else seconds
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(self, store: Store, *, component: str) -> None:
        self._store = store
        self._component = component
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str, str, str, str], str] = {}

    def record(
        self, obj: Mapping[str, Any], *, reason: str, message: str, warning: bool = False
    ) -> None:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name", ""))
        key = (namespace, name, str(meta.get("uid", "")), reason, message)
        now = timestamp()
        with self._lock:
            existing = self._seen.get(key)
        if existing is not None:
            try:
                current = self._store.get(EVENTS, existing, namespace=namespace)
                self._store.patch(
                    EVENTS,
                    existing,
                    {"count": int(current.get("count", 1)) + 1, "lastTimestamp": now},
                    namespace=namespace,
                    patch_type=PatchType.MERGE,
                )
                return
            except ApiError:
                pass  # deleted meanwhile: write a new one
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{secrets.token_hex(8)}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": name,
                "namespace": namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": "Warning" if warning else "Normal",
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": f"{self._component}-twin",
        }
        try:
            created = self._store.create(EVENTS, event)
        except ApiError as exc:  # namespace gone: nothing to record against
            log.debug("event %s for %s/%s not written: %s", reason, namespace, name, exc)
            return
        with self._lock:
            self._seen[key] = created["metadata"]["name"]
