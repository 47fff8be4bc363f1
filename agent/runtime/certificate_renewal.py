"""Renewing the agent's own admission serving certificate while it runs (no restart).

Who calls it: `agent.runtime.admission` builds one when no certificate is mounted (the agent
makes its own) and starts and stops it with the webhook. What it does, every `every` seconds
(`admission.cert_reload`): asks for the cluster's certificate as at start-up (the store's
`shared_certificate`: the one kept while it is valid for another `renew_margin`, else a new one,
the first replica's kept for every replica; without a store, a new one once the served one is
within the margin of its end); when that is not the certificate served, it writes the pair to
the serving directory, loads it into the server's TLS context (new connections get it) and
patches the webhook configuration's caBundle with the new CA followed by the one it replaces,
so a replica that has not taken the new certificate yet is still trusted until it does. A
replica that finds another's renewal in the store takes it the same way. A failed renewal (the
store away, a pair that does not load) is logged and tried again at the next check; the served
certificate is kept.
What it does not do: serve anything, or write to the cluster itself (the patcher it is handed
does, through the cluster writer).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path

from agent.admission.certificates import (
    VALIDITY,
    CertificateError,
    ServingContext,
    make_certificate,
    write_pair,
)
from agent.errors import UnavailableError
from agent.store.admissions import RENEW_BEFORE, StoredCertificate
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)


def renew_margin(validity: timedelta) -> timedelta:
    """How long before its end a certificate valid for `validity` is replaced: 30 days, or the
    last third of a shorter life."""
    return min(RENEW_BEFORE, validity / 3)


class CertificateRenewal:
    """The served certificate, replaced before its end (see the module docstring)."""

    def __init__(
        self, current: StoredCertificate, *, names: Sequence[str], cluster: str,
        store: IncidentStore | None, serving: ServingContext, directory: Path,
        patch_ca: Callable[[str], None], now: Callable[[], datetime],
        validity: timedelta = VALIDITY,
    ) -> None:  # fmt: skip
        self.current = current
        self._names, self._cluster, self._store = list(names), cluster, store
        self._serving, self._directory, self._patch_ca = serving, directory, patch_ca
        self._now, self._validity = now, validity
        self.renewals = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def wanted(self, now: datetime) -> StoredCertificate:
        """The certificate to serve at `now` (the current one while it is not due)."""
        margin = renew_margin(self._validity)

        def made() -> StoredCertificate:
            return make_certificate(self._names, now=now, validity=self._validity)

        if self._store is None:
            return self.current if self.current.not_after > now + margin else made()
        return self._store.shared_certificate(cluster=self._cluster, now=now, make=made,
                                              renew_before=margin)  # fmt: skip

    def check(self) -> bool:
        """Serve the wanted certificate when it is another one; True when it was replaced."""
        try:
            found = self.wanted(self._now())
        except UnavailableError as exc:
            log.warning("admission certificate not renewed: the store is away",
                        extra={"error": str(exc)})  # fmt: skip
            return False
        if found.cert_pem == self.current.cert_pem:
            return False
        try:
            write_pair(found, self._directory)
            self._serving.reload()
        except (OSError, CertificateError) as exc:
            log.warning("admission certificate not renewed: the new pair was not loaded",
                        extra={"error": str(exc)})  # fmt: skip
            return False
        before, self.current = self.current, found
        bundle = found.ca_pem if found.ca_pem == before.ca_pem else found.ca_pem + before.ca_pem
        self._patch_ca(bundle)
        self.renewals += 1
        log.info("admission certificate renewed", extra={"not_after": found.not_after.isoformat()})
        return True

    def start(self, every: float) -> None:
        def loop() -> None:
            while not self._stop.wait(every):
                self.check()

        self._thread = threading.Thread(target=loop, name="admission-renewal", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
