"""The write fence: may this process still write to the cluster for the run it started?

Who uses it: `agent.remediation.remediator` opens a `Fence` when a run starts (from the replica's
`Leadership`) and `agent.remediation.writer.ClusterWriter` checks it right before every write;
the composition root hands the leader elector in as the `Leadership`
(`agent.runtime.leader.LeaderElector.term`), a single replica or the CLI hands `SOLE_WRITER`.

The rule: a run may write only while the replica leads in the same leadership term it started in.
A term ends when the lease is lost, when it was not renewed within the renew deadline, or when a
late renewal started a new term; any of these closes the fence for good, so a paused replica that
wakes up after another one took over (and perhaps finished the work) lands no late write. A write
already sent before the pause is fenced by the object itself (the writer's `uid` and
`resourceVersion` preconditions), not here. What it does not do: elect, renew, or sleep.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from agent.errors import ZonemedicError


class Leadership(Protocol):
    """Which leadership term this replica is in: a number that grows with each new term, or None
    while it does not lead."""

    def term(self) -> int | None: ...


@dataclass(frozen=True)
class SoleWriter:
    """The only writer there is (leader election off, the CLI, a test): always term 0."""

    def term(self) -> int:
        return 0


SOLE_WRITER = SoleWriter()


@dataclass(frozen=True)
class WhileLeading:
    """Leadership known only as a yes/no (`is_leader`): term 0 while it leads. A new term is then
    not told apart from the old one; prefer the elector's own `term`."""

    is_leader: Callable[[], bool]

    def term(self) -> int | None:
        return 0 if self.is_leader() else None


class FenceClosedError(ZonemedicError):
    """The leadership term a run started in has ended: it must not write (nothing was sent)."""


@dataclass(frozen=True)
class Fence:
    """The leadership term one run writes in; closed once the replica's term is another."""

    leadership: Leadership
    term: int

    def holds(self) -> bool:
        return self.leadership.term() == self.term

    def check(self, what: str) -> None:
        """Raise `FenceClosedError` naming `what` unless the run's term still holds."""
        now = self.leadership.term()
        if now != self.term:
            held = "no term" if now is None else f"term {now}"
            raise FenceClosedError(f"{what}: not sent, the leadership term {self.term} ended ({held} now)")


def open_fence(leadership: Leadership) -> Fence | None:
    """The fence of a run starting now, or None when this replica does not lead."""
    term = leadership.term()
    return None if term is None else Fence(leadership, term)
