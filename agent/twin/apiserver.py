"""The twin's Kubernetes API over real HTTP, for kubectl and the official Python client.

A threading HTTP/1.1 server on 127.0.0.1 (keep-alive, chunked watch streams, orjson bodies) in
front of a `Store`. It serves discovery (/version, /api, /apis, group and version resource lists),
every verb on the resource table's kinds (get, list with selectors and limit/continue, watch with
bookmarks and 410 ERROR events, create, update, patch in three formats, delete and
deletecollection, status and binding subresources, dryRun), `kind: Status` errors, bearer-token
authentication with RBAC (auth.py), SelfSubjectAccessReview, server-side Table printing for
kubectl (tables.py), and twin-only endpoints under /twin/ for accounting and faults (faults.py).

Used by `zonemedic twin apiserver`, `twin up`, tests and benchmarks. The object semantics live in
store.py; this module only translates HTTP to store calls and back.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson
import yaml

from agent.twin import protobuf, tables
from agent.twin import tls as twin_tls
from agent.twin.apierror import ApiError, bad_request
from agent.twin.auth import (
    ADMIN,
    Attributes,
    Authenticator,
    Authorizer,
    UserInfo,
    access_review,
)
from agent.twin.deletion import Propagation
from agent.twin.faults import Accounting, Faults
from agent.twin.patch import PatchType
from agent.twin.resources import RESOURCES, ResourceType, groups
from agent.twin.store import Store
from agent.twin.watch import WatchStream

log = logging.getLogger(__name__)

KUBERNETES_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-zonemedic-twin",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "binding": ["create"],
}


def _resource_entry(rt: ResourceType) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    out = [entry]
    for sub in rt.subresources:
        out.append(
            {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": "Binding" if sub == "binding" else rt.kind,
                "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"]),
            }
        )
    return out


def _group_entry(name: str, versions: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
        "preferredVersion": {"groupVersion": f"{name}/{versions[0]}", "version": versions[0]},
    }


@dataclass(frozen=True)
class _Route:
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


class ApiServer:
    """The HTTP server; `start()` it, read `url`, `stop()` it (or use it as a context manager)."""

    def __init__(
        self,
        store: Store,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        authenticator: Authenticator | None = None,
        bookmark_interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        tls: bool = False,
    ) -> None:
        self.store = store
        self.authenticator = authenticator or Authenticator()
        self.authorizer = Authorizer(store)
        self.accounting = Accounting()
        self.faults = Faults()
        self.bookmark_interval = bookmark_interval
        self.clock = clock
        self._watches: set[WatchStream] = set()
        self._watch_lock = threading.Lock()
        self._stopping = False
        self._httpd = _Server((host, port), _Handler)
        self._httpd.api = self
        self.ca_pem: bytes | None = None
        if tls:
            cert = twin_tls.certificate()
            self.ca_pem = cert.cert_pem
            self._httpd.socket = cert.server_context().wrap_socket(
                self._httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread: threading.Thread | None = None
        self._by_gv: dict[tuple[str, str], dict[str, ResourceType]] = {}
        for rt in RESOURCES:
            self._by_gv.setdefault((rt.group, rt.version), {})[rt.plural] = rt

    # ------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        scheme = "https" if self.ca_pem else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self) -> ApiServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="twin-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.2)

    def stop(self) -> None:
        self._stopping = True
        self.close_watches()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ faults

    def close_watches(self) -> int:
        """Fault (and shutdown): end every open HTTP watch stream; clients must re-watch."""
        with self._watch_lock:
            streams = list(self._watches)
        for stream in streams:
            stream.close()
        return len(streams)

    def expire_history(self) -> str:
        """Fault: forget the store's history so that any older resourceVersion gets 410."""
        return self.store.compact()

    def watch_count(self) -> int:
        with self._watch_lock:
            return len(self._watches)

    def _track(self, stream: WatchStream, add: bool) -> None:
        with self._watch_lock:
            if add:
                self._watches.add(stream)
            else:
                self._watches.discard(stream)

    # ------------------------------------------------------------------ routing

    def route(self, parts: list[str]) -> _Route | None:
        """Resolve /api/v1/... or /apis/g/v/... path segments to a resource route."""
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        kinds = self._by_gv.get((group, version))
        if not kinds or not rest:
            return None
        namespace = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and rest[2] in kinds
            and (kinds[rest[2]].namespaced)
        ):
            namespace, rest = rest[1], rest[2:]
        rt = kinds.get(rest[0])
        if rt is None or len(rest) > 3:
            return None
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return _Route(rt, namespace, name, sub)

    def discovery(self, parts: list[str]) -> Any:
        """The discovery document for a path, or None when the path is not a discovery path."""
        if parts == ["version"]:
            return KUBERNETES_VERSION
        if parts[:2] == ["openapi", "v3"]:
            return self.openapi_v3(parts[2:])
        if parts == ["api"]:
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.port}"}
                ],
            }
        if parts == ["apis"]:
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [_group_entry(g, vs) for g, vs in groups().items() if g],
            }
        if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups():
            entry = _group_entry(parts[1], groups()[parts[1]])
            return {"kind": "APIGroup", "apiVersion": "v1", **entry}
        if parts == ["api", "v1"] or (len(parts) == 3 and parts[0] == "apis"):
            group, version = ("", "v1") if parts[0] == "api" else (parts[1], parts[2])
            kinds = self._by_gv.get((group, version))
            if kinds is None:
                return None
            resources = [e for rt in kinds.values() for e in _resource_entry(rt)]
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": resources,
            }
        return None

    def openapi_v3(self, rest: list[str]) -> Any:
        """A minimal OpenAPI v3: per group-version, the PATCH operations with their kind and the
        `fieldValidation` parameter, which is what kubectl reads to choose server-side field
        validation for `create -f`/`apply` (so it never needs the full schemas)."""
        if not rest:
            roots: dict[str, Any] = {}
            for group, version in self._by_gv:
                prefix = f"apis/{group}/{version}" if group else "api/v1"
                roots[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash=twin"}
            return {"paths": roots}
        if rest[:2] == ["api", "v1"] and len(rest) == 2:
            kinds = self._by_gv.get(("", "v1"))
        elif rest[:1] == ["apis"] and len(rest) == 3:
            kinds = self._by_gv.get((rest[1], rest[2]))
        else:
            kinds = None
        if kinds is None:
            return None
        param = {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
        paths: dict[str, Any] = {}
        for rt in kinds.values():
            item = "/namespaces/{namespace}" if rt.namespaced else ""
            path = f"{rt.base_path()}".replace(f"/{rt.plural}", f"{item}/{rt.plural}") + "/{name}"
            paths[path] = {
                "patch": {
                    "operationId": f"patch{rt.kind}",
                    "parameters": [param],
                    "responses": {"200": {"description": "OK"}},
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": {
                        "group": rt.group,
                        "version": rt.version,
                        "kind": rt.kind,
                    },
                }
            }
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes (zonemedic twin)", "version": "v1.32.0"},
            "paths": paths,
            "components": {},
        }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256
    allow_reuse_address = True
    api: ApiServer


def _flag(query: dict[str, list[str]], name: str) -> bool:
    value = query.get(name, [""])[-1].lower()
    return value in ("1", "true", "yes")


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


def _int(query: dict[str, list[str]], name: str) -> int | None:
    raw = _one(query, name)
    if raw in (None, ""):
        return None
    assert raw is not None
    try:
        return int(raw)
    except ValueError as exc:
        raise bad_request(f"{name}: invalid value {raw!r}: must be an integer") from exc


_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_PATCH_TYPES = {t.value: t for t in PatchType}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    _body: bytes | None = None
    # Quiet: a request log line per call would cost more than the call.

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("twin apiserver: " + format, *args)

    def setup(self) -> None:
        self.request.settimeout(30)
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()  # here, in this connection's thread, not the acceptor
        self.request.settimeout(None)
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle(self) -> None:
        try:
            super().handle()
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError, TimeoutError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ------------------------------------------------------------------ responses

    def _send(
        self,
        code: int,
        body: bytes,
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, orjson.dumps(obj))

    def _error(self, err: ApiError) -> None:
        headers = {}
        if err.retry_after is not None:
            headers["Retry-After"] = str(err.retry_after)
        self._send(err.code, orjson.dumps(err.status()), headers=headers)

    def _raw_body(self) -> bytes:
        """The request body, read once: every request's body is drained, even one refused
        before it is looked at, or the next request on this keep-alive connection breaks."""
        if self._body is None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = 0
            self._body = self.rfile.read(length) if length > 0 else b""
        return self._body

    def _read_body(self) -> Any:
        raw = self._raw_body()
        if not raw:
            return None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise bad_request(f"the request body is not valid JSON: {exc}") from exc

    def _read_yaml(self) -> Any:
        try:
            return yaml.load(self._raw_body() or b"{}", Loader=_YamlLoader)
        except yaml.YAMLError as exc:
            raise bad_request(f"the request body is not valid YAML: {exc}") from exc

    def _read_review(self) -> dict[str, Any]:
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if ctype != protobuf.CONTENT_TYPE:
            body = self._read_body()
            if not isinstance(body, dict):
                raise bad_request("the request body must be a JSON object")
            return body
        try:
            return protobuf.self_subject_access_review(self._raw_body())
        except protobuf.ProtobufError as exc:
            raise bad_request(f"the protobuf request body is not valid: {exc}") from exc

    # ------------------------------------------------------------------ dispatch

    def _dispatch(self, method: str) -> None:
        api = self.server.api
        self._body = None
        try:
            self._raw_body()
        except (OSError, ValueError):
            self.close_connection = True
            return
        split = urlsplit(self.path)
        parts = [unquote(p) for p in split.path.split("/") if p]
        query = parse_qs(split.query, keep_blank_values=True)
        try:
            if parts[:1] == ["twin"]:
                self._twin(method, parts[1:])
                return
            if api.faults.latency_seconds:
                time.sleep(api.faults.latency_seconds)
            user = api.authenticator.authenticate(self.headers.get("Authorization"))
            if method == "GET":
                if parts and parts[0] in ("healthz", "livez", "readyz"):
                    self._send(200, b"ok", content_type="text/plain")
                    return
                doc = api.discovery(parts)
                if doc is not None:
                    api.authorizer.authorize(user, Attributes(verb="get", path=split.path))
                    self._json(200, doc)
                    return
            route = api.route(parts)
            if route is None:
                self._error(
                    ApiError(404, "NotFound", "the server could not find the requested resource")
                )
                return
            self._resource(method, route, query, user)
        except ApiError as err:
            self._error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _verb(self, method: str, route: _Route, query: dict[str, list[str]]) -> str:
        if method == "GET":
            if route.name is None:
                return "watch" if _flag(query, "watch") else "list"
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

    def _resource(
        self, method: str, route: _Route, query: dict[str, list[str]], user: UserInfo
    ) -> None:
        api = self.server.api
        rt = route.rt
        verb = self._verb(method, route, query)
        sub = route.subresource
        if method == "POST" and route.name is not None and sub != "binding":
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        if sub is not None and sub not in rt.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = route.namespace
        is_namespace = rt.plural == "namespaces" and not rt.group
        attrs = Attributes(
            verb=verb,
            api_group=rt.group,
            resource=rt.plural,
            subresource=sub or "",
            # RBAC sees a request on namespaces/NAME as being in namespace NAME.
            namespace=(route.name or "") if is_namespace else (namespace or ""),
            name=route.name or "",
        )
        if rt.plural == "selfsubjectaccessreviews":
            api.accounting.record(verb, rt.plural)
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", "only create is allowed")
            self._json(201, access_review(api.authorizer, user, self._read_review()))
            return
        api.authorizer.authorize(user, attrs)
        api.accounting.record(verb, f"{rt.plural}/{sub}" if sub else rt.plural)
        failure = api.faults.take(verb, rt.plural)
        if failure is not None:
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
        if rt.namespaced and route.name is not None and namespace is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        dry_run = "All" in query.get("dryRun", [])
        store = api.store
        if verb == "get":
            if sub == "binding":
                raise ApiError(405, "MethodNotAllowed", "binding only supports create")
            self._object(200, rt, store.get_ref(rt, route.name or "", namespace=namespace))
        elif verb == "list":
            self._list(rt, namespace, query)
        elif verb == "watch":
            self._watch(rt, namespace, query)
        elif verb == "create":
            body = self._read_body()
            if sub == "binding":
                target = ((body or {}).get("target") or {}).get("name")
                if not target:
                    raise ApiError(
                        422, "Invalid", "Binding is invalid: target.name: Required value"
                    )
                if not dry_run:
                    store.bind(namespace or "default", route.name or "", target)
                self._json(
                    201,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "code": 201,
                    },
                )
                return
            self._object(
                201,
                rt,
                store.create(rt, body, namespace=namespace, dry_run=dry_run, keep_status=False),
            )
        elif verb == "update":
            body = self._read_body()
            if not isinstance(body, dict):
                raise bad_request("the request body must be a JSON object")
            name = (body.get("metadata") or {}).get("name")
            if name != route.name:
                raise bad_request(
                    "the name of the object "
                    f"({name}) does not match the name on the URL ({route.name})"
                )
            self._object(
                200,
                rt,
                store.update(rt, body, namespace=namespace, subresource=sub, dry_run=dry_run),
            )
        elif verb == "patch":
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            patch_type = _PATCH_TYPES.get(ctype)
            if patch_type is None:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: application/json-patch+json, application/merge-patch+json, "
                    f"application/apply-patch+yaml"
                    f"{', application/strategic-merge-patch+json' if rt.builtin else ''}",
                )
            if patch_type is PatchType.APPLY:
                if not _one(query, "fieldManager"):
                    raise ApiError(
                        422, "Invalid", "PATCH requests for apply must specify a fieldManager"
                    )
                body = self._read_yaml()
            else:
                body = self._read_body()
            self._object(
                200,
                rt,
                store.patch(
                    rt,
                    route.name or "",
                    body,
                    namespace=namespace,
                    patch_type=patch_type,
                    subresource=sub,
                    dry_run=dry_run,
                ),
            )
        elif verb in ("delete", "deletecollection"):
            options = self._read_body() or {}
            if not isinstance(options, dict):
                raise bad_request("DeleteOptions must be a JSON object")
            propagation = _one(query, "propagationPolicy") or options.get("propagationPolicy")
            if propagation is None and options.get("orphanDependents") is True:
                propagation = "Orphan"
            grace = _int(query, "gracePeriodSeconds")
            if grace is None and options.get("gracePeriodSeconds") is not None:
                grace = int(options["gracePeriodSeconds"])
            dry_run = dry_run or "All" in (options.get("dryRun") or [])
            try:
                policy = Propagation(propagation or "Background")
            except ValueError as exc:
                raise bad_request(f"propagationPolicy: Unsupported value: {propagation!r}") from exc
            if verb == "delete":
                result = store.delete(
                    rt,
                    route.name or "",
                    namespace=namespace,
                    propagation=policy,
                    grace_period_seconds=grace,
                    dry_run=dry_run,
                    preconditions=options.get("preconditions"),
                )
                self._object(200, rt, result)
            else:
                items = store.delete_collection(
                    rt,
                    namespace=namespace,
                    label_selector=_one(query, "labelSelector"),
                    field_selector=_one(query, "fieldSelector"),
                    propagation=policy,
                    grace_period_seconds=grace,
                    dry_run=dry_run,
                )
                self._json(
                    200,
                    {
                        "kind": rt.list_kind,
                        "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": store.resource_version},
                        "items": items,
                    },
                )

    def _wants_table(self) -> bool:
        return "as=Table" in (self.headers.get("Accept") or "")

    def _object(self, code: int, rt: ResourceType, obj: dict[str, Any]) -> None:
        if self._wants_table():
            api = self.server.api
            self._json(
                code,
                tables.table(
                    rt,
                    [obj],
                    now=api.clock(),
                    resource_version=obj["metadata"].get("resourceVersion", ""),
                ),
            )
            return
        self._json(code, obj)

    def _list(self, rt: ResourceType, namespace: str | None, query: dict[str, list[str]]) -> None:
        api = self.server.api
        objs, rv, token = api.store.list_refs(
            rt,
            namespace=namespace,
            label_selector=_one(query, "labelSelector"),
            field_selector=_one(query, "fieldSelector"),
            resource_version=_one(query, "resourceVersion"),
            limit=_int(query, "limit"),
            continue_token=_one(query, "continue"),
        )
        if self._wants_table():
            self._json(
                200,
                tables.table(rt, objs, now=api.clock(), resource_version=rv, continue_token=token),
            )
            return
        metadata: dict[str, Any] = {"resourceVersion": rv}
        if token:
            metadata["continue"] = token
        head = orjson.dumps(
            {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": metadata}
        )
        # Splice the per-object JSON the store encoded at write time: no re-encoding per list.
        items = b",".join(api.store.encode(objs))
        self._send(200, b"".join((head[:-1], b',"items":[', items, b"]}")))

    # ------------------------------------------------------------------ watch

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))

    def _watch(self, rt: ResourceType, namespace: str | None, query: dict[str, list[str]]) -> None:
        api = self.server.api
        timeout = _int(query, "timeoutSeconds")
        bookmarks = _flag(query, "allowWatchBookmarks")
        as_table = self._wants_table()
        since = _one(query, "resourceVersion")
        stream: WatchStream | None = None
        error: ApiError | None = None
        try:
            stream = api.store.open_watch(
                rt,
                namespace=namespace,
                since=since,
                label_selector=_one(query, "labelSelector"),
                field_selector=_one(query, "fieldSelector"),
            )
        except ApiError as err:
            if err.code != 410:
                raise
            error = err
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        if stream is None:
            assert error is not None
            self._chunk(orjson.dumps({"type": "ERROR", "object": error.status()}) + b"\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        api._track(stream, True)
        deadline = time.monotonic() + timeout if timeout else None
        try:
            while not api._stopping:
                wait = api.bookmark_interval
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        break
                event = stream.next(wait)
                if event is not None:
                    if as_table:
                        obj = tables.table(
                            rt,
                            [event.object],
                            now=api.clock(),
                            resource_version=event.object["metadata"]["resourceVersion"],
                        )
                        self._chunk(orjson.dumps({"type": event.type, "object": obj}) + b"\n")
                    else:
                        raw = event.raw if event.raw is not None else orjson.dumps(event.object)
                        self._chunk(b'{"type":"%s","object":%s}\n' % (event.type.encode(), raw))
                    continue
                if stream.closed:
                    break
                if bookmarks:
                    mark = {
                        "kind": rt.kind,
                        "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": str(stream.bookmark_rv())},
                    }
                    self._chunk(orjson.dumps({"type": "BOOKMARK", "object": mark}) + b"\n")
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            stream.close()
            api._track(stream, False)

    # ------------------------------------------------------------------ twin endpoints

    def _twin(self, method: str, parts: list[str]) -> None:
        """Twin-only control: GET /twin/stats, POST /twin/stats/reset, POST /twin/faults/{fail,
        latency,close-watches,expire-history}, DELETE /twin/faults."""
        api = self.server.api
        body = self._read_body() if method in ("POST", "PUT") else None
        body = body or {}
        if method == "GET" and parts == ["stats"]:
            self._json(
                200,
                {
                    "requests": api.accounting.snapshot(),
                    "total": api.accounting.total(),
                    "objects": api.store.counts(),
                    "resourceVersion": api.store.resource_version,
                    "watches": api.watch_count(),
                    "pendingFailures": api.faults.pending(),
                    "latencySeconds": api.faults.latency_seconds,
                },
            )
        elif method == "POST" and parts == ["stats", "reset"]:
            api.accounting.reset()
            self._json(200, {"reset": True})
        elif method == "POST" and parts == ["faults", "fail"]:
            try:
                api.faults.fail(
                    int(body.get("count", 1)),
                    code=int(body.get("code", 500)),
                    retry_after=body.get("retryAfter"),
                    verb=body.get("verb"),
                    resource=body.get("resource"),
                )
            except (TypeError, ValueError) as exc:
                raise bad_request(str(exc)) from exc
            self._json(200, {"pendingFailures": api.faults.pending()})
        elif method == "POST" and parts == ["faults", "latency"]:
            try:
                api.faults.set_latency(float(body.get("seconds", 0)))
            except (TypeError, ValueError) as exc:
                raise bad_request(str(exc)) from exc
            self._json(200, {"latencySeconds": api.faults.latency_seconds})
        elif method == "POST" and parts == ["faults", "close-watches"]:
            self._json(200, {"closed": api.close_watches()})
        elif method == "POST" and parts == ["faults", "expire-history"]:
            self._json(200, {"compactedAt": api.expire_history()})
        elif method == "DELETE" and parts == ["faults"]:
            api.faults.clear()
            self._json(200, {"cleared": True})
        else:
            raise ApiError(404, "NotFound", f"no twin endpoint {method} /twin/{'/'.join(parts)}")


def serve(store: Store, *, port: int = 0, tokens: dict[str, UserInfo] | None = None) -> ApiServer:
    """Start a server on 127.0.0.1 in a background thread (tokens: None means no auth)."""
    auth = Authenticator(dict(tokens or {}))
    return ApiServer(store, port=port, authenticator=auth).start()


__all__ = ["ADMIN", "KUBERNETES_VERSION", "ApiServer", "serve"]
