"""A real HTTPS admission webhook for the twin's tests: stdlib http.server over TLS.

`certificates(tmp)` makes a CA and a serving certificate (openssl CLI) valid for
`hooks.webhooks.svc` and 127.0.0.1; `WebhookServer` answers each path with the function the test
registers (review in, response out, optionally after a delay) and keeps every review it got.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SERVICE_NAME = "hooks.webhooks.svc"
Answer = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Certificates:
    ca_pem: bytes
    cert: Path
    key: Path

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode()


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False,
                          timeout=30)
    if done.returncode != 0:
        raise AssertionError(f"openssl {args[0]} failed: {done.stderr}")


def certificates(tmp: Path, *, name: str = "ca") -> Certificates:
    """A CA, and a serving certificate it signs for SERVICE_NAME and 127.0.0.1."""
    tmp.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = tmp / f"{name}.key", tmp / f"{name}.crt"
    key, csr, crt, ext = tmp / "tls.key", tmp / "tls.csr", tmp / "tls.crt", tmp / "ext.cnf"
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca_crt), "-days", "2",
             "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    _openssl("req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=hooks")
    ext.write_text(f"subjectAltName=DNS:{SERVICE_NAME},IP:127.0.0.1\n"
                   "extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n"
                   "authorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
             "-CAcreateserial", "-out", str(crt), "-days", "2", "-extfile", str(ext))
    return Certificates(ca_crt.read_bytes(), crt, key)


def allow(review: dict[str, Any], *, patch: list[dict[str, Any]] | None = None,
          warnings: list[str] | None = None) -> dict[str, Any]:
    """An allowing AdmissionReview answer, with a JSON patch and warnings when given."""
    response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response}


class WebhookServer:
    """HTTPS on 127.0.0.1; `on(path, answer, delay=...)`, `reviews(path)`, `stop()`."""

    def __init__(self, certs: Certificates) -> None:
        self._answers: dict[str, tuple[Answer, float]] = {}
        self._reviews: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                path = self.path.split("?")[0]
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server._reviews.setdefault(path, []).append(review)
                    answer, delay = server._answers.get(path, (allow, 0.0))
                if delay:
                    server.stopping.wait(delay)
                body = json.dumps(answer(review)).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    return

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs.cert, certs.key)
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def on(self, path: str, answer: Answer, *, delay: float = 0.0) -> None:
        with self._lock:
            self._answers[path] = (answer, delay)

    def reviews(self, path: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._reviews.get(path, []))

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def wait_for(predicate: Callable[[], bool], *, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met before the deadline")
