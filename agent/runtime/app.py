"""The agent of `zonemedic run`: wires the parts that `agent.runtime.root` builds and runs them.

Called by `agent.commands.run` (and by end-to-end tests and the demo, in-process). `Root` builds the
clients, the cache, its source, Prometheus and the leader elector from the settings; this module is
the only place that knows how the parts fit: the Kubernetes source feeds the cache; cache changes
and alerts go to the detector; the detector's batches, the scheduler's sweeps and the metric refresh
go to the `Pipeline` (the glue to the core and the store); Cilium's PacketDrop Events (when
`kubernetes.packet_drop_events`) go to the pipeline's timeline and, as a hint, to the detector;
leader election gates the scheduler (and the pipeline's recording of detector batches: acquiring the
lease submits one cluster-wide change, so the new leader diagnoses, records and reconciles
everything once); the HTTP app serves health, metrics, the webhook and the incidents API (`agent.runtime.incidents`,
over the store the pipeline records into: the pipeline serves no HTTP read).

Start order: HTTP (so /healthz answers at once and /readyz says why it is not ready), watches,
initial sync, the start-up change (one full diagnosis, due at once and queued before the detector
runs so that its first batch merges it with what the sync reported), leader election's first step on this thread
(so that first batch is already the leader's when the lease is free: one cluster-wide batch, not
a follower's then the leader's), detector, scheduler. Stop order (SIGTERM):
stop watches, let the detector and a running sweep finish their step, release the lease, stop HTTP.
What it does not do: decide anything itself.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from agent.errors import UnavailableError
from agent.model.job import JobRef
from agent.playbook.loader import load_playbooks, playbooks_directory
from agent.playbook.model import Playbook
from agent.runtime.alerts import AlertReceiver
from agent.runtime.detector import BatchOutcome, Detector
from agent.runtime.http import build_app
from agent.runtime.incidents import StoreIncidents, database_readiness
from agent.runtime.leader import LeaderElector
from agent.runtime.limits import HttpLimits
from agent.runtime.root import Parts, Root
from agent.runtime.scheduler import (
    LEDGER_ANNOTATION,
    SweepScheduler,
    decode_ledger,
    encode_ledger,
)
from agent.runtime.server import HttpServer
from agent.runtime.webhook_credentials import WebhookCredentials
from agent.settings import Settings, read_secret_file
from agent.sources.alertmanager import Alert
from agent.sources.change import Change
from agent.sources.packetdrops import DropEventReader, PacketDrop
from agent.sources.resources import PACKET_DROP_EVENTS
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)


class Pipeline(Protocol):
    """The glue from detection to the core and the store (see `agent.runtime.pipeline`)."""

    def handle_change(self, change: Change, first_seen: float) -> Change | None:
        """Diagnose and record a batch; returns what to look at again after the debounce."""
        ...

    def handle_alert(self, alert: Alert, jobs: list[JobRef]) -> None: ...

    def sweep(self, playbook: Playbook | None) -> dict[str, Any]: ...

    def refresh_metrics(self) -> None: ...

    def handle_packet_drops(self, drops: list[PacketDrop]) -> Change:
        """Record Cilium's drop messages in their jobs' timelines; what to re-diagnose."""
        ...

    # the incident store it records into (None: it records nothing); the agent serves the
    # incidents API and the database's readiness over it (`agent.runtime.incidents`)
    store: IncidentStore | None


PipelineFactory = Callable[[Parts], Pipeline]


def leader_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


class Agent:
    def __init__(
        self,
        settings: Settings,
        *,
        pipeline_factory: PipelineFactory,
        api_client: Any = None,
        identity: str | None = None,
        sync_timeout: float = 120.0,
        playbooks: list[Playbook] | None = None,
    ) -> None:
        self.settings = settings
        self.identity = identity or leader_identity()
        self.sync_timeout = sync_timeout
        self.playbooks = (
            playbooks
            if playbooks is not None
            else load_playbooks(playbooks_directory(settings.playbooks_dir))
        )
        self.detector = Detector(
            debounce=settings.detection.debounce.total_seconds(),
            max_delay=settings.detection.max_delay.total_seconds(),
            handle=self._handle_change,
            outcome=self._batch_outcome,
        )
        self.root = Root(
            settings, playbooks=self.playbooks, api_client=api_client, on_change=self.detector.submit
        )
        self.metrics = self.root.metrics
        self.api = self.root.api
        self.cache = self.root.cache
        self.source = self.root.source
        self.prometheus = self.root.prometheus
        self.elector = self.root.elector(
            identity=self.identity,
            on_started_leading=self._started_leading,
            on_stopped_leading=self._stopped_leading,
        )
        self.parts = self.root.parts(is_leader=self.elector.is_leader, leadership=self.elector)
        self.pipeline = pipeline_factory(self.parts)
        if settings.kubernetes.packet_drop_events:
            ignored = self.metrics.packet_drops.labels(outcome="ignored")
            self.source.add_reader(
                PACKET_DROP_EVENTS,
                DropEventReader(self._on_packet_drops, on_ignored=ignored.inc),
            )
        self.scheduler = SweepScheduler(
            self.playbooks,
            run_sweep=lambda playbook, expr: self._sweep(playbook),
            is_leader=self.elector.is_leader,
            misfire_grace=settings.detection.sweep_misfire_grace,
            extra_jobs=self._extra_jobs(),
            on_ran=self._record_sweep,
        )
        self.alerts = AlertReceiver(
            jobs_named=self.cache.jobs_named,
            job_of_pod=self.cache.job_of_pod,
            ready=lambda: self.cache.synced,
            on_alert=self._on_alert,
            on_outcome=lambda outcome: self.metrics.alerts.labels(outcome=outcome).inc(),
        )
        incidents = (StoreIncidents.of(self.pipeline.store, self.parts)
                     if self.pipeline.store is not None else None)  # fmt: skip
        self.server = HttpServer(
            build_app(
                metrics=self.metrics,
                readiness=self.readiness,
                alerts=self.alerts,
                incidents=incidents,
                api_token=self._api_token(),
                decisions=incidents,
                extra_routes=self.parts.extra_routes,
                webhook_credentials=WebhookCredentials.of(settings.alertmanager),
            ),
            host=settings.http.host,
            port=settings.http.port,
            limits=HttpLimits.of(settings.http),
        )
        self._stopped = threading.Event()
        self._detector_started = False

    # -- wiring helpers -----------------------------------------------------------------------

    def _api_token(self) -> str | None:
        path = self.settings.http.api_token_file
        return read_secret_file(path, key="http.api_token_file") if path else None

    def _extra_jobs(self) -> Sequence[tuple[str, Any, Callable[[], None]]]:
        from apscheduler.triggers.interval import IntervalTrigger

        jobs: list[tuple[str, Any, Callable[[], None]]] = []
        if self.prometheus is not None:
            seconds = max(1.0, self.settings.detection.metrics_interval.total_seconds())
            jobs.append(("metrics-refresh", IntervalTrigger(seconds=seconds), self.pipeline.refresh_metrics))
        resync = max(1.0, self.settings.detection.resync.total_seconds())
        jobs.append(("detection-resync", IntervalTrigger(seconds=resync), self._resync))
        for job in self.parts.background_jobs:
            jobs.append((job.name, IntervalTrigger(seconds=job.every.total_seconds()), job.run))
        return jobs

    def _resync(self) -> None:
        """The leader's periodic cluster-wide diagnosis (`detection.resync`), on the detector."""
        if not self._stopped.is_set():
            self.detector.submit(Change(everything=True, reasons=("resync",)))

    def _batch_outcome(self, outcome: BatchOutcome) -> None:
        self.metrics.detection_batches.labels(outcome=outcome.value).inc()

    def _handle_change(self, change: Change, first_seen: float) -> None:
        again = self.pipeline.handle_change(change, first_seen)
        if again is not None and not self._stopped.is_set():
            self.detector.submit(again)  # not urgent: it waits for the debounce window

    def _on_alert(self, alert: Alert, jobs: list[JobRef]) -> bool:
        if self._stopped.is_set():
            return False
        self.pipeline.handle_alert(alert, jobs)
        if jobs:  # an alert is a hint to look at these jobs again, now
            self.detector.submit(Change(jobs=frozenset(jobs), reasons=(f"alert {alert.name}",)))
        return True

    def _on_packet_drops(self, drops: list[PacketDrop]) -> None:
        """Cilium's drops (on the PacketDrop informer's thread): their messages go into the
        jobs' timelines, and the jobs they name are a hint to look again, now."""
        if self._stopped.is_set():
            return
        again = self.pipeline.handle_packet_drops(drops)
        if again:
            self.detector.submit(again)

    def _sweep(self, playbook: Playbook | None) -> None:
        started = time.monotonic()
        try:
            self.pipeline.sweep(playbook)
            self.metrics.sweeps.labels(outcome="ok").inc()
        except UnavailableError:
            self.metrics.sweeps.labels(outcome="error").inc()
            raise
        finally:
            self.metrics.sweep_duration.observe(time.monotonic() - started)

    def _record_sweep(self, ledger: dict[str, datetime]) -> None:
        if isinstance(self.elector, LeaderElector):
            self.elector.set_annotation(LEDGER_ANNOTATION, encode_ledger(ledger))

    def _started_leading(self) -> None:
        self.metrics.set_leader(True)
        if isinstance(self.elector, LeaderElector):
            self.scheduler.load_ledger(
                decode_ledger(self.elector.annotations().get(LEDGER_ANNOTATION))
            )
        self.scheduler.resume()
        if self._detector_started and not self._stopped.is_set():
            # catch up: as a follower this replica recorded nothing; one full diagnosis, recorded
            # and reconciled, on the detector thread (not this one: it renews the lease)
            self.detector.submit(Change(everything=True, reasons=("leadership acquired",)),
                                 at_once=True)

    def _stopped_leading(self) -> None:
        self.metrics.set_leader(False)
        self.scheduler.pause()

    def readiness(self) -> dict[str, bool]:
        checks = {"caches_synced": self.cache.synced}
        checks.update(database_readiness(self.pipeline.store,
                                         timeout=self.settings.http.database_timeout))
        return checks

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self.server.start()
        log.info("http listening", extra={"url": self.server.url, "identity": self.identity})
        self.source.start()
        if not self.source.wait_synced(self.sync_timeout):
            log.warning("caches not synced yet; continuing, /readyz says not ready")
        self.detector.submit(Change(everything=True, reasons=("start-up",)), at_once=True)
        if isinstance(self.elector, LeaderElector):
            self.elector.run_in_thread(step_first=True)
        else:
            self.metrics.set_leader(True)
        self.detector.start()
        self._detector_started = True
        self.scheduler.start()
        if self.elector.is_leader():  # the lease taken before the scheduler ran: resume it now
            self.scheduler.resume()

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        """Graceful: stop watches, finish the current step, release the lease, stop HTTP."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        log.info("stopping", extra={"identity": self.identity})
        self.source.stop()
        self.detector.stop()
        self.scheduler.shutdown(wait=True)
        if isinstance(self.elector, LeaderElector):
            self.elector.stop(timeout=10)
        self.server.stop()
        log.info("stopped", extra={"identity": self.identity})

    def run_until_signalled(self) -> None:
        """Start, then block until SIGTERM/SIGINT (main thread only), then stop gracefully."""
        done = threading.Event()

        def on_signal(signum: int, _frame: Any) -> None:
            log.info("signal received", extra={"signal": signal.Signals(signum).name})
            done.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            done.wait()
        finally:
            self.stop()
            for s, handler in previous.items():
                signal.signal(s, handler)
