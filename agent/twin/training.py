"""The twin's training model: how fast a distributed job steps, and how busy its GPUs look.

Called by `training_runtime` (which knows where pods run and whether their flows pass) and by the
exporter through it. Pure: plain numbers in, plain numbers out, no clock. It does not decide
connectivity (that is `dataplane`), and it does not move pods.

Model: each step is `compute` seconds of GPU work followed by a ring all-reduce of the gradients
over the job's slowest link (any two participants in different zones make it the inter-zone link):
`comm = 2 (n-1) rtt + 2 (n-1)/n * bytes / bandwidth`. GPU utilization = compute / (compute + comm).
The defaults are calibrated to the reported incident: a 5-rank job split across zones runs at ~40%,
the same job inside one zone at ~85%.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class Link:
    """A network path: round-trip time (seconds) and bandwidth (bytes per second)."""

    rtt_seconds: float
    bandwidth_bytes_per_second: float


@dataclass(frozen=True)
class ZoneModel:
    """Intra-zone and inter-zone links (defaults: 0.1 ms / 100 Gbit/s and 2 ms / 12 Gbit/s)."""

    intra: Link = Link(0.0001, 12.5e9)
    inter: Link = Link(0.002, 1.5e9)

    def link(self, zone_a: str, zone_b: str) -> Link:
        return self.intra if zone_a == zone_b else self.inter

    def slowest(self, zones: Iterable[str]) -> Link:
        """The link a ring all-reduce over pods in `zones` is bound by."""
        return self.inter if len(set(zones)) > 1 else self.intra


@dataclass(frozen=True)
class TrainingParams:
    """Per-job model parameters (scenarios may override each)."""

    compute_seconds: float = 1.0  # GPU time per step
    gradient_bytes: float = 1.375e9  # bytes all-reduced per step
    connect_attempts: int = 3  # a worker's tries to reach its peers before it exits with Error
    connect_retry_seconds: float = 5.0  # between two tries


@dataclass(frozen=True)
class StepTiming:
    compute: float
    comm: float

    @property
    def step(self) -> float:
        return self.compute + self.comm

    @property
    def utilization(self) -> float:
        """Fraction of the step the GPU is busy, 0..1."""
        return self.compute / self.step if self.step > 0 else 0.0


def allreduce_seconds(ranks: int, gradient_bytes: float, link: Link) -> float:
    """Ring all-reduce: 2(n-1) latency-bound exchanges plus 2(n-1)/n of the bytes on the wire."""
    if ranks <= 1:
        return 0.0
    steps = 2 * (ranks - 1)
    return (
        steps * link.rtt_seconds + steps / ranks * gradient_bytes / link.bandwidth_bytes_per_second
    )


def bytes_sent_per_step(ranks: int, gradient_bytes: float) -> float:
    """What one rank transmits per ring all-reduce."""
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) / ranks * gradient_bytes


def step_timing(params: TrainingParams, *, ranks: int, link: Link) -> StepTiming:
    return StepTiming(
        compute=params.compute_seconds,
        comm=allreduce_seconds(ranks, params.gradient_bytes, link),
    )


class JobPhase(StrEnum):
    """What the job's GPUs are doing."""

    WAITING = "waiting"  # not all pods running yet (or suspended)
    TRAINING = "training"
    BLOCKED = "blocked"  # a required flow is denied: no progress


IDLE_UTILIZATION = 0.0
BLOCKED_UTILIZATION = 0.01  # a blocked worker spins a little while it retries


def gpu_utilization(phase: JobPhase, timing: StepTiming | None) -> float:
    """0..1 for a GPU held by one of the job's pods."""
    if phase is JobPhase.TRAINING and timing is not None:
        return timing.utilization
    if phase is JobPhase.BLOCKED:
        return BLOCKED_UTILIZATION
    return IDLE_UTILIZATION


def jitter(key: str, bucket: int, *, amplitude: float) -> float:
    """A reproducible wobble in [-amplitude, amplitude] for sample `bucket` of series `key`."""
    digest = hashlib.blake2b(f"{key}/{bucket}".encode(), digest_size=4).digest()
    unit = int.from_bytes(digest, "big") / 0xFFFFFFFF
    return (unit * 2 - 1) * amplitude
