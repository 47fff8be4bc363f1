"""A counting HTTP proxy (tests and benchmarks): forwards GET/POST to an upstream and counts the
Prometheus queries (`/api/v1/query*`) that pass through. Loopback only; stopped with `stop()`."""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
from typing import Any


class CountingProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.queries = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if "/api/v1/query" in self.path:
                    with proxy._lock:
                        proxy.queries += 1
                request = urllib.request.Request(
                    proxy.upstream + self.path, data=body, method=self.command,
                    headers={k: v for k, v in self.headers.items()
                             if k.lower() in ("content-type", "accept")},
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as resp:
                        status, data = resp.status, resp.read()
                        ctype = resp.headers.get("Content-Type", "application/json")
                except urllib.error.HTTPError as exc:
                    status, data, ctype = exc.code, exc.read(), "application/json"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._forward()

            def do_POST(self) -> None:
                self._forward()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def reset(self) -> None:
        with self._lock:
            self.queries = 0

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
