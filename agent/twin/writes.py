"""Writes in the twin's store: create, update, the three patch formats, and pod binding.

What the real API server does on each write: kind and apiVersion checked against the resource,
names validated (RFC 1123 subdomain, generateName), server fields set (uid, creationTimestamp,
generation bumped when the spec changes, resourceVersion), defaults for namespaces, pods and secrets, 409
AlreadyExists (checked after admission, as the storage layer does) / Conflict on a stale
resourceVersion or uid precondition (DeleteOptions.preconditions worded as the registry words them),
status kept apart from the main resource when the kind has a status subresource, no new finalizers
on a terminating object, mutating then validating admission hooks (registered for the main
resource, not its status), a gated pod marked `PodScheduled=False, SchedulingGated`, dry runs
(everything checked, nothing stored), and a no-op write storing nothing. Server-side apply creates
what does not exist yet. A custom resource whose CRD the store holds is decoded as the API server
decodes it from the CRD's structural schema (crd_schema.py): undeclared fields pruned
(`fieldValidation=Strict`: 400 naming them; `Warn`, the default: a warning each), defaults filled
in, the `self == oldSelf` rules enforced (422 Invalid), map lists merged by key in an apply patch.

Used by the store facade (store.py) under the store's lock. It does not delete (deletion.py) or
serve watches (watch.py).
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from agent.twin import crd_schema, crds, managed_fields
from agent.twin import patch as patching
from agent.twin.apierror import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    details,
    invalid,
    not_found,
    unsupported_media_type,
)
from agent.twin.deletion import NAMESPACES_KEY, Deletion, timestamp
from agent.twin.objects import ObjectTable
from agent.twin.patch import PatchType
from agent.twin.resources import ResourceType, lookup
from agent.twin.watch import EventType

Obj = dict[str, Any]
Hook = Callable[[Obj | None, Obj], None]
# A mutating admission hook: (old or None, new) -> None, changing `new` in place.
Mutator = Callable[[Obj | None, Obj], None]
STRICT = "Strict"
IGNORE = "Ignore"

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SERVER_SET = (
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "resourceVersion",
)
_KEPT_ON_WRITE = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)


def copy(obj: Obj) -> Obj:
    """A deep copy through JSON (the stored objects are plain JSON)."""
    copied: Obj = orjson.loads(orjson.dumps(obj))
    return copied


def body_of(obj: Any) -> Obj:
    """A private deep copy of a caller's object, refusing what is not a JSON object."""
    if not isinstance(obj, dict):
        raise bad_request("the request body must be a JSON object")
    try:
        copied = copy(obj)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise bad_request(f"the object is not valid JSON: {exc}") from exc
    meta = copied.get("metadata")
    if meta is None:
        copied["metadata"] = {}
    elif not isinstance(meta, dict):
        raise bad_request("metadata must be a JSON object")
    return copied


def _spec_changed(old: Obj, new: Obj) -> bool:
    ignore = ("metadata", "status", "kind", "apiVersion")
    keys = (set(old) | set(new)) - set(ignore)
    return any(old.get(k) != new.get(k) for k in keys)


class Writes:
    """Create, update, patch and bind against the object table; the lock is held by the caller."""

    def __init__(
        self, table: ObjectTable, deletion: Deletion, *, clock: Callable[[], float]
    ) -> None:
        self._table = table
        self._deletion = deletion
        self._clock = clock
        self._admission: dict[tuple[str, str, str], list[Hook]] = {}
        self._mutation: dict[tuple[str, str, str], list[Mutator]] = {}

    # ------------------------------------------------------------------ admission

    def add_admission(self, rt: ResourceType, hook: Hook) -> None:
        self._admission.setdefault(rt.key, []).append(hook)

    def add_mutation(self, rt: ResourceType, hook: Mutator) -> None:
        self._mutation.setdefault(rt.key, []).append(hook)

    def _admit(self, rt: ResourceType, old: Obj | None, new: Obj) -> None:
        for hook in self._admission.get(rt.key, ()):
            hook(old, new)

    def _mutate(self, rt: ResourceType, old: Obj | None, new: Obj) -> None:
        for hook in self._mutation.get(rt.key, ()):
            hook(old, new)

    # ------------------------------------------------------------------ custom resources

    def schema(self, rt: ResourceType) -> crd_schema.Schema | None:
        """The structural schema of a custom resource's version, from its stored CRD."""
        if rt.builtin:
            return None
        crd = self._table.find(crds.CRDS, "", crds.crd_name(rt))
        return crds.version_schema(crd, rt.version) if crd is not None else None

    def _decode(
        self,
        rt: ResourceType,
        body: Obj,
        *,
        field_validation: str | None,
        warnings: list[str] | None,
    ) -> Obj:
        """Prune undeclared fields and fill in defaults, as the server decodes a custom resource."""
        schema = self.schema(rt)
        if schema is None:
            return body
        pruned, dropped = crd_schema.prune(body, schema)
        if dropped and field_validation == STRICT:
            unknown = ", ".join(f'unknown field "{path}"' for path in dropped)
            raise bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                f"strict decoding error: {unknown}"
            )
        if dropped and field_validation != IGNORE and warnings is not None:
            warnings.extend(f'unknown field "{path}"' for path in dropped)
        return crd_schema.apply_defaults(pruned, schema)

    def _check_transitions(self, rt: ResourceType, current: Obj, new: Obj) -> None:
        """422 when an update breaks a `self == oldSelf` rule of the CRD's schema."""
        schema = self.schema(rt)
        if schema is None:
            return
        errors = crd_schema.transition_errors(current, new, schema)
        if errors:
            first = errors[0]
            raise invalid(rt, current["metadata"]["name"], first.path,
                          f'Invalid value: "{first.type}": {first.message}')  # fmt: skip

    # ------------------------------------------------------------------ create

    def create(
        self,
        rt: ResourceType,
        obj: Mapping[str, Any],
        *,
        namespace: str | None,
        dry_run: bool,
        keep_status: bool,
        field_validation: str | None = None,
        warnings: list[str] | None = None,
        applied: Obj | None = None,
    ) -> Obj:
        body = body_of(obj)
        check_kind(rt, body)
        body = self._decode(rt, body, field_validation=field_validation, warnings=warnings)
        meta = body["metadata"]
        if not keep_status and "status" in rt.subresources and rt.key != ("", "v1", "nodes"):
            body.pop("status", None)
        table = self._table
        ns = namespace_for(rt, meta, namespace)
        name = meta.get("name") or ""
        bucket = table.bucket(rt)
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
        check_name(rt, name)
        if rt.namespaced:
            self._check_namespace_open(ns)
        meta["name"] = name
        if rt.namespaced:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        for drop in _SERVER_SET:
            meta.pop(drop, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = timestamp(self._clock())
        meta["generation"] = 1
        _defaults(rt, body)
        body = self._stamp(rt, None, body, subresource=None, applied=applied)
        self._mutate(rt, None, body)
        self._admit(rt, None, body)
        # the name is checked against the store after admission, as the server's storage layer
        # does: a dry run of an object whose name is taken runs every admission check first
        if (ns, name) in bucket:
            raise already_exists(rt, name)
        if dry_run:
            return copy(body)
        table.bump(meta)
        table.put(rt, body, old=None)
        table.hub.emit(EventType.ADDED, rt, body, old=None)
        return copy(body)

    def _check_namespace_open(self, ns: str) -> None:
        nsobj = self._table.find(lookup("namespaces"), "", ns)
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

    # ------------------------------------------------------------------ update and patch

    def update(
        self,
        rt: ResourceType,
        obj: Mapping[str, Any],
        *,
        namespace: str | None,
        subresource: str | None,
        dry_run: bool,
        field_validation: str | None = None,
        warnings: list[str] | None = None,
    ) -> Obj:
        body = body_of(obj)
        check_kind(rt, body)
        body = self._decode(rt, body, field_validation=field_validation, warnings=warnings)
        meta = body["metadata"]
        name = meta.get("name") or ""
        ns = namespace_for(rt, meta, namespace)
        current = self._table.must(rt, name, ns)
        given = meta.get("resourceVersion") or ""
        if not given and not rt.builtin and subresource is None:
            raise invalid(
                rt,
                name,
                "metadata.resourceVersion",
                "Invalid value: 0x0: must be specified for an update",
            )
        check_preconditions(rt, current, rv=given, uid=meta.get("uid"))
        return self._replace(rt, current, body, subresource=subresource, dry_run=dry_run)

    def patch(
        self,
        rt: ResourceType,
        name: str,
        body: Any,
        *,
        namespace: str | None,
        patch_type: PatchType,
        subresource: str | None,
        dry_run: bool,
        field_validation: str | None = None,
        warnings: list[str] | None = None,
    ) -> Obj:
        if patch_type is PatchType.STRATEGIC and not rt.builtin:
            raise unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml"
            )
        if patch_type is PatchType.APPLY:
            ns = (namespace or "default") if rt.namespaced else ""
            if self._table.find(rt, ns, name) is None:
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
                    field_validation=field_validation,
                    warnings=warnings,
                    applied=body,
                )
        current = self._table.must(rt, name, namespace)
        try:
            patched = patching.apply(current, body, patch_type, schema=self.schema(rt))
        except patching.PatchError as exc:
            if exc.code == 422:
                raise ApiError(422, "Invalid", str(exc), details=details(rt, name)) from exc
            if exc.code == 415:
                raise unsupported_media_type(str(exc)) from exc
            raise bad_request(str(exc)) from exc
        patched = body_of(patched)
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
        check_kind(rt, patched)
        check_preconditions(rt, current, rv=pmeta.get("resourceVersion"), uid=pmeta.get("uid"))
        patched = self._decode(rt, patched, field_validation=field_validation, warnings=warnings)
        applied = body if patch_type is PatchType.APPLY else None
        return self._replace(rt, current, patched, subresource=subresource, dry_run=dry_run,
                             applied=applied)  # fmt: skip

    def _stamp(self, rt: ResourceType, old: Obj | None, new: Obj, *, subresource: str | None,
               applied: Obj | None) -> Obj:  # fmt: skip
        """Record the write's field manager in `new`'s managedFields (managed_fields.py)."""
        return managed_fields.stamp(rt, old, new, now=timestamp(self._clock()),
                                    schema=self.schema(rt), subresource=subresource,
                                    applied=applied)  # fmt: skip

    def _replace(
        self,
        rt: ResourceType,
        current: Obj,
        new: Obj,
        *,
        subresource: str | None,
        dry_run: bool,
        applied: Obj | None = None,
    ) -> Obj:
        """Store `new` (a private dict) in place of `current`."""
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
        for keep in _KEPT_ON_WRITE:
            if keep in cmeta:
                meta[keep] = cmeta[keep]
            else:
                meta.pop(keep, None)
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
        main = subresource != "status"  # admission hooks are registered for the main resource
        new = self._stamp(rt, current, new, subresource=subresource, applied=applied)
        meta = new["metadata"]
        if main:
            self._mutate(rt, current, new)
        if new == current:
            return copy(current)  # a no-op write stores nothing and notifies nobody
        self._check_transitions(rt, current, new)
        if _spec_changed(current, new):
            meta["generation"] = int(cmeta.get("generation", 1)) + 1
        if main:
            self._admit(rt, current, new)
        if dry_run:
            return copy(new)
        table = self._table
        table.bump(meta)
        table.put(rt, new, old=current)
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and cmeta["uid"] not in self._deletion.timer.pending
        ):
            self._deletion.remove(rt, new, already_bumped=True)
            return copy(new)
        table.hub.emit(EventType.MODIFIED, rt, new, old=current)
        return copy(new)

    # ------------------------------------------------------------------ binding

    def bind(self, namespace: str, pod_name: str, node_name: str) -> None:
        pods = lookup("pods")
        current = self._table.must(pods, pod_name, namespace)
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
        new = copy(current)
        new.setdefault("spec", {})["nodeName"] = node_name
        status = new.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastTransitionTime": timestamp(self._clock()),
            }
        )
        status["conditions"] = conditions
        self._table.modify(pods, current, new)


def check_kind(rt: ResourceType, body: Obj) -> None:
    """Refuse a body of another kind or apiVersion; fill them in when absent."""
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


def namespace_for(rt: ResourceType, meta: Obj, namespace: str | None) -> str:
    """The object's namespace from the URL or the body (they must agree), default "default"."""
    if not rt.namespaced:
        return ""
    in_body = meta.get("namespace") or ""
    if namespace and in_body and namespace != in_body:
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on "
            "the request"
        )
    return str(namespace or in_body or "default")


def check_name(rt: ResourceType, name: str) -> None:
    if len(name) > 253 or not _NAME_RE.match(name):
        raise invalid(
            rt,
            name,
            "metadata.name",
            f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower '
            "case alphanumeric characters, '-' or '.', and must start and end with an "
            "alphanumeric character",
        )


def check_preconditions(rt: ResourceType, current: Obj, *, rv: str | None, uid: str | None) -> None:
    """409 Conflict when a given uid or resourceVersion is not the stored one."""
    cmeta = current["metadata"]
    if uid and uid != cmeta["uid"]:
        raise conflict(
            rt,
            cmeta["name"],
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: {cmeta['uid']}",
        )
    if rv and rv != cmeta["resourceVersion"]:
        raise conflict(
            rt,
            cmeta["name"],
            "the object has been modified; please apply your "
            "changes to the latest version and try again",
        )


def check_delete_preconditions(
    rt: ResourceType, current: Obj, *, uid: str | None, rv: str | None
) -> None:
    """409 Conflict when DeleteOptions.preconditions name another uid or resourceVersion than the
    stored object's, worded as the API server's registry words it (the kind, qualified by its
    group, names the resource)."""
    cmeta = current["metadata"]
    resource = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    found = {"name": cmeta["name"], "group": rt.group, "kind": rt.kind}
    if uid and uid != cmeta["uid"]:
        why = (f"the UID in the precondition ({uid}) does not match the UID in record "
               f"({cmeta['uid']}). The object might have been deleted and then recreated")
    elif rv and rv != cmeta["resourceVersion"]:
        why = (f"the ResourceVersion in the precondition ({rv}) does not match the "
               f"ResourceVersion in record ({cmeta['resourceVersion']}). The object might have "
               "been modified")
    else:
        return
    raise ApiError(409, "Conflict",
                   f'Operation cannot be fulfilled on {resource} "{cmeta["name"]}": {why}',
                   details=found)  # fmt: skip


def _defaults(rt: ResourceType, body: Obj) -> None:
    if rt.group != "" or rt.version != "v1":
        return
    if rt.key == NAMESPACES_KEY:
        labels = body["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = body["metadata"]["name"]
        body.setdefault("spec", {})
        body["status"] = {"phase": "Active"}
    elif rt.plural == "secrets" and not body.get("type"):
        body["type"] = "Opaque"
    elif rt.plural == "pods":
        spec = body.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        status = body.get("status") or {}
        status.setdefault("phase", "Pending")
        if spec.get("schedulingGates"):
            # The pod strategy marks a gated pod at creation; kube-scheduler leaves it alone.
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                               "message": "Scheduling is blocked due to non-empty scheduling gates",
                               "lastProbeTime": None, "lastTransitionTime": None})  # fmt: skip
            status["conditions"] = conditions
        body["status"] = status
