"""Blocking until the operator stops a foreground twin command (Ctrl-C or SIGTERM).

Who calls it: `zonemedic twin apiserver` and `zonemedic twin up`. It installs its own SIGINT and
SIGTERM handlers (and restores the previous ones), so the command stops cleanly even when it was
started with SIGINT ignored, as background jobs of a non-interactive shell are. It does nothing else.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType


def wait_until_interrupted() -> None:
    """Block the main thread until SIGINT or SIGTERM arrives."""
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stop.wait(3600):
            pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
