"""Runs the ASGI app under uvicorn on a background thread (port 0 allowed), and stops it.

Called by the composition root and by tests. Running uvicorn off the main thread leaves signal
handling to the agent's main loop (graceful SIGTERM: stop watches, finish the current step, release
the lease, then stop this server). What it does not do: build the app.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from agent.errors import UnavailableError


class HttpServer:
    def __init__(self, app: Any, *, host: str, port: int) -> None:
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
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
