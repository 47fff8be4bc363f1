"""One admission webhook call over HTTPS, as kube-apiserver's webhook client makes it.

`Endpoint` is where a webhook's `clientConfig` points: a `url` as given, or a `service`
reference shown as `https://<name>.<namespace>.svc:<port><path>`, whose certificate must be valid
for `<name>.<namespace>.svc`. The twin has no service network, so it plays kube-proxy when it
resolves a Service (`resolve`): it connects to the Service's `spec.clusterIP`, which must be a
loopback address (the twin allocates no cluster IPs: set one, e.g. `127.0.0.1`), on the
`targetPort` of the Service port numbered `clientConfig.service.port` (the port itself when the
targetPort is absent or named); an ExternalName Service connects to its `externalName` on the
reference's port. A Service that does not exist, has `clusterIP: None`, or lacks the port fails
the call as the server's resolver does.

`post` sends the AdmissionReview (`?timeout=<n>s` on the path, as the server tells the webhook its
deadline), verifies the certificate against `caBundle` (the system roots when it is empty), and
bounds every socket operation by the webhook's timeout. Every failure is a `CallError` whose
text follows the server's (`Post "<url>": context deadline exceeded`, `tls: failed to verify
certificate: ...`), for the failure policy to decide. It does not match, order or interpret
reviews (admission_webhooks.py does).
"""

from __future__ import annotations

import base64
import binascii
import http.client
import ipaddress
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson


class CallError(Exception):
    """The webhook could not be called or answered unusably; the text is the reason."""


def _failed(reason: str) -> CallError:
    return CallError(f"failed to call webhook: {reason}")


@dataclass(frozen=True)
class Endpoint:
    """Where to connect (`address`, `port`), the name the certificate must carry, and the URL
    the server shows in its messages."""

    address: str
    port: int
    server_name: str
    path: str
    shown: str


class _Connection(http.client.HTTPSConnection):
    """HTTPS to an address, verifying the certificate for another name (a Service's DNS name)."""

    def __init__(self, endpoint: Endpoint, *, context: ssl.SSLContext, timeout: float) -> None:
        super().__init__(endpoint.address, endpoint.port, timeout=timeout, context=context)
        self._tls = context
        self._server_name = endpoint.server_name

    def connect(self) -> None:
        raw = socket.create_connection((self.host, self.port), self.timeout)
        try:
            self.sock = self._tls.wrap_socket(raw, server_hostname=self._server_name)
        except BaseException:
            raw.close()
            raise


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def resolve(client_config: Mapping[str, Any], services: Any) -> Endpoint:
    """The endpoint of a webhook's clientConfig; `services(namespace, name)` returns the stored
    Service or None."""
    url = client_config.get("url")
    if url:
        parts = urlsplit(str(url))
        host = parts.hostname or ""
        port = parts.port or 443
        return Endpoint(host, port, host, parts.path or "/", str(url))
    ref = client_config.get("service") or {}
    namespace, name = str(ref.get("namespace") or ""), str(ref.get("name") or "")
    port = int(ref.get("port") or 443)
    path = str(ref.get("path") or "/")
    server_name = f"{name}.{namespace}.svc"
    shown = f"https://{server_name}:{port}{path}"
    svc = services(namespace, name)
    if svc is None:
        raise _failed(f'Post "{shown}": services "{name}" not found')
    spec = svc.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return Endpoint(str(spec.get("externalName") or ""), port, server_name, path, shown)
    cluster_ip = str(spec.get("clusterIP") or "")
    if cluster_ip == "None":
        raise _failed(f'Post "{shown}": cannot route to service with ClusterIP "None"')
    ports = [p for p in spec.get("ports") or [] if int(p.get("port") or 0) == port]
    if not ports:
        raise _failed(f'Post "{shown}": no service port {port} found for service "{name}"')
    if not _is_loopback(cluster_ip):
        raise _failed(f'Post "{shown}": the twin reaches a Service only at a loopback '
                        f'spec.clusterIP (e.g. 127.0.0.1), not "{cluster_ip or "<none>"}"')
    target = ports[0].get("targetPort")
    return Endpoint(cluster_ip, target if isinstance(target, int) else port, server_name, path,
                    shown)


def tls_context(ca_bundle: str | None) -> ssl.SSLContext:
    """A client context trusting the base64 PEM `caBundle`, or the system roots without one."""
    if not ca_bundle:
        return ssl.create_default_context()
    try:
        pem = base64.b64decode(ca_bundle, validate=True).decode()
        return ssl.create_default_context(cadata=pem)
    except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError) as exc:
        raise CallError(f"could not get REST client: unable to load root certificates: {exc}"
                        ) from exc


def _tls_reason(exc: ssl.SSLCertVerificationError) -> str:
    if exc.verify_code in (18, 19, 20, 21):  # self-signed, untrusted or unknown issuer
        return "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    return f"tls: failed to verify certificate: x509: {exc.verify_message}"


def post(endpoint: Endpoint, review: Mapping[str, Any], *, ca_bundle: str | None,
         timeout: float) -> Any:
    """POST the review; the decoded JSON answer, or CallError."""
    seconds = max(1, int(-(-timeout // 1)))
    sep = "&" if "?" in endpoint.path else "?"
    path = f"{endpoint.path}{sep}timeout={seconds}s"
    shown = f"{endpoint.shown}{sep}timeout={seconds}s"
    context = tls_context(ca_bundle)
    deadline = time.monotonic() + timeout
    conn = _Connection(endpoint, context=context, timeout=timeout)
    body = orjson.dumps(review)
    try:
        conn.request("POST", path, body=body, headers={
            "Content-Type": "application/json", "Accept": "application/json",
            "Host": f"{endpoint.server_name}:{endpoint.port}",
        })
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        if conn.sock is not None:
            conn.sock.settimeout(remaining)
        response = conn.getresponse()
        data = response.read()
    except TimeoutError as exc:
        raise _failed(f'Post "{shown}": context deadline exceeded') from exc
    except ssl.SSLCertVerificationError as exc:
        raise _failed(f'Post "{shown}": {_tls_reason(exc)}') from exc
    except ConnectionRefusedError as exc:
        raise _failed(f'Post "{shown}": dial tcp {endpoint.address}:{endpoint.port}: '
                        "connect: connection refused") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise _failed(f'Post "{shown}": {exc}') from exc
    finally:
        conn.close()
    if not 200 <= response.status < 300:
        text = data.decode(errors="replace").strip()
        raise _failed(f'an error on the server ("{text}") has prevented the request from '
                        "succeeding" if text else
                        f"the server responded with the status code {response.status} but did "
                        "not return more information")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _failed(f"the response is not JSON: {exc}") from exc
