"""The admission webhook's part of the running agent: its serving certificate, webhook and server.

Who calls it: the composition root (`agent.runtime.root.Root.compose`, when `admission.enabled`)
builds it with `build_admission`; the running agent (`agent.runtime.app.Agent`) starts it with
its HTTP server and stops it before. What it builds: the serving certificate's TLS context
(`agent.admission.certificates`): from `admission.cert_file`/`key_file` (a mounted Secret:
cert-manager's), read again every `admission.cert_reload` when they change; without them, the
agent's own: the cluster's certificate kept in the store (made by the first replica, so every
replica serves the one CA; renewed at start-up when within 30 days of its end, and while running
by `agent.runtime.certificate_renewal`, checked every `admission.cert_reload`), written to a
private directory, its CA patched (when the part starts, and at each renewal) into the agent's own
MutatingWebhookConfiguration
(`admission.configuration_name`) through the cluster writer (`ClusterWriter.
patch_webhook_ca_bundle`, the one write the webhook makes: each replica writes the same CA, so
no leadership term fences it). A patch the API server refuses is logged: the configuration then
names no CA the server trusts, calls fail, and `failurePolicy: Ignore` lets jobs through as
before. The webhook reads the pipeline's parsed view (the watch cache's: no API call per request),
as a thread of its own takes it every half second (`LatestView`): a request never waits for the
pipeline's lock, which a cluster-wide diagnosis holds; it passes jobs unchanged until a view taken
after the cache synced is held.
What it does not do: decide anything (the webhook), or serve the agent's other HTTP routes.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agent.admission.certificates import (
    ServingContext,
    make_certificate,
    private_directory,
    service_names,
    write_pair,
)
from agent.admission.decision import View
from agent.admission.manifest import webhook_names
from agent.admission.server import AdmissionServer
from agent.admission.webhook import Webhook
from agent.errors import ClusterWriteError, UnavailableError
from agent.remediation.fence import SOLE_WRITER, Fence
from agent.remediation.writer import ClusterWriter
from agent.runtime.certificate_renewal import CertificateRenewal
from agent.runtime.metrics import AgentMetrics
from agent.settings import Settings
from agent.store.admissions import StoredCertificate
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)


class LatestView:
    """The pipeline's parsed view, taken every `every` seconds on a thread of its own, so a
    request never waits for the pipeline's lock (held through a cluster-wide diagnosis): the
    webhook decides over the latest one. Ready once a view taken after the cache synced is
    held."""

    def __init__(self, take: Callable[[], View], *, synced: Callable[[], bool],
                 every: float = 0.5) -> None:  # fmt: skip
        self._take, self._synced, self._every = take, synced, every
        self._view: View | None = None
        self._fresh = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> None:
        synced = self._synced()
        self._view = self._take()
        self._fresh = self._fresh or synced

    def ready(self) -> bool:
        return self._fresh and self._view is not None

    def __call__(self) -> View:
        found = self._view
        if found is None:
            self.refresh()
            found = self._view
        assert found is not None
        return found

    def start(self) -> None:
        def loop() -> None:
            while True:
                try:
                    self.refresh()
                except Exception:  # the refresher's top-level loop: the last view is kept
                    log.exception("admission view not refreshed: the last one is kept")
                if self._stop.wait(self._every):
                    return

        self._thread = threading.Thread(target=loop, name="admission-view", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


@dataclass
class AdmissionService:
    """The webhook, its HTTPS server and its certificate, started and stopped together."""

    webhook: Webhook
    server: AdmissionServer
    serving: ServingContext
    reload_every: float
    patch_ca: Callable[[], None] | None = None  # the agent's own certificate: its CA patched in
    view: LatestView | None = None
    renewal: CertificateRenewal | None = None  # the agent's own certificate, renewed while running

    @property
    def url(self) -> str:
        return self.server.url

    def ready(self) -> bool:
        """Deciding: a view taken after the cache synced is held (before, jobs pass unchanged)."""
        return self.view is None or self.view.ready()

    def start(self) -> None:
        if self.view is not None:
            self.view.start()
        self.server.start()
        self.serving.watch(self.reload_every)
        log.info("admission webhook listening", extra={"url": self.server.url})
        if self.patch_ca is not None:
            self.patch_ca()
        if self.renewal is not None:
            self.renewal.start(self.reload_every)

    def stop(self) -> None:
        if self.renewal is not None:
            self.renewal.stop()
        self.server.stop()
        self.serving.stop()
        self.webhook.stop()
        if self.view is not None:
            self.view.stop()


def certificate_names(settings: Settings) -> list[str]:
    """The names the API server dials the webhook by: the URL's host, else the Service's."""
    admission = settings.admission
    if admission.url is not None:
        host = urlsplit(admission.url).hostname
        if host:
            return [host]
    return service_names(admission.service_name, admission.service_namespace)


def own_certificate(
    settings: Settings, *, store: IncidentStore | None, now: datetime
) -> StoredCertificate:
    """The agent's own serving certificate: the cluster's, kept in the store when there is one."""
    names = certificate_names(settings)

    def made() -> StoredCertificate:
        return make_certificate(names, now=now)

    return (store.shared_certificate(cluster=settings.cluster_name, now=now, make=made)
            if store is not None else made())  # fmt: skip


def ca_patcher(settings: Settings, *, api_client: Any) -> Callable[[str], None]:
    """What patches a CA bundle (PEM) into the agent's own webhook configuration, through the
    writer."""
    admission = settings.admission

    def write(ca_bundle: str, webhooks: list[str]) -> None:
        ClusterWriter(api_client).patch_webhook_ca_bundle(
            admission.configuration_name, webhooks=webhooks, ca_bundle=ca_bundle,
            fence=Fence(SOLE_WRITER, 0))  # fmt: skip

    def patch(ca_pem: str) -> None:
        ca_bundle = base64.b64encode(ca_pem.encode()).decode()
        names = webhook_names(settings)
        try:
            try:
                write(ca_bundle, names)
            except ClusterWriteError as exc:
                # 422: the installed configuration is not this settings' manifest (a group set
                # `admit_pods` since it was applied): the main webhook still gets its CA.
                if exc.status != 422 or len(names) == 1:
                    raise
                write(ca_bundle, names[:1])
                log.warning("admission caBundle patched into the main webhook only: the "
                            "configuration lacks the pods webhooks of these settings (apply "
                            "`zonemedic admission manifest` again)",
                            extra={"configuration": admission.configuration_name,
                                   "missing": names[1:]})  # fmt: skip
            log.info("admission caBundle patched",
                     extra={"configuration": admission.configuration_name})  # fmt: skip
        except (ClusterWriteError, UnavailableError) as exc:
            log.warning("admission caBundle not patched: the API server cannot verify the "
                        "webhook (failurePolicy Ignore lets jobs through unchanged)",
                        extra={"configuration": admission.configuration_name, "error": str(exc)})  # fmt: skip

    return patch


def build_admission(
    settings: Settings, *, view: Callable[[], View], ready: Callable[[], bool],
    store: IncidentStore | None, metrics: AgentMetrics, api_client: Any,
    now: Callable[[], datetime],
) -> AdmissionService:  # fmt: skip
    """The webhook's part (see the module docstring)."""
    admission = settings.admission
    patch_ca, renewal = None, None
    if admission.cert_file is not None and admission.key_file is not None:
        serving = ServingContext(Path(admission.cert_file), Path(admission.key_file))
    else:
        certificate = own_certificate(settings, store=store, now=now())
        directory = private_directory()
        serving = ServingContext(*write_pair(certificate, directory))
        patcher = ca_patcher(settings, api_client=api_client)
        ca_pem = certificate.ca_pem

        def patch_ca() -> None:
            patcher(ca_pem)

        renewal = CertificateRenewal(certificate, names=certificate_names(settings),
                                     cluster=settings.cluster_name, store=store, serving=serving,
                                     directory=directory, patch_ca=patcher, now=now)  # fmt: skip
    latest = LatestView(view, synced=ready)
    webhook = Webhook(
        settings, view=latest, ready=lambda: ready() and latest.ready(), store=store,
        count=lambda outcome: metrics.admission_decisions.labels(outcome=outcome).inc(),
        observe=metrics.admission_duration.observe, now=now,
    )  # fmt: skip
    server = AdmissionServer(webhook.handle, host=admission.host, port=admission.port,
                             context=serving.context)  # fmt: skip
    return AdmissionService(webhook=webhook, server=server, serving=serving,
                            reload_every=admission.cert_reload.total_seconds(), patch_ca=patch_ca,
                            view=latest, renewal=renewal)  # fmt: skip
