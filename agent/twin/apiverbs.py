"""The resource verbs of the twin's API: one request on a resource route, served from the store.

For a resolved route it names the verb (get, list, watch, create, update, patch, delete,
deletecollection), authorizes it with RBAC attributes as the real server builds them, counts it,
applies an injected fault, and serves it: objects or lists (JSON spliced from the store's
per-object encoding, or a server-side Table for kubectl), the binding subresource, the pods'
streaming subresources (log, exec, attach, portforward: apipodstreams.py), the three patch
content types (415 naming the accepted ones otherwise), DeleteOptions (propagationPolicy,
gracePeriodSeconds, preconditions, dryRun), `dryRun=All` and `fieldValidation` on every write
(the server's warnings, e.g. a pruned unknown field, in `Warning` headers), and an injected
admission refusal (a webhook's denial or an exhausted quota, 403 worded as the server words them;
checked before the store, as admission runs before storage). SelfSubjectAccessReview is answered
here too.

Used by the HTTP handler (apihandler.py). It does not parse HTTP or resolve paths.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import orjson

from agent.twin import managed_fields, tables
from agent.twin import patch as patching
from agent.twin.apidiscovery import Route
from agent.twin.apierror import ApiError, bad_request, conflict, qualified
from agent.twin.apiexchange import Exchange
from agent.twin.apipodstreams import STREAMING, serve_pod_stream, verb_for
from agent.twin.apiquery import Query
from agent.twin.apistate import ApiState
from agent.twin.apiwatch import serve_watch
from agent.twin.auth import Attributes, UserInfo, access_review, forbidden
from agent.twin.deletion import Propagation
from agent.twin.faults import WRITE_VERBS, AuditEntry, RefusalKind, WriteRecord
from agent.twin.patch import PatchType
from agent.twin.scale import as_scale, replicas_of
from agent.twin.selectors import SelectorError, parse_fields

_PATCH_TYPES = {t.value: t for t in PatchType}


def warning_header(warnings: list[str]) -> str:
    """RFC 7234 warnings as the API server sends them: `299 - "text"`, comma separated."""
    quoted = (w.replace("\\", "\\\\").replace('"', '\\"') for w in warnings)
    return ", ".join(f'299 - "{w}"' for w in quoted)


def verb_of(method: str, route: Route, query: Query) -> str:
    """The Kubernetes verb of an HTTP method on a route (405 for a method the API lacks)."""
    if method == "GET":
        if route.name is None:
            return "watch" if query.flag("watch") else "list"
        return "get"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if route.name else "deletecollection"
    raise ApiError(405, "MethodNotAllowed", f"the server does not allow method {method}")


class ResourceRequest:
    """One request on a resource route; `serve()` answers it through the exchange."""

    def __init__(
        self,
        api: ApiState,
        ex: Exchange,
        *,
        method: str,
        route: Route,
        query: Query,
        user: UserInfo,
    ) -> None:
        self.api = api
        self.ex = ex
        self.method = method
        self.route = route
        self.rt = route.rt
        self.query = query
        self.user = user
        self.verb = verb_of(method, route, query)
        self.streaming = (route.rt.key == ("", "v1", "pods") and route.name is not None
                          and route.subresource in STREAMING)
        if self.streaming and method in ("GET", "POST"):
            self.verb = verb_for(route.subresource or "")
        self.namespace = route.namespace
        self.dry_run = "All" in query.all("dryRun")
        self.field_validation = query.one("fieldValidation")
        self.warnings: list[str] = []
        self._write: WriteRecord | None = None  # this request's write, once admitted

    def serve(self) -> None:
        route, rt, sub = self.route, self.rt, self.route.subresource
        if self.streaming and self.namespace is not None:
            self._admit()
            serve_pod_stream(self.api, self.ex, namespace=self.namespace, name=route.name or "",
                             subresource=sub or "", method=self.method, query=self.query)
            return
        if self.method == "POST" and route.name is not None and sub != "binding":
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        if sub is not None and sub not in rt.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if rt.plural == "selfsubjectaccessreviews":
            self.api.accounting.record(self.verb, rt.plural)
            if self.method != "POST":
                raise ApiError(405, "MethodNotAllowed", "only create is allowed")
            review = access_review(self.api.authorizer, self.user, self.ex.review_body())
            self.ex.send_json(201, review)
            return
        self._admit()
        if rt.namespaced and route.name is not None and self.namespace is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        handlers = {
            "get": self._get,
            "list": self._list,
            "watch": self._watch,
            "create": self._create,
            "update": self._update,
            "patch": self._patch,
            "delete": self._delete,
            "deletecollection": self._delete,
        }
        manager = managed_fields.manager_from(self.query.one("fieldManager"),
                                              self.ex.header("User-Agent"))  # fmt: skip
        try:
            with managed_fields.acting_as(manager, force=self.query.flag("force")):
                handlers[self.verb]()
        except ApiError as err:
            err.warnings = [*self.warnings, *err.warnings]  # sent with the error, as the server does
            raise

    def _selected_name(self) -> str:
        """A list or watch whose field selector requires `metadata.name=X` is about object X for
        RBAC (as the real server's request info sets the name), so resourceNames may grant it."""
        if self.verb not in ("list", "watch"):
            return ""
        try:
            fields = parse_fields(self.query.one("fieldSelector"), ())
        except SelectorError:
            return ""
        names = {f.value for f in fields if f.path == "metadata.name" and f.equal}
        return names.pop() if len(names) == 1 else ""

    def _admit(self) -> None:
        """Authorize, count, and raise an injected fault if one is due."""
        api, rt, route = self.api, self.rt, self.route
        sub = route.subresource
        # RBAC sees a request on namespaces/NAME as being in namespace NAME.
        is_namespace = rt.plural == "namespaces" and not rt.group
        attrs = Attributes(
            verb=self.verb,
            api_group=rt.group,
            resource=rt.plural,
            subresource=sub or "",
            namespace=(route.name or "") if is_namespace else (self.namespace or ""),
            name=route.name or self._selected_name(),
        )
        allowed = api.authorizer.allowed(self.user, attrs)
        api.accounting.audit(AuditEntry(self.user.name, self.verb, rt.group, rt.plural, sub or "",
                                        allowed))
        if not allowed:
            raise forbidden(self.user, attrs)
        api.accounting.record(self.verb, f"{rt.plural}/{sub}" if sub else rt.plural)
        failure = api.faults.take(self.verb, rt.plural)
        if failure is None:
            if self.verb in WRITE_VERBS:
                self._write = WriteRecord(
                    time.time(), self.user.name, self.verb, rt.group,
                    f"{rt.plural}/{sub}" if sub else rt.plural, self.namespace or "",
                    route.name or "", self.dry_run,
                )
                api.accounting.write(self._write)
                api.faults.wrote(self._write, landed=False)
            return
        if failure.code == 429:
            raise ApiError(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                retry_after=failure.retry_after,
            )
        raise ApiError(
            failure.code, "InternalError", "Internal error occurred: injected fault (twin)"
        )

    def _admission(self, name: str, *, dry_run: bool) -> None:
        """Raise the admission refusal injected for this write, if one is due."""
        refusal = self.api.faults.refusal(self.verb, self.rt.plural, name=name, dry_run=dry_run)
        if refusal is None:
            return
        if refusal.kind is RefusalKind.CONFLICT:
            raise conflict(self.rt, name, "the object has been modified; please apply your "
                                          "changes to the latest version and try again")  # fmt: skip
        if refusal.kind is RefusalKind.WEBHOOK:
            raise ApiError(
                403, "Forbidden",
                f'admission webhook "{refusal.source}" denied the request: {refusal.message}',
            )  # fmt: skip
        resource = qualified(self.rt)
        used = len(self.api.store.list_refs(self.rt, namespace=self.namespace)[0])
        counted = f"count/{resource}"
        subject = f'{resource} "{name}"' if name else resource
        raise ApiError(
            403, "Forbidden",
            f"{subject} is forbidden: exceeded quota: {refusal.source}, requested: {counted}=1, "
            f"used: {counted}={used}, limited: {counted}={used}",
            details={"name": name, "group": self.rt.group, "kind": self.rt.plural},
        )  # fmt: skip

    # ------------------------------------------------------------------ reads

    def _wants_table(self) -> bool:
        return "as=Table" in self.ex.header("Accept")

    def _object(self, code: int, obj: dict[str, Any]) -> None:
        if self._write is not None:  # a write that landed: its hook runs before the answer
            named = replace(self._write, name=str(obj.get("metadata", {}).get("name") or ""))
            self.api.faults.wrote(named, landed=True)
        body: Any = obj
        if self._wants_table():
            body = tables.table(
                self.rt,
                [obj],
                now=self.api.clock(),
                resource_version=obj["metadata"].get("resourceVersion", ""),
            )
        if self.warnings:
            self.ex.send(code, orjson.dumps(body), headers={"Warning": warning_header(self.warnings)})
            return
        self.ex.send_json(code, body)

    def _get(self) -> None:
        if self.route.subresource == "binding":
            raise ApiError(405, "MethodNotAllowed", "binding only supports create")
        store = self.api.store
        if self.route.subresource == "scale":
            current = store.get_ref(self.rt, self.route.name or "", namespace=self.namespace)
            self.ex.send_json(200, as_scale(current))
            return
        self._object(200, store.get_ref(self.rt, self.route.name or "", namespace=self.namespace))

    def _list(self) -> None:
        api, rt, query = self.api, self.rt, self.query
        objs, rv, token = api.store.list_refs(
            rt,
            namespace=self.namespace,
            label_selector=query.one("labelSelector"),
            field_selector=query.one("fieldSelector"),
            resource_version=query.one("resourceVersion"),
            limit=query.integer("limit"),
            continue_token=query.one("continue"),
        )
        if self._wants_table():
            table = tables.table(rt, objs, now=api.clock(), resource_version=rv, continue_token=token)
            self.ex.send_json(200, table)
            return
        metadata: dict[str, Any] = {"resourceVersion": rv}
        if token:
            metadata["continue"] = token
        head = orjson.dumps({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": metadata})
        # Splice the per-object JSON the store encoded at write time: no re-encoding per list.
        items = b",".join(api.store.encode(objs))
        self.ex.send(200, b"".join((head[:-1], b',"items":[', items, b"]}")))

    def _watch(self) -> None:
        serve_watch(
            self.api,
            self.ex,
            self.rt,
            namespace=self.namespace,
            query=self.query,
            as_table=self._wants_table(),
        )

    # ------------------------------------------------------------------ writes

    def _create(self) -> None:
        body = self.ex.object_body()
        store = self.api.store
        if self.route.subresource == "binding":
            target = ((body or {}).get("target") or {}).get("name")
            if not target:
                raise ApiError(422, "Invalid", "Binding is invalid: target.name: Required value")
            if not self.dry_run:
                store.bind(self.namespace or "default", self.route.name or "", target)
            self.ex.send_json(
                201,
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
            )
            return
        meta = body.get("metadata") if isinstance(body, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        self._admission(name if isinstance(name, str) else "", dry_run=self.dry_run)
        user = {"username": self.user.name, "groups": list(self.user.groups)}
        created = store.create(
            self.rt, body, namespace=self.namespace, dry_run=self.dry_run, keep_status=False,
            field_validation=self.field_validation, warnings=self.warnings, user=user,
        )  # fmt: skip
        self._object(201, created)

    def _update(self) -> None:
        body = self.ex.object_body()
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        name = (body.get("metadata") or {}).get("name")
        if name != self.route.name:
            raise bad_request(
                f"the name of the object ({name}) does not match the name on the URL "
                f"({self.route.name})"
            )
        if self.route.subresource == "scale":
            rv = (body.get("metadata") or {}).get("resourceVersion")
            self._scale_to(replicas_of(body, name=name or ""), resource_version=rv)
            return
        self._admission(self.route.name or "", dry_run=self.dry_run)
        updated = self.api.store.update(
            self.rt,
            body,
            namespace=self.namespace,
            subresource=self.route.subresource,
            dry_run=self.dry_run,
            field_validation=self.field_validation,
            warnings=self.warnings,
        )
        self._object(200, updated)

    def _patch(self) -> None:
        ctype = self.ex.header("Content-Type").split(";")[0].strip().lower()
        patch_type = _PATCH_TYPES.get(ctype)
        if patch_type is None:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: application/json-patch+json, application/merge-patch+json, "
                f"application/apply-patch+yaml"
                f"{', application/strategic-merge-patch+json' if self.rt.builtin else ''}",
            )
        if patch_type is PatchType.APPLY:
            if not self.query.one("fieldManager"):
                raise ApiError(422, "Invalid", "PATCH requests for apply must specify a fieldManager")
            body = self.ex.yaml_body()
        else:
            body = self.ex.json_body()
        if self.route.subresource == "scale":
            self._patch_scale(body, patch_type)
            return
        self._admission(self.route.name or "", dry_run=self.dry_run)
        patched = self.api.store.patch(
            self.rt,
            self.route.name or "",
            body,
            namespace=self.namespace,
            patch_type=patch_type,
            subresource=self.route.subresource,
            dry_run=self.dry_run,
            field_validation=self.field_validation,
            warnings=self.warnings,
        )
        self._object(200, patched)

    def _patch_scale(self, body: Any, patch_type: PatchType) -> None:
        name = self.route.name or ""
        current = as_scale(self.api.store.get(self.rt, name, namespace=self.namespace))
        try:
            patched = patching.apply(current, body, patch_type)
        except patching.PatchError as exc:
            reason = "Invalid" if exc.code == 422 else "BadRequest"
            raise ApiError(exc.code, reason, str(exc)) from exc
        rv = (patched.get("metadata") or {}).get("resourceVersion")
        stale = rv if rv != current["metadata"].get("resourceVersion") else None
        self._scale_to(replicas_of(patched, name=name), resource_version=stale)

    def _scale_to(self, replicas: int, *, resource_version: str | None) -> None:
        """Write the wanted replica count into the parent; answer with its Scale."""
        patch: dict[str, Any] = {"spec": {"replicas": replicas}}
        if resource_version:
            patch["metadata"] = {"resourceVersion": resource_version}
        scaled = self.api.store.patch(
            self.rt,
            self.route.name or "",
            patch,
            namespace=self.namespace,
            patch_type=PatchType.MERGE,
            dry_run=self.dry_run,
        )
        self.ex.send_json(200, as_scale(scaled))

    def _delete(self) -> None:
        options = self.ex.object_body() or {}
        if not isinstance(options, dict):
            raise bad_request("DeleteOptions must be a JSON object")
        query = self.query
        propagation = query.one("propagationPolicy") or options.get("propagationPolicy")
        if propagation is None and options.get("orphanDependents") is True:
            propagation = "Orphan"
        grace = query.integer("gracePeriodSeconds")
        if grace is None and options.get("gracePeriodSeconds") is not None:
            grace = int(options["gracePeriodSeconds"])
        dry_run = self.dry_run or "All" in (options.get("dryRun") or [])
        if dry_run and self._write is not None and not self._write.dry_run:
            self._write = None  # a dry run named in the DeleteOptions: nothing lands
        try:
            policy = Propagation(propagation or "Background")
        except ValueError as exc:
            raise bad_request(f"propagationPolicy: Unsupported value: {propagation!r}") from exc
        preconditions = options.get("preconditions")
        if preconditions is not None and not isinstance(preconditions, dict):
            raise bad_request("DeleteOptions.preconditions must be a JSON object")
        store, rt = self.api.store, self.rt
        if self.verb == "delete":
            self._admission(self.route.name or "", dry_run=dry_run)
            result = store.delete(
                rt,
                self.route.name or "",
                namespace=self.namespace,
                propagation=policy,
                grace_period_seconds=grace,
                dry_run=dry_run,
                preconditions=preconditions,
            )
            self._object(200, result)
            return
        items = store.delete_collection(
            rt,
            namespace=self.namespace,
            label_selector=query.one("labelSelector"),
            field_selector=query.one("fieldSelector"),
            propagation=policy,
            grace_period_seconds=grace,
            dry_run=dry_run,
        )
        self.ex.send_json(
            200,
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": store.resource_version},
                "items": items,
            },
        )


