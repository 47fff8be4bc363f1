"""A self-signed serving certificate for the twin's API server, made with the openssl CLI.

kubectl sends bearer tokens only over TLS (client-go's clientcmd drops credentials for plain
http), so a twin with authentication serves HTTPS. This module makes one certificate for
127.0.0.1/localhost per process (cached), returns a server SSLContext and the PEM the kubeconfig
carries as certificate-authority-data. Called by apiserver.py; needs /usr/bin/openssl.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from agent.errors import UnavailableError


@dataclass(frozen=True)
class Certificate:
    cert_pem: bytes
    key_pem: bytes

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        with tempfile.TemporaryDirectory(prefix="twin-tls-") as tmp:
            cert = Path(tmp) / "tls.crt"
            key = Path(tmp) / "tls.key"
            cert.write_bytes(self.cert_pem)
            key.write_bytes(self.key_pem)
            key.chmod(0o600)
            context.load_cert_chain(cert, key)
        return context


_lock = threading.Lock()
_cached: Certificate | None = None


def certificate() -> Certificate:
    """The process's self-signed certificate for 127.0.0.1 and localhost (made once)."""
    global _cached
    with _lock:
        if _cached is None:
            _cached = _make()
        return _cached


def _make() -> Certificate:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise UnavailableError("the twin needs the openssl command to serve TLS; none on PATH")
    with tempfile.TemporaryDirectory(prefix="twin-tls-") as tmp:
        cert = Path(tmp) / "tls.crt"
        key = Path(tmp) / "tls.key"
        done = subprocess.run(
            [
                openssl,
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                str(key),
                "-out",
                str(cert),
                "-days",
                "3650",
                "-subj",
                "/CN=zonemedic-twin",
                "-addext",
                "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,digitalSignature,keyCertSign",
                "-addext",
                "extendedKeyUsage=serverAuth",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        if done.returncode != 0:
            raise UnavailableError(
                f"openssl could not make the twin's certificate: {done.stderr.strip()}"
            )
        return Certificate(cert.read_bytes(), key.read_bytes())
