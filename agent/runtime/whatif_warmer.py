"""The what-if warm-up: a daemon thread that keeps the what-if's per-generation work (the jobs
found, with their facts: `LiveWhatIf.warm`) done ahead of the requests.

Started by `agent.runtime.app.Agent.start` once the caches' first sync was waited for (after
the detector, so it delays neither readiness nor detection) and stopped by `Agent.stop`. Every
`every` it asks the what-if to bring its held jobs up to date for the mirror's current
generation; a generation already held costs a look at the generation only, a new one finds again
only the jobs of the namespaces that changed. It runs on every replica (followers answer
`POST /api/whatif` too), not only the leader. What it does not do: answer a what-if, or take the
pipeline's lock for longer than the view's snapshot.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta

log = logging.getLogger(__name__)

WARM_EVERY = timedelta(seconds=5)


class WhatIfWarmer:
    """Runs `warm` at once, then every `every`, on a daemon thread until `stop`."""

    def __init__(self, warm: Callable[[], bool], *, every: timedelta = WARM_EVERY) -> None:
        self._warm = warm
        self._every = every.total_seconds()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.warmed = threading.Event()  # set once a warm-up found the caches synced

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="whatif-warmer", daemon=True)
            self._thread.start()

    def stop(self, *, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._warm():
                    self.warmed.set()
            except Exception:
                log.exception("what-if warm-up failed; the next request does the work")
            self._stop.wait(self._every)
