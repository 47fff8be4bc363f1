"""The HTTP request handler of the twin's API: reading requests and writing answers.

One `Handler` per connection (keep-alive, TLS handshake in the connection's thread, TCP_NODELAY):
it drains and decodes the request body (JSON, YAML for apply patches, Kubernetes
protobuf for built-in kinds), authenticates the bearer token, answers health and discovery paths,
hands /twin/ paths to apicontrol.py and resource routes to apiverbs.py, and turns an `ApiError`
into its `kind: Status` body. It is the `Exchange` those modules answer through.

Used by `ApiServer` (apiserver.py), which gives it its `ApiState` (apistate.py). It does not
know verb semantics or store objects.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson
import yaml

from agent.twin import protobuf
from agent.twin.apicontrol import control
from agent.twin.apierror import ApiError, bad_request
from agent.twin.apiquery import Query
from agent.twin.apistate import ApiState
from agent.twin.apiverbs import ResourceRequest, warning_header
from agent.twin.auth import Attributes

log = logging.getLogger(__name__)

_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256
    allow_reuse_address = True
    api: ApiState


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HttpServer
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

    # ------------------------------------------------------------------ the Exchange

    def header(self, name: str) -> str:
        return self.headers.get(name) or ""

    def send(
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

    def send_json(self, code: int, obj: Any) -> None:
        self.send(code, orjson.dumps(obj))

    def start_stream(self, *, content_type: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def chunk(self, data: bytes) -> None:
        self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def client_gone(self) -> bool:
        conn = self.connection
        try:
            readable, _, _ = select.select([conn], [], [], 0)
            if not readable:
                return False
            conn.settimeout(0)
            # nothing more is read from a streamed request: TLS may consume a byte, TCP peeks
            data = conn.recv(1) if isinstance(conn, ssl.SSLSocket) else conn.recv(1, socket.MSG_PEEK)
            return data == b""
        except ssl.SSLWantReadError:
            return False
        except (OSError, ValueError):
            return True
        finally:
            with contextlib.suppress(OSError):
                conn.settimeout(None)

    def drop_connection(self) -> None:
        self.close_connection = True

    def raw_body(self) -> bytes:
        """The request body, read once: every request's body is drained, even one refused
        before it is looked at, or the next request on this keep-alive connection breaks."""
        if self._body is None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = 0
            self._body = self.rfile.read(length) if length > 0 else b""
        return self._body

    def json_body(self) -> Any:
        raw = self.raw_body()
        if not raw:
            return None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise bad_request(f"the request body is not valid JSON: {exc}") from exc

    def object_body(self) -> Any:
        if self.header("Content-Type").split(";")[0].strip() != protobuf.CONTENT_TYPE:
            return self.json_body()
        try:
            return protobuf.decode_object(self.raw_body())
        except protobuf.UnsupportedKindError as exc:
            raise ApiError(415, "UnsupportedMediaType", str(exc)) from exc
        except protobuf.ProtobufError as exc:
            raise bad_request(f"the protobuf request body is not valid: {exc}") from exc

    def yaml_body(self) -> Any:
        try:
            return yaml.load(self.raw_body() or b"{}", Loader=_YamlLoader)
        except yaml.YAMLError as exc:
            raise bad_request(f"the request body is not valid YAML: {exc}") from exc

    def review_body(self) -> dict[str, Any]:
        ctype = self.header("Content-Type").split(";")[0].strip()
        if ctype != protobuf.CONTENT_TYPE:
            body = self.json_body()
            if not isinstance(body, dict):
                raise bad_request("the request body must be a JSON object")
            return body
        try:
            return protobuf.self_subject_access_review(self.raw_body())
        except protobuf.ProtobufError as exc:
            raise bad_request(f"the protobuf request body is not valid: {exc}") from exc

    # ------------------------------------------------------------------ dispatch

    def _error(self, err: ApiError) -> None:
        headers = {}
        if err.retry_after is not None:
            headers["Retry-After"] = str(err.retry_after)
        if err.warnings:
            headers["Warning"] = warning_header(err.warnings)
        self.send(err.code, orjson.dumps(err.status()), headers=headers)

    def _dispatch(self, method: str) -> None:
        api = self.server.api
        self._body = None
        try:
            self.raw_body()
        except (OSError, ValueError):
            self.close_connection = True
            return
        split = urlsplit(self.path)
        parts = [unquote(p) for p in split.path.split("/") if p]
        query = Query(parse_qs(split.query, keep_blank_values=True))
        try:
            if parts[:1] == ["twin"]:
                body = self.json_body() if method in ("POST", "PUT") else None
                self.send_json(200, control(api, method, parts[1:], body))
                return
            if api.faults.latency_seconds:
                time.sleep(api.faults.latency_seconds)
            user = api.authenticator.authenticate(self.headers.get("Authorization"))
            if method == "GET":
                if parts and parts[0] in ("healthz", "livez", "readyz"):
                    self.send(200, b"ok", content_type="text/plain")
                    return
                doc = api.discovery.document(parts, port=int(self.server.server_address[1]))
                if doc is not None:
                    api.authorizer.authorize(user, Attributes(verb="get", path=split.path))
                    self.send_json(200, doc)
                    return
            route = api.discovery.route(parts)
            if route is None:
                self._error(
                    ApiError(404, "NotFound", "the server could not find the requested resource")
                )
                return
            ResourceRequest(api, self, method=method, route=route, query=query, user=user).serve()
        except ApiError as err:
            self._error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
