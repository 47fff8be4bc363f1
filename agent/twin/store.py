"""The twin's object store: in-memory Kubernetes objects with API-server semantics.

The facade every caller uses. It holds every object the twin serves, keyed by resource type,
namespace and name, under one global resourceVersion counter and one lock, and implements what the
real API server does on each verb: reads (get, list with selectors and limit/continue at a
resourceVersion) here; create, update, the three patch formats and binding in writes.py; delete
with propagation, garbage collection, finalizers and graceful pod deletion in deletion.py; the
event history and watch fan-out in watch.py; the objects and their indexes in objects.py. A new
store holds the initial namespaces and the CustomResourceDefinitions of the custom kinds the twin
serves (crds.py, for a Kubeflow Trainer release); writes to a custom resource follow its CRD.

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
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from agent.twin import crds, selectors, webhook_configs
from agent.twin.admission_webhooks import WebhookAdmission
from agent.twin.apierror import ApiError, bad_request, expired
from agent.twin.crds import DEFAULT_RELEASE, TrainerRelease
from agent.twin.deletion import NAMESPACES_KEY, Deletion, Propagation
from agent.twin.objects import ObjectTable
from agent.twin.patch import PatchType
from agent.twin.resources import OPTIONAL_GROUPS, ResourceType, lookup
from agent.twin.watch import Matcher, WatchEvent, WatchStream
from agent.twin.writes import Hook, Mutator, Writes, check_delete_preconditions, copy

Obj = dict[str, Any]

INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_UNDELETABLE_NAMESPACES = INITIAL_NAMESPACES[:3]


class Store:
    """Thread-safe in-memory API objects; see the module docstring."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        history_limit: int = 100_000,
        trainer_release: TrainerRelease = DEFAULT_RELEASE,
    ) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._table = ObjectTable(self._lock, history_limit=history_limit)
        # (resource, namespace) -> (resourceVersion, sorted keys): reused by the next pages of a
        # paged list while nothing was written (one sort per list, not per page)
        self._sorted_keys: dict[tuple[Any, str | None], tuple[int, builtins.list[Any]]] = {}
        self._hub = self._table.hub
        self._deletion = Deletion(self._table, self._lock, clock=clock)
        self._writes = Writes(self._table, self._deletion, clock=clock)
        webhook_configs.register(self._writes)
        self._webhooks = WebhookAdmission(self)
        self._installed: set[str] = set()  # optional API groups whose CRDs are installed
        ns = lookup("namespaces")
        for name in INITIAL_NAMESPACES:
            self.create(ns, {"metadata": {"name": name}})
        self.install_crds(trainer_release)

    # ------------------------------------------------------------------ served groups

    def install_group(self, group: str) -> None:
        """Serve an optional API group (its CRDs installed), e.g. Kueue's."""
        if group not in OPTIONAL_GROUPS:
            raise ValueError(f"{group!r} is not an optional API group")
        with self._lock:
            self._installed.add(group)

    def serves(self, rt: ResourceType) -> bool:
        """Whether the API serves this kind: every kind but those of an optional group that is not
        installed. In-process callers are not checked; discovery and the HTTP routes are."""
        return rt.group not in OPTIONAL_GROUPS or rt.group in self._installed

    def install_crds(self, release: TrainerRelease = DEFAULT_RELEASE) -> None:
        """Create the CustomResourceDefinition of every custom kind the twin serves (crds.py, for
        a Kubeflow Trainer release), or replace the stored one (a release switch), keeping its
        identity; one that is already as wanted is not written."""
        for doc in crds.crd_documents(release):
            name = doc["metadata"]["name"]
            try:
                current = self.get_ref(crds.CRDS, name)
            except ApiError:
                current = None
            if current is None:
                self.create(crds.CRDS, doc)
                continue
            annotations = current["metadata"].get("annotations") or {}
            if current.get("spec") == doc["spec"] and annotations == doc["metadata"]["annotations"]:
                continue
            version = current["metadata"]["resourceVersion"]
            metadata = {**doc["metadata"], "resourceVersion": version}
            self.update(crds.CRDS, {**doc, "metadata": metadata})

    # ------------------------------------------------------------------ reading

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._table.rv)

    def type_version(self, rt: ResourceType) -> int:
        """The resourceVersion of the last write to any object of this type (0 if none)."""
        return self._hub.type_version(rt.key)

    def get(self, rt: ResourceType, name: str, *, namespace: str | None = None) -> Obj:
        with self._lock:
            return copy(self._table.must(rt, name, namespace))

    def get_ref(self, rt: ResourceType, name: str, *, namespace: str | None = None) -> Obj:
        """The stored object itself (do not mutate): for serializing without a copy."""
        with self._lock:
            return self._table.must(rt, name, namespace)

    def list(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[builtins.list[Obj], str]:
        refs, rv, _ = self.list_refs(
            rt, namespace=namespace, label_selector=label_selector, field_selector=field_selector
        )
        return [copy(o) for o in refs], rv

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
        match = _matcher(rt, label_selector, field_selector)
        start: tuple[str, str] | None = None
        with self._lock:
            if continue_token:
                token_rv, start = _decode_continue(continue_token)
                if token_rv < self._hub.compacted:
                    raise expired(
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter."
                    )
            else:
                self._hub.check_version(resource_version)
            bucket = self._table.objects.get(rt.key, {})
            rv = self._table.rv
            scope = namespace if rt.namespaced else None
            cached = self._sorted_keys.get((rt.key, scope))
            if cached is not None and cached[0] == rv:
                keys = cached[1]  # no write since: the pages of one list sort once
            else:
                if scope is not None:
                    keys = [k for k in bucket if k[0] == scope]
                else:
                    keys = builtins.list(bucket)
                keys.sort()
                self._sorted_keys[(rt.key, scope)] = (rv, keys)
            first = bisect.bisect_right(keys, start) if start is not None else 0
            if match is None and limit and limit > 0:
                chosen = keys[first : first + limit + 1]  # one more: is there a next page?
            else:
                chosen = keys[first:] if first else keys
            objs = [bucket[k] for k in chosen]
        if match is not None:
            objs = [o for o in objs if match(o)]
        token = None
        if limit and limit > 0 and len(objs) > limit:
            objs = objs[:limit]
            last = objs[-1]["metadata"]
            token = _encode_continue(rv, (last.get("namespace", ""), last["name"]))
        return objs, str(rv), token

    def encode(self, objs: builtins.list[Obj]) -> builtins.list[bytes]:
        """JSON for stored objects (from list_refs/get_ref), reusing the encoding made at write."""
        return self._hub.encode(objs)

    # ------------------------------------------------------------------ writes

    def add_admission(self, rt: ResourceType, hook: Hook) -> None:
        """Register a validation hook called with (old or None, new) before a create/update/patch
        is stored; it must not mutate either object and refuses a write by raising ApiError."""
        with self._lock:
            self._writes.add_admission(rt, hook)

    def add_mutation(self, rt: ResourceType, hook: Mutator) -> None:
        """Register a mutating admission hook called with (old or None, new) before validation;
        it may change `new` in place (a defaulting webhook) or refuse by raising ApiError."""
        with self._lock:
            self._writes.add_mutation(rt, hook)

    def create(
        self,
        rt: ResourceType,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        keep_status: bool = True,
        field_validation: str | None = None,
        warnings: builtins.list[str] | None = None,
        user: Mapping[str, Any] | None = None,
    ) -> Obj:
        """Create an object. In-process callers may seed a status (keep_status, the default);
        the HTTP layer passes keep_status=False and, like the real server, a given status is
        then dropped for kinds with a status subresource (nodes excepted). `field_validation`
        is the request's (Strict, Warn, Ignore); the warnings the server sends are appended to
        `warnings` when given. The registered mutating admission webhooks are called first,
        outside the store's lock (admission_webhooks.py), with `user` (the AdmissionReview's
        userInfo; None: the twin's controllers)."""
        obj = self._webhooks.admit_create(rt, obj, namespace=namespace, dry_run=dry_run,
                                          user=user, warnings=warnings)
        with self._lock:
            return self._writes.create(
                rt, obj, namespace=namespace, dry_run=dry_run, keep_status=keep_status,
                field_validation=field_validation, warnings=warnings,
            )  # fmt: skip

    def update(
        self,
        rt: ResourceType,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: str | None = None,
        warnings: builtins.list[str] | None = None,
    ) -> Obj:
        with self._lock:
            return self._writes.update(
                rt, obj, namespace=namespace, subresource=subresource, dry_run=dry_run,
                field_validation=field_validation, warnings=warnings,
            )  # fmt: skip

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
        field_validation: str | None = None,
        warnings: builtins.list[str] | None = None,
    ) -> Obj:
        with self._lock:
            return self._writes.patch(
                rt,
                name,
                body,
                namespace=namespace,
                patch_type=PatchType(patch_type),
                subresource=subresource,
                dry_run=dry_run,
                field_validation=field_validation,
                warnings=warnings,
            )

    def bind(self, namespace: str, pod_name: str, node_name: str) -> None:
        """The pods/binding subresource: set spec.nodeName once (409 if already bound)."""
        with self._lock:
            self._writes.bind(namespace, pod_name, node_name)

    # ------------------------------------------------------------------ delete

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
        if rt.key == NAMESPACES_KEY and name in _UNDELETABLE_NAMESPACES:
            raise ApiError(
                403,
                "Forbidden",
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                details={"name": name, "kind": "namespaces"},
            )
        with self._lock:
            current = self._table.must(rt, name, namespace)
            if preconditions:
                check_delete_preconditions(
                    rt,
                    current,
                    rv=preconditions.get("resourceVersion"),
                    uid=preconditions.get("uid"),
                )
            if dry_run:
                return copy(
                    self._deletion.preview(
                        rt, current, propagation=propagation, grace=grace_period_seconds
                    )
                )
            return copy(
                self._deletion.delete(
                    rt, current, propagation=propagation, grace=grace_period_seconds
                )
            )

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
                current = self._table.find(rt, meta.get("namespace", ""), meta["name"])
                if current is None:
                    continue
                act = self._deletion.preview if dry_run else self._deletion.delete
                out.append(
                    copy(act(rt, current, propagation=propagation, grace=grace_period_seconds))
                )
            return out

    def expire_due(self) -> int:
        """Remove pods whose grace period has passed by the store's clock; returns how many.

        The timer thread calls this; a test with a fake clock may call it after advancing time.
        """
        with self._lock:
            return self._deletion.expire_due()

    # ------------------------------------------------------------------ watch

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
        match = _matcher(rt, label_selector, field_selector)
        with self._lock:
            return self._hub.open_watch(
                rt,
                self._table.objects.get(rt.key, {}),
                namespace=namespace,
                since="" if since is None else since,
                match=match,
            )

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
        with self._lock:
            return self._hub.subscribe(
                rt,
                self._table.objects.get(rt.key, {}),
                callback,
                namespace=namespace,
                since=since,
            )

    # ------------------------------------------------------------------ faults and lifecycle

    def compact(self) -> str:
        """Forget all history: any watch or list at an older resourceVersion now gets 410."""
        return self._hub.compact()

    def close_watches(self) -> int:
        """End every open subscription and watch stream (a fault, or shutdown)."""
        return self._hub.close_all()

    def close(self) -> None:
        self._deletion.timer.close()
        self.close_watches()

    def counts(self) -> dict[str, int]:
        """Number of stored objects per plural (with group), for stats."""
        with self._lock:
            return self._table.counts()


def _matcher(
    rt: ResourceType, label_selector: str | None, field_selector: str | None
) -> Matcher | None:
    try:
        return selectors.matcher(label_selector, field_selector, rt.field_labels,
                                 dict(rt.field_paths))  # fmt: skip
    except selectors.SelectorError as exc:
        raise bad_request(str(exc)) from exc


def _encode_continue(rv: int, start: tuple[str, str]) -> str:
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(start)})
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, KeyError, IndexError, TypeError, binascii.Error) as exc:
        raise bad_request(f"continue key is not valid: {exc}") from exc
