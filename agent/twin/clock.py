"""The twin's model clock: model seconds run `speed` times faster than wall seconds.

Created by `cluster.TwinCluster` from `--speed`; read by the controllers' work queues (delays are
given in model seconds), the kubelet (start delays, crash back-off) and the training runtime
(counters integrate over model time). Timestamps written into objects stay wall-clock time; only
durations are scaled. It does not sleep or schedule anything itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class TwinClock:
    def __init__(
        self, speed: float = 1.0, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        if speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self.speed = float(speed)
        self._monotonic = monotonic
        self._origin = monotonic()

    def now(self) -> float:
        """Model seconds since the clock was made."""
        return (self._monotonic() - self._origin) * self.speed

    def wall(self, model_seconds: float) -> float:
        """How many wall seconds `model_seconds` take."""
        return max(0.0, model_seconds) / self.speed
