"""The agent of `zonemedic run`: starts and stops, in order, what the composition root built.

Called by `agent.commands.run` (and by end-to-end tests and the demo, in-process) with a
`agent.runtime.root.Root`: `compose` builds every part once (the clients, the cache, its source,
Prometheus, the leader elector, the pipeline and its pieces, the remediation executor and the
approval expiry, the chat layer, the alert receiver and the incidents API) and returns the HTTP
routes and the leader-gated background jobs. This module holds what runs them: the detector (cache
changes, alerts and, when `kubernetes.packet_drop_events`, Cilium's PacketDrop Events are hints to
it; its debounced batches go to the pipeline), the scheduler (the playbooks' sweeps, the
periodic resync and the root's background jobs, gated by leader election, which also gates the
pipeline's recording of detector batches: acquiring the lease submits one cluster-wide change, so
the new leader diagnoses, records and reconciles everything once) and the HTTP server over the
root's routes (health, metrics, the webhook, the incidents API, Slack's events).

Start order: HTTP (so /healthz answers at once and /readyz says why it is not ready), the
admission webhook's HTTPS server when `admission.enabled` (it passes jobs unchanged until the
cache is synced), watches,
initial sync, the start-up change (one full diagnosis, due at once and queued before the detector
runs so that its first batch merges it with what the sync reported), leader election's first step on this thread
(so that first batch is already the leader's when the lease is free: one cluster-wide batch, not
a follower's then the leader's), detector, the what-if warm-up (`agent.runtime.whatif_warmer`, a
daemon thread on every replica), scheduler, then the chat layer's connection (Socket
Mode; HTTP mode has nothing to start). Stop order (SIGTERM): stop watches, the what-if warm-up, let the detector and a
running sweep finish their step, release the lease, stop the admission webhook, stop HTTP, then the chat layer (Socket Mode
closed, its workers finish). What it does not do: build any part, or decide anything itself.
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
from typing import Any

from agent.errors import UnavailableError
from agent.model.job import JobRef
from agent.playbook.model import Playbook
from agent.runtime.detector import BatchOutcome, Detector
from agent.runtime.leader import LeaderElector
from agent.runtime.limits import HttpLimits
from agent.runtime.root import Hooks, Root
from agent.runtime.scheduler import (
    LEDGER_ANNOTATION,
    SweepScheduler,
    decode_ledger,
    encode_ledger,
)
from agent.runtime.server import HttpServer
from agent.runtime.whatif_warmer import WhatIfWarmer
from agent.sources.alertmanager import Alert
from agent.sources.change import Change
from agent.sources.packetdrops import PacketDrop

log = logging.getLogger(__name__)


def leader_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


class Agent:
    """One running agent over what `root` composes for it (`identity`: its leader-election
    identity; `sync_timeout`: how long `start` waits for the initial sync)."""

    def __init__(
        self,
        root: Root,
        *,
        identity: str | None = None,
        sync_timeout: float = 120.0,
    ) -> None:
        settings = root.settings
        self.settings = settings
        self.identity = identity or leader_identity()
        self.sync_timeout = sync_timeout
        self.detector = Detector(
            debounce=settings.detection.debounce.total_seconds(),
            max_delay=settings.detection.max_delay.total_seconds(),
            handle=self._handle_change,
            outcome=self._batch_outcome,
        )
        self.composition = composed = root.compose(Hooks(
            on_change=self.detector.submit, on_alert=self._on_alert,
            on_packet_drops=self._on_packet_drops, on_started_leading=self._started_leading,
            on_stopped_leading=self._stopped_leading,
        ), identity=self.identity)  # fmt: skip
        self.playbooks = root.playbooks
        self.parts = composed.parts
        self.metrics = composed.clients.metrics
        self.api = composed.clients.api
        self.cache = composed.clients.cache
        self.source = composed.clients.source
        self.prometheus = composed.clients.prometheus
        self.elector = composed.elector
        self.pipeline = composed.pipeline
        self.chat = composed.chat
        self.scheduler = SweepScheduler(
            self.playbooks,
            run_sweep=lambda playbook, expr: self._sweep(playbook),
            is_leader=self.elector.is_leader,
            misfire_grace=settings.detection.sweep_misfire_grace,
            extra_jobs=self._extra_jobs(),
            on_ran=self._record_sweep,
        )
        self.server = HttpServer(
            composed.routes.app(metrics=self.metrics, readiness=self.readiness),
            host=settings.http.host,
            port=settings.http.port,
            limits=HttpLimits.of(settings.http),
        )
        self._stopped = threading.Event()
        self._detector_started = False
        whatif = composed.routes.whatif
        self.whatif_warmer = WhatIfWarmer(whatif.warm) if whatif is not None else None

    # -- wiring helpers -----------------------------------------------------------------------

    def _extra_jobs(self) -> Sequence[tuple[str, Any, Callable[[], None]]]:
        from apscheduler.triggers.interval import IntervalTrigger

        jobs: list[tuple[str, Any, Callable[[], None]]] = [
            (job.name, IntervalTrigger(seconds=job.every.total_seconds()), job.run)
            for job in self.composition.background_jobs
        ]
        resync = max(1.0, self.settings.detection.resync.total_seconds())
        jobs.append(("detection-resync", IntervalTrigger(seconds=resync), self._resync))
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
        checks.update(self.composition.database_readiness())
        return checks

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self.server.start()
        log.info("http listening", extra={"url": self.server.url, "identity": self.identity})
        if self.composition.admission is not None:
            self.composition.admission.start()
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
        if self.whatif_warmer is not None:
            self.whatif_warmer.start()
        self.scheduler.start()
        if self.elector.is_leader():  # the lease taken before the scheduler ran: resume it now
            self.scheduler.resume()
        self.chat.start()

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        """Graceful: stop watches, finish the current step, release the lease, stop the admission webhook, stop HTTP, then
        the chat layer."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        log.info("stopping", extra={"identity": self.identity})
        self.source.stop()
        self.detector.stop()
        if self.whatif_warmer is not None:
            self.whatif_warmer.stop()
        self.scheduler.shutdown(wait=True)
        if isinstance(self.elector, LeaderElector):
            self.elector.stop(timeout=10)
        if self.composition.admission is not None:
            self.composition.admission.stop()
        self.server.stop()
        self.chat.stop()
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
