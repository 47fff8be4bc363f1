"""A leader-gated background job: a name, an interval and what to run.

Built by the composition root (`agent.runtime.root`: the metrics refresh, the remediation executor,
the approval expiry, the Slack outbox deliverer) and by the chat wiring for its deliverer; the
running agent hands them to its scheduler (`agent.runtime.scheduler`), which runs each on the leader
only, never twice at once, paused while this replica follows.

What it does not do: schedule or run anything itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from agent.errors import ConfigError


@dataclass(frozen=True)
class BackgroundJob:
    """A job the leader runs every `every`. A non-positive interval is a `ConfigError`."""

    name: str
    every: timedelta
    run: Callable[[], None]

    def __post_init__(self) -> None:
        if self.every <= timedelta(0):
            raise ConfigError(f"background job {self.name!r}: the interval must be positive")


def unique(jobs: Iterable[BackgroundJob]) -> tuple[BackgroundJob, ...]:
    """`jobs` as a tuple; a name given twice is a `ConfigError`."""
    out: list[BackgroundJob] = []
    for job in jobs:
        if any(seen.name == job.name for seen in out):
            raise ConfigError(f"background job {job.name!r} is registered twice")
        out.append(job)
    return tuple(out)
