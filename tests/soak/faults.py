"""The soak's random faults, one at a time at a bounded rate: watch streams cut, 410 storms
(history compacted and every watch cut), API 500s and 429s (the twin's fault injection), the
Prometheus server stopped then started again, Slack answering 429 or 500 for a while, the
private PostgreSQL restarted (a real restart: every connection cut), and the leader SIGKILLed
(a fresh replica started in its place). The first faults are one of each kind, in a random order;
then kinds are drawn by weight. Every fault injected is counted by kind.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.soak.rig import Rig

KINDS = ("watch_cut", "storm_410", "api_500", "api_429", "prometheus_restart", "slack_429",
         "slack_500", "database_restart", "leader_kill")
WEIGHTS = (3, 2, 3, 2, 1, 1, 1, 1, 1)
MIN_GAP = {"leader_kill": 15.0, "database_restart": 10.0}  # seconds between two of these


@dataclass
class FaultLog:
    counts: Counter[str] = field(default_factory=Counter)
    lines: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, kind: str, detail: str = "") -> None:
        with self.lock:
            self.counts[kind] += 1
            self.lines.append(f"{time.strftime('%H:%M:%S')} {kind} {detail}".rstrip())


class Faults:
    def __init__(self, rig: Rig, rng: random.Random) -> None:
        self.rig = rig
        self.rng = rng
        self.log = FaultLog()
        self.last: dict[str, float] = {}
        self.deck: list[str] = []
        self.dealt = False

    def inject(self) -> str:
        """One random fault (one whose minimum gap has not passed becomes a watch cut)."""
        if not self.deck and not self.dealt:  # every kind once first, in a random order
            self.deck = self.rng.sample(KINDS, len(KINDS))
            self.dealt = True
        kind = self.deck.pop() if self.deck else self.rng.choices(KINDS, weights=WEIGHTS)[0]
        if time.monotonic() - self.last.get(kind, -1e9) < MIN_GAP.get(kind, 0.0):
            kind = "watch_cut"
        rig, rng = self.rig, self.rng
        api = rig.access.server
        if kind == "watch_cut":
            self.log.note(kind, f"{api.close_watches()} streams")
        elif kind == "storm_410":
            api.expire_history()
            self.log.note(kind, f"{api.close_watches()} streams")
        elif kind in ("api_500", "api_429"):
            count = rng.randint(3, 15)
            code = 500 if kind == "api_500" else 429
            api.faults.fail(count, code=code, retry_after=1 if code == 429 else None)
            self.log.note(kind, f"{count} requests")
        elif kind == "prometheus_restart":
            rig.prometheus.stop()
            time.sleep(rng.uniform(1, 4))
            rig.prometheus.restart()
            self.log.note(kind)
        elif kind in ("slack_429", "slack_500"):
            seconds = rng.uniform(1, 4)
            rig.slack.fail(status=429 if kind == "slack_429" else 500, seconds=seconds)
            self.log.note(kind, f"{seconds:.1f}s")
        elif kind == "database_restart":
            rig.pg.restart()
            self.log.note(kind)
        elif kind == "leader_kill" and rig.replace_leader():
            self.log.note(kind)
        self.last[kind] = time.monotonic()
        return kind

    def heal(self) -> None:
        """End of the faults: nothing pending, everything up."""
        self.rig.access.server.faults.clear()
        self.rig.slack.heal()
        if self.rig.prometheus.process.poll() is not None:
            self.rig.prometheus.restart()
        if not self.rig.pg.running():
            self.rig.pg.start()
