"""Runs the ASGI app under uvicorn on a background thread (port 0 allowed), and stops it.

Called by the composition root and by tests. Running uvicorn off the main thread leaves signal
handling to the agent's main loop (graceful SIGTERM: stop watches, finish the current step, release
the lease, then stop this server). Every app is served within `limits` (`agent.runtime.limits`:
request head and body deadlines, idle connections, requests and connections at once, header
size). What it does not do: build the app.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import uvicorn

from agent.errors import UnavailableError
from agent.runtime.limits import HttpLimits, RequestLimits, protocol_class


class HttpServer:
    def __init__(self, app: Any, *, host: str, port: int,
                 limits: HttpLimits | None = None) -> None:
        limits = limits or HttpLimits()
        self.limits = limits
        self._bounded = RequestLimits(app, limits)
        config = uvicorn.Config(
            self._bounded,
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
            http=protocol_class(limits),
            timeout_keep_alive=max(1, math.ceil(limits.keep_alive)),
            limit_concurrency=limits.max_connections,
            h11_max_incomplete_event_size=limits.max_header_bytes,
        )
        self.server = uvicorn.Server(config)
        self.host = host
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 10.0) -> HttpServer:
        self._thread = threading.Thread(target=self.server.run, name="http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise UnavailableError(f"the HTTP server did not start on {self.host}")
            time.sleep(0.01)
        return self

    @property
    def in_flight(self) -> int:
        """Requests in the app right now (the probes not counted)."""
        return self._bounded.in_flight

    @property
    def port(self) -> int:
        sockets = self.server.servers[0].sockets
        return int(sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "127.0.0.1") else self.host
        return f"http://{host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
