"""The twin's object store: in-memory Kubernetes objects with API-server semantics.

Holds every object the twin serves, keyed by resource type, namespace and name, under one global
resourceVersion counter. It implements what the real API server does on each verb: create
(generateName, uid, timestamps, generation, 409 AlreadyExists), update (409 Conflict on a stale
resourceVersion), the three patch formats (415 for strategic merge on custom resources), delete
with propagation (Background/Foreground/Orphan garbage collection by ownerReferences, finalizers,
graceful pod deletion on a timer), the status and binding subresources, dry runs, a bounded event
history, and watch fan-out to in-process subscribers and HTTP watch streams.

Called in-process by the twin's controllers (scheduler, operators, kubelet) and by the HTTP layer
(`apiserver.py`). It does not speak HTTP, authenticate, or count requests. Stored objects are never
mutated after they are stored (a write stores a new dict), so readers may serialize them without a
copy; everything the public API returns is a copy the caller may mutate.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import builtins
import heapq
import logging
import queue
import random
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from agent.twin import patch as patching
from agent.twin import selectors
from agent.twin.patch import PatchType
from agent.twin.resources import ResourceType, lookup

__all__ = [
    "ApiError",
    "PatchType",
    "Propagation",
    "Store",
    "WatchEvent",
    "WatchStream",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str, str]  # ResourceType.key


class Propagation(StrEnum):
    BACKGROUND = "Background"
    FOREGROUND = "Foreground"
    ORPHAN = "Orphan"


class EventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"
    ERROR = "ERROR"


class ApiError(Exception):
    """An API error with the HTTP code and Status reason the real server would answer."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details) if details else None
        self.retry_after = retry_after

    def status(self) -> Obj:
        """The `kind: Status` object the HTTP layer sends."""
        out: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details = dict(self.details or {})
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            out["details"] = details
        return out


def _details(rt: ResourceType, name: str) -> Obj:
    return {"name": name, "group": rt.group, "kind": rt.plural}


def not_found(rt: ResourceType, name: str) -> ApiError:
    qualified = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    return ApiError(404, "NotFound", f'{qualified} "{name}" not found', details=_details(rt, name))


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    qualified = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
        details=_details(rt, name),
    )


def invalid(rt: ResourceType, name: str, field: str, message: str) -> ApiError:
    qualified = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    details = _details(rt, name)
    details["kind"] = rt.kind
    details["causes"] = [{"reason": "FieldValueInvalid", "message": message, "field": field}]
    return ApiError(
        422,
        "Invalid",
        f'{rt.kind} "{name}" is invalid: {field}: {message}'
        if name
        else f"{qualified} is invalid: {field}: {message}",
        details=details,
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


@dataclass(frozen=True)
class WatchEvent:
    """One watch event: type ADDED/MODIFIED/DELETED (BOOKMARK/ERROR on HTTP) and the object."""

    type: str
    object: Obj
    raw: bytes | None = None  # the object as JSON, when the store already encoded it


@dataclass(frozen=True)
class _Event:
    rv: int
    key: Key
    namespace: str
    type: EventType
    obj: Obj  # stored (immutable) object
    old: Obj | None
    raw: bytes  # obj encoded as JSON, once for every watcher


_STOP = object()


class _Subscription:
    """A filtered feed of events into a queue, fed under the store lock."""

    def __init__(self, key: Key, namespace: str | None) -> None:
        self.key = key
        self.namespace = namespace
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def wants(self, event: _Event) -> bool:
        return event.key == self.key and (
            self.namespace is None or event.namespace == self.namespace
        )


class WatchStream:
    """The consumer end of an HTTP watch: events in order, filtered by selectors.

    `next(timeout)` returns a WatchEvent whose object is a stored (immutable) object: serialize
    it, do not mutate it. It returns None on timeout; `closed` turns True when the store or a
    fault closed the stream.
    """

    def __init__(
        self,
        store: Store,
        sub: _Subscription,
        match: Callable[[Mapping[str, Any]], bool] | None,
        start_rv: int,
    ) -> None:
        self._store = store
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
            event: _Event = item
            self.last_rv = max(self.last_rv, event.rv)
            translated = self._translate(event)
            if translated is not None:
                return translated

    def _translate(self, event: _Event) -> WatchEvent | None:
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
        return self._store._bookmark_rv(self._sub, self.last_rv)

    def close(self) -> None:
        self._store._unsubscribe(self._sub)
        self.closed = True


_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_FOREGROUND = "foregroundDeletion"
_ORPHAN = "orphan"

Hook = Callable[[Obj | None, Obj], None]


def _clone(obj: Any) -> Any:
    return orjson.loads(orjson.dumps(obj))


def _copy(obj: Obj) -> Obj:
    copied: Obj = orjson.loads(orjson.dumps(obj))
    return copied


def _timestamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _body(obj: Any) -> Obj:
    """A private deep copy of a caller's object, refusing what is not a JSON object."""
    if not isinstance(obj, dict):
        raise bad_request("the request body must be a JSON object")
    try:
        copied: Obj = _clone(obj)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise bad_request(f"the object is not valid JSON: {exc}") from exc
    meta = copied.get("metadata")
    if meta is None:
        copied["metadata"] = {}
    elif not isinstance(meta, dict):
        raise bad_request("metadata must be a JSON object")
    return copied


class Store:
    """Thread-safe in-memory API objects; see the module docstring."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        history_limit: int = 100_000,
    ) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._rv = 0
        self._objects: dict[Key, dict[tuple[str, str], Obj]] = {}
        self._types: dict[Key, ResourceType] = {}
        self._by_uid: dict[str, tuple[ResourceType, str, str]] = {}
        self._dependents: dict[str, set[str]] = {}
        self._history: deque[_Event] = deque()
        self._history_limit = max(1, history_limit)
        self._compacted = 0  # requests for versions below this get 410
        self._subs: list[_Subscription] = []
        self._admission: dict[Key, list[Hook]] = {}
        self._type_rv: dict[Key, int] = {}
        self._graceful: set[str] = set()  # uids waiting for their grace timer
        # uid -> (stored object, its JSON): lists and watches send bytes encoded once per write.
        self._encoded: dict[str, tuple[Obj, bytes]] = {}
        self._timers: list[tuple[float, int, str]] = []
        self._timer_seq = 0
        self._timer_cond = threading.Condition(self._lock)
        self._timer_thread: threading.Thread | None = None
        self._closed = False
        ns = lookup("namespaces")
        for name in _INITIAL_NAMESPACES:
            self.create(ns, {"metadata": {"name": name}})

    # ------------------------------------------------------------------ reading

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._rv)

    def type_version(self, rt: ResourceType) -> int:
        """The resourceVersion of the last write to any object of this type (0 if none)."""
        with self._lock:
            return self._type_rv.get(rt.key, 0)

    def get(self, rt: ResourceType, name: str, *, namespace: str | None = None) -> Obj:
        with self._lock:
            found: Obj = _clone(self._must(rt, name, namespace))
        return found

    def get_ref(self, rt: ResourceType, name: str, *, namespace: str | None = None) -> Obj:
        """The stored object itself (do not mutate): for serializing without a copy."""
        with self._lock:
            return self._must(rt, name, namespace)

    def list(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], str]:
        refs, rv, _ = self.list_refs(
            rt, namespace=namespace, label_selector=label_selector, field_selector=field_selector
        )
        return [_clone(o) for o in refs], rv

    def list_refs(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> tuple[builtins.list[Obj], str, str | None]:
        """Stored objects (do not mutate), the list resourceVersion, and a continue token."""
        match = self._matcher(rt, label_selector, field_selector)
        start: tuple[str, str] | None = None
        with self._lock:
            if continue_token:
                token_rv, start = self._decode_continue(continue_token)
                if token_rv < self._compacted:
                    raise expired(
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter."
                    )
            else:
                self._check_version(resource_version)
            bucket = self._objects.get(rt.key, {})
            if namespace is not None and rt.namespaced:
                keys = [k for k in bucket if k[0] == namespace]
            else:
                keys = list(bucket)
            rv = self._rv
            keys.sort()
            if start is not None:
                keys = keys[bisect.bisect_right(keys, start) :]
            objs = [bucket[k] for k in keys]
        if match is not None:
            objs = [o for o in objs if match(o)]
        token = None
        if limit and limit > 0 and len(objs) > limit:
            objs = objs[:limit]
            last = objs[-1]["metadata"]
            token = self._encode_continue(rv, (last.get("namespace", ""), last["name"]))
        return objs, str(rv), token

    def encode(self, objs: builtins.list[Obj]) -> builtins.list[bytes]:
        """JSON for stored objects (from list_refs/get_ref), reusing the encoding made at write."""
        encoded = self._encoded
        out = []
        for obj in objs:
            hit = encoded.get(obj["metadata"]["uid"])
            out.append(hit[1] if hit is not None and hit[0] is obj else orjson.dumps(obj))
        return out

    @staticmethod
    def _encode_continue(rv: int, start: tuple[str, str]) -> str:
        raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(start)})
        return base64.urlsafe_b64encode(raw).decode()

    @staticmethod
    def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
        try:
            data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
            return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
        except (ValueError, KeyError, IndexError, TypeError, binascii.Error) as exc:
            raise bad_request(f"continue key is not valid: {exc}") from exc

    def _check_version(self, resource_version: str | None) -> int | None:
        """Validate a requested resourceVersion: None for ""/"0"; 410 when compacted away."""
        if resource_version in (None, "", "0"):
            return None
        assert resource_version is not None
        try:
            wanted = int(resource_version)
        except ValueError as exc:
            raise bad_request(
                f'resourceVersion: Invalid value: "{resource_version}": must be an integer'
            ) from exc
        if wanted < self._compacted:
            raise expired(f"too old resource version: {wanted} ({self._compacted})")
        return wanted

    def _matcher(
        self, rt: ResourceType, label_selector: str | None, field_selector: str | None
    ) -> Callable[[Mapping[str, Any]], bool] | None:
        try:
            return selectors.matcher(label_selector, field_selector, rt.field_labels)
        except selectors.SelectorError as exc:
            raise bad_request(str(exc)) from exc

    def _must(self, rt: ResourceType, name: str, namespace: str | None) -> Obj:
        ns = (namespace or "default") if rt.namespaced else ""
        found = self._objects.get(rt.key, {}).get((ns, name))
        if found is None:
            raise not_found(rt, name)
        return found

    # ------------------------------------------------------------------ admission

    def add_admission(self, rt: ResourceType, hook: Hook) -> None:
        """Register a validation hook called with (old or None, new) before a create/update/patch
        is stored; it must not mutate either object and refuses a write by raising ApiError."""
        with self._lock:
            self._admission.setdefault(rt.key, []).append(hook)

    def _admit(self, rt: ResourceType, old: Obj | None, new: Obj) -> None:
        for hook in self._admission.get(rt.key, ()):
            hook(old, new)

    # ------------------------------------------------------------------ create

    def create(
        self,
        rt: ResourceType,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        keep_status: bool = True,
    ) -> Obj:
        """Create an object. In-process callers may seed a status (keep_status, the default);
        the HTTP layer passes keep_status=False and, like the real server, a given status is
        then dropped for kinds with a status subresource (nodes excepted)."""
        body = _body(obj)
        self._check_kind(rt, body)
        meta = body["metadata"]
        if not keep_status and "status" in rt.subresources and rt.key != ("", "v1", "nodes"):
            body.pop("status", None)
        with self._lock:
            ns = self._namespace_for(rt, meta, namespace)
            name = meta.get("name") or ""
            bucket = self._objects.setdefault(rt.key, {})
            self._types[rt.key] = rt
            if not name:
                prefix = meta.get("generateName") or ""
                if not prefix:
                    raise invalid(
                        rt, "", "metadata.name", "Required value: name or generateName is required"
                    )
                for _ in range(100):
                    name = prefix + "".join(random.choices(_GENERATE_ALPHABET, k=5))
                    if (ns, name) not in bucket:
                        break
            self._check_name(rt, name)
            if rt.namespaced:
                self._check_namespace_open(ns)
            if (ns, name) in bucket:
                qualified = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{qualified} "{name}" already exists',
                    details=_details(rt, name),
                )
            meta["name"] = name
            if rt.namespaced:
                meta["namespace"] = ns
            else:
                meta.pop("namespace", None)
            for drop in (
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "managedFields",
                "selfLink",
                "resourceVersion",
            ):
                meta.pop(drop, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _timestamp(self._clock())
            meta["generation"] = 1
            self._defaults(rt, body)
            self._admit(rt, None, body)
            if dry_run:
                return _copy(body)
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            bucket[(ns, name)] = body
            self._index(rt, body)
            self._emit(EventType.ADDED, rt, body, old=None)
            out: Obj = _clone(body)
        return out

    def _check_kind(self, rt: ResourceType, body: Obj) -> None:
        kind = body.get("kind")
        api_version = body.get("apiVersion")
        if kind not in (None, "", rt.kind) or api_version not in (None, "", rt.api_version):
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version})"
                if kind in (None, "", rt.kind)
                else f"the object kind {kind!r} does not match the resource {rt.plural!r} "
                f"(expected {rt.kind!r})"
            )
        body["kind"] = rt.kind
        body["apiVersion"] = rt.api_version

    def _namespace_for(self, rt: ResourceType, meta: Obj, namespace: str | None) -> str:
        if not rt.namespaced:
            return ""
        in_body = meta.get("namespace") or ""
        if namespace and in_body and namespace != in_body:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        return str(namespace or in_body or "default")

    def _check_name(self, rt: ResourceType, name: str) -> None:
        if len(name) > 253 or not _NAME_RE.match(name):
            raise invalid(
                rt,
                name,
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower '
                "case alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character",
            )

    def _check_namespace_open(self, ns: str) -> None:
        nsobj = self._objects.get(lookup("namespaces").key, {}).get(("", ns))
        if nsobj is None:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{ns}" not found',
                details={"name": ns, "kind": "namespaces"},
            )
        if nsobj["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f"unable to create new content in namespace {ns} because it is being terminated",
                details={"name": ns, "kind": "namespaces"},
            )

    def _defaults(self, rt: ResourceType, body: Obj) -> None:
        if rt.group != "" or rt.version != "v1":
            return
        if rt.plural == "namespaces":
            labels = body["metadata"].setdefault("labels", {})
            labels["kubernetes.io/metadata.name"] = body["metadata"]["name"]
            body.setdefault("spec", {})
            body["status"] = {"phase": "Active"}
        elif rt.plural == "pods":
            spec = body.setdefault("spec", {})
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("dnsPolicy", "ClusterFirst")
            spec.setdefault("schedulerName", "default-scheduler")
            status = body.get("status") or {}
            status.setdefault("phase", "Pending")
            body["status"] = status

    # ------------------------------------------------------------------ update and patch

    def update(
        self,
        rt: ResourceType,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        body = _body(obj)
        self._check_kind(rt, body)
        meta = body["metadata"]
        name = meta.get("name") or ""
        with self._lock:
            ns = self._namespace_for(rt, meta, namespace)
            current = self._must(rt, name, ns)
            given = meta.get("resourceVersion") or ""
            if not given and not rt.builtin and subresource is None:
                raise invalid(
                    rt,
                    name,
                    "metadata.resourceVersion",
                    "Invalid value: 0x0: must be specified for an update",
                )
            self._preconditions(rt, current, rv=given, uid=meta.get("uid"))
            return self._replace(rt, current, body, subresource=subresource, dry_run=dry_run)

    def _preconditions(
        self, rt: ResourceType, current: Obj, *, rv: str | None, uid: str | None
    ) -> None:
        cmeta = current["metadata"]
        if uid and uid != cmeta["uid"]:
            raise conflict(
                rt,
                cmeta["name"],
                f"Precondition failed: UID in precondition: {uid}, UID in object "
                f"meta: {cmeta['uid']}",
            )
        if rv and rv != cmeta["resourceVersion"]:
            raise conflict(
                rt,
                cmeta["name"],
                "the object has been modified; please apply your "
                "changes to the latest version and try again",
            )

    def patch(
        self,
        rt: ResourceType,
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        patch_type = PatchType(patch_type)
        if patch_type is PatchType.STRATEGIC and not rt.builtin:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml",
            )
        with self._lock:
            if patch_type is PatchType.APPLY:
                found = self._objects.get(rt.key, {}).get(
                    ((namespace or "default") if rt.namespaced else "", name)
                )
                if found is None:
                    # Server-side apply creates what does not exist yet.
                    if not isinstance(body, dict):
                        raise bad_request("an apply patch must be a YAML or JSON object")
                    meta = dict(body.get("metadata") or {})
                    if meta.get("name", name) != name:
                        raise bad_request("the name in the apply patch does not match the URL")
                    meta["name"] = name
                    return self.create(
                        rt,
                        {**body, "metadata": meta},
                        namespace=namespace,
                        dry_run=dry_run,
                        keep_status=False,
                    )
            current = self._must(rt, name, namespace)
            try:
                patched = patching.apply(current, body, patch_type)
            except patching.PatchError as exc:
                if exc.code == 422:
                    raise ApiError(422, "Invalid", str(exc), details=_details(rt, name)) from exc
                if exc.code == 415:
                    raise ApiError(415, "UnsupportedMediaType", str(exc)) from exc
                raise bad_request(str(exc)) from exc
            patched = _body(patched)
            pmeta = patched["metadata"]
            if pmeta.get("name") != name or (
                rt.namespaced and pmeta.get("namespace") != current["metadata"]["namespace"]
            ):
                raise invalid(
                    rt,
                    name,
                    "metadata.name",
                    "Invalid value: the name and namespace of an object cannot change",
                )
            self._check_kind(rt, patched)
            self._preconditions(rt, current, rv=pmeta.get("resourceVersion"), uid=pmeta.get("uid"))
            return self._replace(rt, current, patched, subresource=subresource, dry_run=dry_run)

    def _replace(
        self,
        rt: ResourceType,
        current: Obj,
        new: Obj,
        *,
        subresource: str | None,
        dry_run: bool,
    ) -> Obj:
        """Store `new` (a private dict) in place of `current`; the lock is held."""
        cmeta = current["metadata"]
        if subresource == "status":
            if "status" not in rt.subresources:
                raise not_found(rt, cmeta["name"])
            status = new.get("status")
            new = dict(current)
            new["metadata"] = dict(cmeta)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif subresource is not None:
            raise ApiError(
                404,
                "NotFound",
                f"the server could not find the requested resource ({rt.plural}/{subresource})",
            )
        elif "status" in rt.subresources:
            if "status" in current:
                new["status"] = current["status"]
            else:
                new.pop("status", None)
        meta = new["metadata"]
        for keep in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            if keep in cmeta:
                meta[keep] = cmeta[keep]
            else:
                meta.pop(keep, None)
        meta.pop("managedFields", None)
        meta.pop("selfLink", None)
        meta["resourceVersion"] = cmeta["resourceVersion"]
        if cmeta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or ()) - set(cmeta.get("finalizers") or ())
            if added:
                raise invalid(
                    rt,
                    cmeta["name"],
                    "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted",
                )
        if not meta.get("finalizers"):
            meta.pop("finalizers", None)
        if new == current:
            return _copy(current)  # a no-op write stores nothing and notifies nobody
        if _spec_changed(current, new):
            meta["generation"] = int(cmeta.get("generation", 1)) + 1
        self._admit(rt, current, new)
        if dry_run:
            return _copy(new)
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        ns = cmeta.get("namespace", "")
        self._objects[rt.key][(ns, cmeta["name"])] = new
        self._unindex(current)
        self._index(rt, new)
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and cmeta["uid"] not in self._graceful
        ):
            self._remove(rt, new, already_bumped=True)
            return _copy(new)
        self._emit(EventType.MODIFIED, rt, new, old=current)
        return _copy(new)

    def bind(self, namespace: str, pod_name: str, node_name: str) -> None:
        """The pods/binding subresource: set spec.nodeName once (409 if already bound)."""
        pods = lookup("pods")
        with self._lock:
            current = self._must(pods, pod_name, namespace)
            bound = (current.get("spec") or {}).get("nodeName")
            if bound:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{pod_name}": pod '
                    f'{pod_name} is already assigned to node "{bound}"',
                    details={"name": pod_name, "kind": "pods/binding"},
                )
            if current["metadata"].get("deletionTimestamp"):
                raise conflict(pods, pod_name, "pod is being deleted, cannot be assigned to a host")
            new = _clone(current)
            new.setdefault("spec", {})["nodeName"] = node_name
            status = new.setdefault("status", {})
            conditions = [
                c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"
            ]
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": _timestamp(self._clock()),
                }
            )
            status["conditions"] = conditions
            self._rv += 1
            new["metadata"]["resourceVersion"] = str(self._rv)
            self._objects[pods.key][(namespace, pod_name)] = new
            self._emit(EventType.MODIFIED, pods, new, old=current)

    # ------------------------------------------------------------------ delete and GC

    def delete(
        self,
        rt: ResourceType,
        name: str,
        *,
        namespace: str | None = None,
        propagation: Propagation = Propagation.BACKGROUND,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
        preconditions: Mapping[str, str] | None = None,
    ) -> Obj:
        """Delete one object; returns its last state (with deletionTimestamp when pending)."""
        propagation = Propagation(propagation)
        if rt.key == ("", "v1", "namespaces") and name in _INITIAL_NAMESPACES[:3]:
            raise ApiError(
                403,
                "Forbidden",
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                details={"name": name, "kind": "namespaces"},
            )
        with self._lock:
            current = self._must(rt, name, namespace)
            if preconditions:
                self._preconditions(
                    rt,
                    current,
                    rv=preconditions.get("resourceVersion"),
                    uid=preconditions.get("uid"),
                )
            if dry_run:
                return _copy(current)
            result = self._delete(rt, current, propagation=propagation, grace=grace_period_seconds)
            return _copy(result)

    def delete_collection(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        propagation: Propagation = Propagation.BACKGROUND,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
    ) -> builtins.list[Obj]:
        with self._lock:
            objs, _, _ = self.list_refs(
                rt,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
            )
            out = []
            for obj in objs:
                meta = obj["metadata"]
                current = self._objects.get(rt.key, {}).get(
                    (meta.get("namespace", ""), meta["name"])
                )
                if current is None:
                    continue
                out.append(
                    _clone(
                        current
                        if dry_run
                        else self._delete(
                            rt, current, propagation=propagation, grace=grace_period_seconds
                        )
                    )
                )
            return out

    def _delete(
        self,
        rt: ResourceType,
        current: Obj,
        *,
        propagation: Propagation,
        grace: int | None,
    ) -> Obj:
        """Start or finish deleting `current`; the lock is held. Returns the latest state."""
        cmeta = current["metadata"]
        uid = cmeta["uid"]
        is_pod = rt.key == ("", "v1", "pods")
        if is_pod:
            spec = current.get("spec") or {}
            phase = (current.get("status") or {}).get("phase")
            if grace is None:
                grace = int(spec.get("terminationGracePeriodSeconds", 30))
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
        else:
            grace = 0
        if cmeta.get("deletionTimestamp"):
            # Already terminating: only a shorter grace period changes anything.
            pending = int(cmeta.get("deletionGracePeriodSeconds", 0))
            if is_pod and uid in self._graceful and grace < pending:
                if grace == 0:
                    self._graceful.discard(uid)
                    if not cmeta.get("finalizers"):
                        self._remove(rt, current, already_bumped=False)
                        return current
                else:
                    new = dict(current)
                    new["metadata"] = {
                        **cmeta,
                        "deletionTimestamp": _timestamp(self._clock() + grace),
                        "deletionGracePeriodSeconds": grace,
                    }
                    self._rv += 1
                    new["metadata"]["resourceVersion"] = str(self._rv)
                    self._objects[rt.key][(cmeta.get("namespace", ""), cmeta["name"])] = new
                    self._emit(EventType.MODIFIED, rt, new, old=current)
                    self._schedule(uid, self._clock() + grace)
                    return new
            return current
        if propagation is Propagation.ORPHAN:
            self._orphan_dependents(uid)
        finalizers = list(cmeta.get("finalizers") or ())
        waits_for_dependents = propagation is Propagation.FOREGROUND and bool(
            self._dependents.get(uid)
        )
        if waits_for_dependents and _FOREGROUND not in finalizers:
            finalizers.append(_FOREGROUND)
        if finalizers or grace > 0 or (rt.plural == "namespaces" and rt.group == ""):
            new = dict(current)
            meta = dict(cmeta)
            new["metadata"] = meta
            meta["deletionTimestamp"] = _timestamp(self._clock() + grace)
            meta["deletionGracePeriodSeconds"] = grace
            if finalizers:
                meta["finalizers"] = finalizers
            if rt.plural == "namespaces" and rt.group == "":
                new["status"] = {**(current.get("status") or {}), "phase": "Terminating"}
            if grace > 0:
                self._graceful.add(uid)
                self._schedule(uid, self._clock() + grace)
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            self._objects[rt.key][(cmeta.get("namespace", ""), cmeta["name"])] = new
            self._unindex(current)
            self._index(rt, new)
            self._emit(EventType.MODIFIED, rt, new, old=current)
            if waits_for_dependents:
                for dep_uid in sorted(self._dependents.get(uid, ())):
                    self._delete_uid(dep_uid, Propagation.FOREGROUND)
            if rt.plural == "namespaces" and rt.group == "":
                self._empty_namespace(cmeta["name"])
            return self._objects.get(rt.key, {}).get(
                (cmeta.get("namespace", ""), cmeta["name"]), new
            )
        self._remove(rt, current, already_bumped=False)
        return current

    def _delete_uid(self, uid: str, propagation: Propagation) -> None:
        where = self._by_uid.get(uid)
        if where is None:
            return
        rt, ns, name = where
        obj = self._objects.get(rt.key, {}).get((ns, name))
        if obj is not None:
            self._delete(rt, obj, propagation=propagation, grace=None)

    def _orphan_dependents(self, owner_uid: str) -> None:
        for dep_uid in sorted(self._dependents.get(owner_uid, ())):
            where = self._by_uid.get(dep_uid)
            if where is None:
                continue
            rt, ns, name = where
            dep = self._objects[rt.key][(ns, name)]
            new = dict(dep)
            meta = dict(dep["metadata"])
            new["metadata"] = meta
            refs = [r for r in meta.get("ownerReferences") or () if r.get("uid") != owner_uid]
            if refs:
                meta["ownerReferences"] = refs
            else:
                meta.pop("ownerReferences", None)
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            self._objects[rt.key][(ns, name)] = new
            self._unindex(dep)
            self._index(rt, new)
            self._emit(EventType.MODIFIED, rt, new, old=dep)

    def _empty_namespace(self, ns: str) -> None:
        for key, bucket in list(self._objects.items()):
            rt = self._types[key]
            if not rt.namespaced:
                continue
            for key2 in sorted(k for k in bucket if k[0] == ns):
                obj = bucket.get(key2)
                if obj is not None:
                    self._delete(rt, obj, propagation=Propagation.BACKGROUND, grace=None)
        self._maybe_finish_namespace(ns)

    def _maybe_finish_namespace(self, ns: str) -> None:
        ns_rt = lookup("namespaces")
        nsobj = self._objects.get(ns_rt.key, {}).get(("", ns))
        if nsobj is None or not nsobj["metadata"].get("deletionTimestamp"):
            return
        for key, bucket in self._objects.items():
            if self._types[key].namespaced and any(k[0] == ns for k in bucket):
                return
        if not nsobj["metadata"].get("finalizers"):
            self._remove(ns_rt, nsobj, already_bumped=False)

    def _remove(self, rt: ResourceType, obj: Obj, *, already_bumped: bool) -> None:
        """Drop `obj` from the store, emit DELETED, and collect what depended on it."""
        meta = obj["metadata"]
        uid = meta["uid"]
        ns = meta.get("namespace", "")
        self._objects.get(rt.key, {}).pop((ns, meta["name"]), None)
        self._unindex(obj)
        self._by_uid.pop(uid, None)
        self._graceful.discard(uid)
        final = obj
        if not already_bumped:
            self._rv += 1
            final = dict(obj)
            final["metadata"] = {**meta, "resourceVersion": str(self._rv)}
        self._emit(EventType.DELETED, rt, final, old=None)
        # Background garbage collection of dependents whose owners are now all gone.
        for dep_uid in sorted(self._dependents.pop(uid, set())):
            where = self._by_uid.get(dep_uid)
            if where is None:
                continue
            dep_rt, dep_ns, dep_name = where
            dep = self._objects[dep_rt.key].get((dep_ns, dep_name))
            if dep is None:
                continue
            live = [
                r
                for r in dep["metadata"].get("ownerReferences") or ()
                if r.get("uid") != uid and r.get("uid") in self._by_uid
            ]
            if live:
                continue
            self._delete(dep_rt, dep, propagation=Propagation.BACKGROUND, grace=None)
        # Owners in foreground deletion finish once their last dependent is gone.
        for ref in meta.get("ownerReferences") or ():
            owner_uid = ref.get("uid")
            if not owner_uid or self._dependents.get(owner_uid):
                continue
            where = self._by_uid.get(owner_uid)
            if where is None:
                continue
            o_rt, o_ns, o_name = where
            owner = self._objects[o_rt.key].get((o_ns, o_name))
            if owner and _FOREGROUND in (owner["metadata"].get("finalizers") or ()):
                new = dict(owner)
                new["metadata"] = dict(owner["metadata"])
                rest = [f for f in owner["metadata"]["finalizers"] if f != _FOREGROUND]
                new["metadata"]["finalizers"] = rest
                self._rv += 1
                new["metadata"]["resourceVersion"] = str(self._rv)
                self._objects[o_rt.key][(o_ns, o_name)] = new
                if rest or owner_uid in self._graceful:
                    self._emit(EventType.MODIFIED, o_rt, new, old=owner)
                else:
                    self._remove(o_rt, new, already_bumped=True)
        if rt.namespaced and ns:
            self._maybe_finish_namespace(ns)

    def _index(self, rt: ResourceType, obj: Obj) -> None:
        meta = obj["metadata"]
        uid = meta["uid"]
        self._by_uid[uid] = (rt, meta.get("namespace", ""), meta["name"])
        for ref in meta.get("ownerReferences") or ():
            owner = ref.get("uid") if isinstance(ref, dict) else None
            if owner:
                self._dependents.setdefault(owner, set()).add(uid)

    def _unindex(self, obj: Obj) -> None:
        meta = obj["metadata"]
        uid = meta["uid"]
        for ref in meta.get("ownerReferences") or ():
            owner = ref.get("uid") if isinstance(ref, dict) else None
            deps = self._dependents.get(owner) if owner else None
            if deps is not None:
                deps.discard(uid)
                if not deps:
                    del self._dependents[owner]  # type: ignore[arg-type]

    # ------------------------------------------------------------------ graceful deletion timer

    def _schedule(self, uid: str, deadline: float) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (deadline, self._timer_seq, uid))
        if self._timer_thread is None and not self._closed:
            self._timer_thread = threading.Thread(
                target=self._timer_loop, name="twin-store-grace", daemon=True
            )
            self._timer_thread.start()
        self._timer_cond.notify_all()

    def _timer_loop(self) -> None:
        with self._lock:
            while not self._closed:
                if not self._timers:
                    self._timer_cond.wait()
                    continue
                wait = self._timers[0][0] - self._clock()
                if wait > 0:
                    self._timer_cond.wait(timeout=min(wait, 0.25))
                    continue
                self.expire_due()

    def expire_due(self) -> int:
        """Remove pods whose grace period has passed by the store's clock; returns how many.

        The timer thread calls this; a test with a fake clock may call it after advancing time.
        """
        removed = 0
        with self._lock:
            now = self._clock()
            while self._timers and self._timers[0][0] <= now:
                _, _, uid = heapq.heappop(self._timers)
                if uid not in self._graceful:
                    continue
                where = self._by_uid.get(uid)
                if where is None:
                    self._graceful.discard(uid)
                    continue
                rt, ns, name = where
                obj = self._objects[rt.key][(ns, name)]
                self._graceful.discard(uid)
                if not obj["metadata"].get("finalizers"):
                    self._remove(rt, obj, already_bumped=False)
                    removed += 1
        return removed

    # ------------------------------------------------------------------ watch

    def _emit(self, kind: EventType, rt: ResourceType, obj: Obj, *, old: Obj | None) -> None:
        raw = orjson.dumps(obj)
        uid = obj["metadata"]["uid"]
        if kind is EventType.DELETED:
            self._encoded.pop(uid, None)
        else:
            self._encoded[uid] = (obj, raw)
        event = _Event(self._rv, rt.key, obj["metadata"].get("namespace", ""), kind, obj, old, raw)
        self._type_rv[rt.key] = self._rv
        if len(self._history) >= self._history_limit:
            dropped = self._history.popleft()
            self._compacted = max(self._compacted, dropped.rv)
        self._history.append(event)
        for sub in self._subs:
            if sub.wants(event):
                sub.queue.put(event)

    def _start(self, rt: ResourceType, sub: _Subscription, since: str | None) -> int:
        """Register `sub` and queue what it must see first; the lock is held."""
        wanted = self._check_version(since)
        if since in ("", "0"):
            bucket = self._objects.get(rt.key, {})
            for key in sorted(bucket):
                if sub.namespace is None or key[0] == sub.namespace:
                    obj = bucket[key]
                    raw = self.encode([obj])[0]
                    sub.queue.put(_Event(self._rv, rt.key, key[0], EventType.ADDED, obj, None, raw))
        elif wanted is not None:
            for event in self._events_after(wanted):
                if sub.wants(event):
                    sub.queue.put(event)
        self._subs.append(sub)
        return wanted if wanted is not None else self._rv

    def _events_after(self, rv: int) -> Iterator[_Event]:
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
        *,
        namespace: str | None = None,
        since: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> WatchStream:
        """An HTTP-style watch: since None/""/"0" starts with ADDED for every current object;
        a resourceVersion replays the history after it (410 Expired if compacted away)."""
        match = self._matcher(rt, label_selector, field_selector)
        sub = _Subscription(rt.key, namespace if rt.namespaced else None)
        with self._lock:
            start = self._start(rt, sub, "" if since is None else since)
        return WatchStream(self, sub, match, start)

    def subscribe(
        self,
        rt: ResourceType,
        callback: Callable[[WatchEvent], None],
        *,
        namespace: str | None = None,
        since: str | None = None,
    ) -> Callable[[], None]:
        """In-process watch. since=None: only changes after this call; "0": first an ADDED for
        each current object; a resourceVersion: the retained history after it (410 ApiError if
        compacted away). Callbacks get copies, in order, on this subscription's own delivery
        thread, never under the store lock. Returns the unsubscribe function."""
        sub = _Subscription(rt.key, namespace if rt.namespaced else None)
        with self._lock:
            if since is None:
                self._subs.append(sub)
            else:
                self._start(rt, sub, since)

        def deliver() -> None:
            while True:
                item = sub.queue.get()
                if item is _STOP:
                    return
                event: _Event = item
                try:
                    callback(WatchEvent(event.type.value, _clone(event.obj)))
                except Exception:  # a subscriber's bug must not stop its delivery
                    log.exception("twin store subscriber for %s failed", rt.plural)

        thread = threading.Thread(target=deliver, name=f"twin-watch-{rt.plural}", daemon=True)
        thread.start()

        def unsubscribe() -> None:
            self._unsubscribe(sub)

        return unsubscribe

    def _unsubscribe(self, sub: _Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)
                sub.queue.put(_STOP)

    def _bookmark_rv(self, sub: _Subscription, last: int) -> int:
        with self._lock:
            return self._rv if sub.queue.empty() else last

    # ------------------------------------------------------------------ faults and lifecycle

    def compact(self) -> str:
        """Forget all history: any watch or list at an older resourceVersion now gets 410."""
        with self._lock:
            self._history.clear()
            self._compacted = self._rv
            return str(self._compacted)

    def close_watches(self) -> int:
        """End every open subscription and watch stream (a fault, or shutdown)."""
        with self._lock:
            subs, self._subs = self._subs, []
            for sub in subs:
                sub.queue.put(_STOP)
            return len(subs)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._timer_cond.notify_all()
        self.close_watches()

    def counts(self) -> dict[str, int]:
        """Number of stored objects per plural (with group), for stats."""
        with self._lock:
            return {
                f"{k[2]}.{k[0]}" if k[0] else k[2]: len(v) for k, v in self._objects.items() if v
            }


def _spec_changed(old: Obj, new: Obj) -> bool:
    ignore = ("metadata", "status", "kind", "apiVersion")
    keys = (set(old) | set(new)) - set(ignore)
    return any(old.get(k) != new.get(k) for k in keys)
