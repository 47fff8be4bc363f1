"""Exponential backoff with full jitter, for the watch loops' retries after errors.

Called by `agent.sources.kube`. Pure apart from the random source, which the caller may inject
(tests pass a fixed one). Delay n is uniform in [0, min(cap, base * 2**n)] ("full jitter"), never
below `floor`; a server's Retry-After wins when larger.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    base: float = 0.2
    cap: float = 30.0
    floor: float = 0.05
    rand: Callable[[], float] = field(default=random.random)
    attempts: int = 0

    def next(self, retry_after: float | None = None) -> float:
        ceiling = min(self.cap, math.ldexp(self.base, self.attempts))
        self.attempts = min(self.attempts + 1, 30)
        delay = max(self.floor, ceiling * float(self.rand()))
        if retry_after is not None:
            delay = max(delay, min(float(retry_after), self.cap))
        return delay

    def reset(self) -> None:
        self.attempts = 0
