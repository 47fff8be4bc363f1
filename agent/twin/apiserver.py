"""The twin's Kubernetes API over real HTTP, for kubectl and the official Python client.

A threading HTTP/1.1 server on 127.0.0.1 (keep-alive, chunked watch streams, orjson bodies, TLS on
request) in front of a `Store`: discovery and OpenAPI (apidiscovery.py), every verb on the resource
table's kinds (apiverbs.py, watches in apiwatch.py), `kind: Status` errors, bearer-token
authentication with RBAC (auth.py), SelfSubjectAccessReview, server-side Table printing for kubectl
(tables.py), the pods' log from the training model when one is given (`pod_activity`;
apipodstreams.py), and twin-only endpoints under /twin/ for accounting and faults (apicontrol.py,
faults.py). This module holds the server's lifecycle; the parts it shares with the code that
answers requests are its `ApiState` (apistate.py), the request handler is apihandler.py.

Used by `zonemedic twin apiserver`, `twin up`, tests and benchmarks. The object semantics live in
the store; the HTTP layer only translates HTTP to store calls and back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from agent.twin import tls as twin_tls
from agent.twin.apihandler import Handler, HttpServer
from agent.twin.apistate import ApiState, PodActivitySource
from agent.twin.auth import Authenticator, UserInfo
from agent.twin.store import Store


class ApiServer(ApiState):
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
        pod_activity: PodActivitySource | None = None,
    ) -> None:
        super().__init__(store, authenticator=authenticator, bookmark_interval=bookmark_interval,
                         clock=clock, pod_activity=pod_activity)
        self._httpd = HttpServer((host, port), Handler)
        self._httpd.api = self
        self.ca_pem: bytes | None = None
        if tls:
            cert = twin_tls.certificate()
            self.ca_pem = cert.cert_pem
            self._httpd.socket = cert.server_context().wrap_socket(
                self._httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread: threading.Thread | None = None

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
        self.stopping = True
        self.close_watches()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(store: Store, *, port: int = 0, tokens: dict[str, UserInfo] | None = None) -> ApiServer:
    """Start a server on 127.0.0.1 in a background thread (tokens: None means no auth)."""
    auth = Authenticator(dict(tokens or {}))
    return ApiServer(store, port=port, authenticator=auth).start()
