"""Dying at every point of a remediation, in process: the crash walk of the remediation tests.

A `Walk` drives one incident with fresh Remediators until it ends. Each run stops at the first
point it reaches that no earlier run stopped at -- a write the server answered (before its step is
recorded) or a step just recorded -- in one of two ways:
- `Death.KILL`: the run dies there (`Killed`, a BaseException nothing in the agent catches: no
  cleanup, no further record, as a SIGKILL between two statements);
- `Death.STORE_AWAY`: the database refuses writes from there on (`outage`: another connection
  holds SQLite's write lock, `SqliteLock`, or every connection to PostgreSQL is cut and new ones
  refused, a `TcpGate` in front of it), so the run's next record fails with
  `StoreUnavailableError` after its retry budget, no crash; the outage ends before the next run.
The next run is a fresh Remediator on the same store, so it resumes from what the store recorded
and what the cluster holds. The walk records every point it stopped at, and every real write the
cluster answered across all runs (what a test checks "never twice" and "never half-done" on). A
point is named by what happened there ("delete Job llm-workers-b", "step job_deleting delete
llm-workers-b"); a write made a second time (the rollback's) is a point of its own ("... #2").
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from agent.errors import UnavailableError
from agent.model.lifecycle import IncidentStatus, is_terminal
from agent.remediation.remediator import Remediator
from agent.remediation.run import Step
from agent.remediation.writer import Write
from agent.store.repository import IncidentStore
from tests.support.tcpgate import TcpGate


class Killed(BaseException):
    """The process died here."""


class Outage(Protocol):
    def start(self) -> None: ...

    def end(self) -> None: ...


class SqliteLock:
    """SQLite's write lock held by another connection while the outage lasts (WAL: reads go on)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def start(self) -> None:
        self._conn = sqlite3.connect(self.path, timeout=0.1, isolation_level=None)
        self._conn.execute("BEGIN EXCLUSIVE")

    def end(self) -> None:
        if self._conn is not None:
            self._conn.execute("ROLLBACK")
            self._conn.close()
            self._conn = None


class GateCut:
    """Every connection through the gate cut and new ones refused while the outage lasts."""

    def __init__(self, gate: TcpGate) -> None:
        self.gate = gate

    def start(self) -> None:
        self.gate.cut()

    def end(self) -> None:
        self.gate.restore()


class Death(StrEnum):
    KILL = "kill"
    STORE_AWAY = "store_away"


@dataclass
class Walk:
    """Drive `incident_id` with `make(on_step, on_write)` Remediators until it is terminal."""

    make: Callable[[Callable[[Step], None], Callable[[Write], None]], Remediator]
    store: IncidentStore
    incident_id: int
    death: Death
    outage: Outage | None = None  # for STORE_AWAY
    only: Callable[[str], bool] = lambda _where: True  # the points to stop at
    stops: list[str] = field(default_factory=list)  # where each run stopped, in order
    writes: list[Write] = field(default_factory=list)  # every real write answered
    outcomes: list[str] = field(default_factory=list)  # how each run ended
    _away: bool = False
    _stopped: bool = False

    @classmethod
    def every_point(cls, make: Callable[[Callable[[Step], None], Callable[[Write], None]], Remediator],
                    store: IncidentStore, incident_id: int, death: Death, *, sqlite_db: str) -> Walk:
        """A walk stopping at every point (KILL), or at every real write with the SQLite store at
        `sqlite_db` locked (STORE_AWAY: the steps' own records are what the outage refuses)."""
        only = (lambda w: not w.startswith("step ")) if death is Death.STORE_AWAY else (lambda _w: True)
        return cls(make, store, incident_id, death, outage=SqliteLock(sqlite_db), only=only)

    def _point(self, where: str) -> None:
        if self._stopped or where in self.stops or not self.only(where):
            return
        self._stopped = True
        self.stops.append(where)
        if self.death is Death.KILL:
            raise Killed(where)
        assert self.outage is not None
        self.outage.start()
        self._away = True

    def on_step(self, step: Step) -> None:
        """A step recorded: named by the step, and for an intent by its write and target (a step
        recorded again, a verification after a resume, is the same point)."""
        actions = [a for a in self.store.get_incident(self.incident_id).actions
                   if a.payload.get("step") == step.value]  # fmt: skip
        payload = actions[-1].payload if actions else {}
        what = f" {payload['write']} {payload['target']}" if "write" in payload else ""
        self._point(f"step {step.value}{what}")

    def on_write(self, write: Write) -> None:
        """A write answered: named by verb, kind and object, numbered from its second time (the
        rollback's writes are points of their own)."""
        if write.dry_run:
            return
        name = f"{write.verb.value} {write.kind} {write.name}"
        seen = sum(1 for w in self.writes if (w.verb, w.kind, w.name) == (write.verb, write.kind, write.name))
        self.writes.append(write)
        self._point(name if not seen else f"{name} #{seen + 1}")

    def _unlock(self) -> None:
        if self._away and self.outage is not None:
            self.outage.end()
        self._away = False

    def run(self, *, limit: int = 80) -> IncidentStatus:
        """Runs until one ends terminal without stopping (at most `limit` runs)."""
        for _ in range(limit):
            self._stopped = False
            remediator = self.make(self.on_step, self.on_write)
            try:
                status = remediator.run(self.incident_id)
            except Killed as exc:
                self.outcomes.append(f"killed at {exc}")
                continue
            except UnavailableError as exc:
                self.outcomes.append(f"store away: {exc}")
                continue
            finally:
                self._unlock()
            self.outcomes.append(status.value)
            if is_terminal(status) and not self._stopped:
                return status
        raise AssertionError(f"no end after {limit} runs: {self.outcomes[-5:]}")
