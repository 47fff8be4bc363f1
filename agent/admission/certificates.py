"""The webhook's serving certificate: read from mounted files (and read again when they change),
or made by the agent (a CA and a certificate it signs, for the Service's DNS names).

Who calls it: the composition root (`agent.runtime.admission_wiring`) at start-up, and the
webhook's server, whose TLS context it keeps loaded. What it does: `make_certificate` signs a
serving certificate for the names the API server dials (`<service>.<namespace>.svc` and its
longer and shorter forms, or the host of `admission.url`) with a new CA (both ECDSA P-256, a
year valid); `ServingContext` holds one `ssl.SSLContext` over a certificate and key file pair and
loads the pair again when either file changes (`reload_if_changed`, called every
`admission.cert_reload` by `watch`): new connections get the rotated certificate, open ones keep
theirs, nothing restarts. A pair that does not load is `CertificateError` naming the files (at
start-up), or logged and the old one kept (on reload). What it does not do: patch the CA into the
webhook configuration (the cluster writer does, `agent.remediation.writer`).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import ssl
import tempfile
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agent.errors import InputError
from agent.store.admissions import StoredCertificate

log = logging.getLogger(__name__)
VALIDITY = timedelta(days=365)


class CertificateError(InputError):
    """A serving certificate or key that cannot be loaded; the message names the files."""


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names kube-apiserver may dial a Service by."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]  # fmt: skip


def make_certificate(names: Sequence[str], *, now: datetime,
                     validity: timedelta = VALIDITY) -> StoredCertificate:  # fmt: skip
    """A new CA and a serving certificate it signs for `names` (DNS names or IP addresses),
    both valid for `validity` from `now`."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = now - timedelta(minutes=5), now + validity
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "zonemedic admission CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))  # fmt: skip
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))  # fmt: skip
    pem = serialization.Encoding.PEM
    return StoredCertificate(
        ca_pem=ca.public_bytes(pem).decode(), cert_pem=cert.public_bytes(pem).decode(),
        key_pem=key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()).decode(),
        not_after=end,
    )  # fmt: skip


def write_pair(certificate: StoredCertificate, directory: Path) -> tuple[Path, Path]:
    """The certificate and key written to `directory` (the key readable by this user only)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    cert, key = directory / "tls.crt", directory / "tls.key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(certificate.key_pem)
    cert.write_text(certificate.cert_pem)
    return cert, key


def private_directory() -> Path:
    return Path(tempfile.mkdtemp(prefix="zonemedic-admission-"))


def _stamp(path: Path) -> tuple[int, int]:
    found = path.stat()
    return found.st_mtime_ns, found.st_size


class ServingContext:
    """A server `ssl.SSLContext` over a certificate/key file pair, reloaded when they change."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.loads = 0
        self._stamps = self._load()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _load(self) -> tuple[tuple[int, int], tuple[int, int]]:
        try:
            stamps = (_stamp(self.cert_file), _stamp(self.key_file))
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise CertificateError(f"admission.cert_file {self.cert_file}, admission.key_file "
                                   f"{self.key_file}: cannot be loaded: {exc}") from None  # fmt: skip
        self.loads += 1
        return stamps

    def reload(self) -> None:
        """Load the pair again now (a pair just written); `CertificateError` when it does not
        load (the one loaded before is kept)."""
        self._stamps = self._load()

    def reload_if_changed(self) -> bool:
        """Load the pair again when either file changed since it was loaded; True when it did.
        A pair that does not load (a rotation half written) keeps the one loaded before."""
        try:
            now = (_stamp(self.cert_file), _stamp(self.key_file))
        except OSError as exc:
            log.warning("admission certificate files unreadable: the loaded one is kept",
                        extra={"error": str(exc)})  # fmt: skip
            return False
        if now == self._stamps:
            return False
        try:
            self._stamps = self._load()
        except CertificateError as exc:
            log.warning("admission certificate not reloaded: the loaded one is kept",
                        extra={"error": str(exc)})  # fmt: skip
            return False
        log.info("admission certificate reloaded", extra={"cert_file": str(self.cert_file)})
        return True

    def watch(self, every: float) -> None:
        """Check the files every `every` seconds on a daemon thread, until `stop`."""
        def loop() -> None:
            while not self._stop.wait(every):
                self.reload_if_changed()

        self._thread = threading.Thread(target=loop, name="admission-certificates", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
