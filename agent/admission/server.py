"""The webhook's HTTPS server: `POST /admission/mutate` on the admission port, and `GET /healthz`.

Who calls it: the running agent starts and stops it (`agent.runtime.app`, over what the
composition root built); the tests and the bench start one over a `Webhook` of their own. What
it does: accepts TCP connections on `admission.host:port`, does the TLS handshake on the
connection's own thread (a slow client never holds the accept loop), with the `ssl.SSLContext`
of `agent.admission.certificates.ServingContext` (a rotated certificate applies to the next
connection); keeps connections alive (HTTP/1.1: kube-apiserver reuses them); reads at most
`MAX_BODY` bytes of an `application/json` body and hands it to the webhook, whose answer
(status, JSON) it writes back. An idle or stalled connection is closed after `IDLE_TIMEOUT`.
What it does not do: decide anything, or read a certificate file.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent.settings import ADMISSION_PATH

log = logging.getLogger(__name__)
MAX_BODY = 3 * 1024 * 1024  # kube-apiserver's own request limit is 3 MiB
IDLE_TIMEOUT = 30.0

Handle = Callable[[bytes], tuple[int, bytes]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 context: ssl.SSLContext, handle: Handle) -> None:  # fmt: skip
        self.context = context
        self.handle = handle
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.address_family = family
        super().__init__(address, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(IDLE_TIMEOUT)
        # one answer is one write: no Nagle wait against the client's delayed ACK
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("admission TLS handshake failed", extra={"error": str(exc)})
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            with contextlib.suppress(OSError):
                tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("admission connection error", exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    server_version = "zonemedic-admission"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: int, body: bytes) -> None:
        """The answer's head and body in one write."""
        reason = self.responses.get(status, ("",))[0]
        head = (f"HTTP/1.1 {status} {reason}\r\nServer: {self.server_version}\r\n"
                f"Date: {self.date_time_string()}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n")  # fmt: skip
        if self.close_connection:
            head += "Connection: close\r\n"
        self.wfile.write(head.encode("latin-1") + b"\r\n" + body)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, b'{"ok":true}')
        else:
            self._send(404, b'{"error":"not found"}')

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path != ADMISSION_PATH:
            self._send(404, b'{"error":"not found"}')
            return
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            self.close_connection = True
            self._send(411, b'{"error":"a Content-Length is required"}')
            return
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            self._send(413, b'{"error":"the body is larger than 3 MiB"}')
            return
        body = self.rfile.read(length)
        status, answer = self.server.handle(body)
        self._send(status, answer)


class AdmissionServer:
    """The HTTPS server over `handle` (body -> status, JSON), on `host:port` (0: a free one)."""

    def __init__(self, handle: Handle, *, host: str, port: int, context: ssl.SSLContext) -> None:
        self._server = _Server((host, port), _Handler, context=context, handle=handle)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        shown = f"[{host}]" if ":" in host else host
        return f"https://{shown}:{self.port}{ADMISSION_PATH}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="admission-https", daemon=True)  # fmt: skip
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
