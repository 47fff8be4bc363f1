"""Judging a remediation from what the agent observes after the resume: verified, keep waiting, failed.

Called by `agent.remediation.remediator.Verification` in a poll loop: `judge_placement` while it waits for the
restarted pods to be bound, `judge` during verification. Pure: the observations (pods with zones,
phases and the scheduler's message, the re-diagnosis, utilization figures, elapsed time) and the
policy come in as data; no clock, no I/O.

Placement: every expected pod exists and is bound, and they all share the target zone. A pod still
unbound past `schedule_timeout` fails the remediation, naming the scheduler's reason (the pod's
`PodScheduled=False` message); pods bound in another zone fail it at once (not co-located).

Verification (within `verify_window` from its start): the placement still holds, the whole gang
runs (every expected pod Running with its containers running: a pod that gave up, failed or waits
in CrashLoopBackOff does not count, so a remediation is never verified while the job cannot
train), the re-diagnosis finds every required flow allowed (verdict `healthy`), and, when
Prometheus is configured, the
job's GPU utilization is at least `recovery_fraction` x the reference: the pre-split baseline when
one is known and above the figure before the fix, else 100 (the GPUs' full capacity). A job with no
utilization samples by the end of the window is verified on placement and flows alone (the reason
says so); so is a job whose utilization is not measured (`metrics` False: no Prometheus, or a
generic group), the reason saying which (`unmeasured`). Anything not yet true is PENDING until the window ends, then FAILED with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from agent.model.verdict import Verdict


class Outcome(StrEnum):
    VERIFIED = "verified"
    PENDING = "pending"
    FAILED = "failed"


@dataclass(frozen=True)
class PodObservation:
    """One pod of the job as observed: `zone` None while unbound; `unschedulable` is the
    scheduler's message when its PodScheduled condition says Unschedulable; `waiting` the reason a
    container of a Running pod is not running."""

    name: str
    zone: str | None
    phase: str = "Pending"
    terminating: bool = False
    unschedulable: str | None = None
    waiting: str | None = None  # why a container of it is not running (e.g. CrashLoopBackOff)

    @property
    def running(self) -> bool:
        """Running with every container running: the pod takes part in the job."""
        return self.phase == "Running" and not self.terminating and self.waiting is None


@dataclass(frozen=True)
class Observation:
    """What the agent saw at one poll. `metrics`: the job's utilization is measured (Prometheus
    configured, and a kind it measures); `unmeasured`: why not, when it is not."""

    target_zone: str
    expected_pods: int
    pods: Sequence[PodObservation]
    verdict: Verdict | None = None
    denied_flows: int = 0
    metrics: bool = False
    utilization_before: float | None = None
    utilization_baseline: float | None = None
    utilization_after: float | None = None
    unmeasured: str = "no metrics configured"


@dataclass(frozen=True)
class VerifyPolicy:
    schedule_timeout: timedelta
    verify_window: timedelta
    recovery_fraction: float


@dataclass(frozen=True)
class Judgement:
    outcome: Outcome
    reason: str

    @property
    def done(self) -> bool:
        return self.outcome is not Outcome.PENDING


def _zones(pods: Sequence[PodObservation]) -> Mapping[str, int]:
    out: dict[str, int] = {}
    for pod in pods:
        if pod.zone is not None:
            out[pod.zone] = out.get(pod.zone, 0) + 1
    return dict(sorted(out.items()))


def _seconds(value: timedelta) -> str:
    return f"{value.total_seconds():g}s"


def judge_placement(obs: Observation, policy: VerifyPolicy, *, elapsed: timedelta) -> Judgement:
    """Are the restarted pods all bound in the target zone (`elapsed` since the resume)?"""
    live = [p for p in obs.pods if not p.terminating and p.phase not in ("Succeeded", "Failed")]
    late = elapsed >= policy.schedule_timeout
    misplaced = sorted(p.name for p in live if p.zone is not None and p.zone != obs.target_zone)
    if misplaced:
        spread = ", ".join(f"{z}: {n}" for z, n in _zones(live).items())
        return Judgement(
            Outcome.FAILED,
            f"not co-located: {', '.join(misplaced)} bound outside {obs.target_zone} ({spread})",
        )
    unbound = [p for p in live if p.zone is None]
    if unbound:
        if not late:
            return Judgement(Outcome.PENDING, f"{len(unbound)} pod(s) not bound yet")
        blocked = next((p for p in unbound if p.unschedulable), unbound[0])
        why = blocked.unschedulable or "no scheduling decision yet"
        return Judgement(
            Outcome.FAILED,
            f"pod {blocked.name} unschedulable after {_seconds(policy.schedule_timeout)}: {why}",
        )
    if len(live) < obs.expected_pods:
        if not late:
            return Judgement(Outcome.PENDING, f"{len(live)} of {obs.expected_pods} pod(s) exist")
        return Judgement(
            Outcome.FAILED,
            f"only {len(live)} of {obs.expected_pods} pod(s) exist after "
            f"{_seconds(policy.schedule_timeout)}",
        )
    return Judgement(Outcome.VERIFIED, f"all {len(live)} pod(s) bound in {obs.target_zone}")


def recovery_threshold(obs: Observation, policy: VerifyPolicy) -> float:
    """The utilization (0-100) the job must reach: a fraction of the pre-split baseline, or of
    100 when no usable baseline is known."""
    reference = 100.0
    baseline = obs.utilization_baseline
    if baseline is not None and (obs.utilization_before is None or baseline > obs.utilization_before):
        reference = baseline
    return policy.recovery_fraction * reference


def judge(obs: Observation, policy: VerifyPolicy, *, elapsed: timedelta) -> Judgement:
    """The verification verdict (`elapsed` since verification started)."""
    in_window = elapsed < policy.verify_window
    window = _seconds(policy.verify_window)
    placed = judge_placement(obs, policy, elapsed=elapsed)
    if placed.outcome is Outcome.FAILED:
        return placed
    if placed.outcome is Outcome.PENDING:
        return placed if in_window else Judgement(Outcome.FAILED, f"{placed.reason} after {window}")
    live = [p for p in obs.pods if not p.terminating and p.phase not in ("Succeeded", "Failed")]
    running = [p for p in live if p.running]
    if len(running) < obs.expected_pods:
        idle = [f"{p.name} ({p.waiting or p.phase})" for p in live if not p.running]
        shown = f": {', '.join(idle[:3])}" if idle else ""
        gang = f"{len(running)} of {obs.expected_pods} pod(s) running{shown}"
        if in_window:
            return Judgement(Outcome.PENDING, f"waiting for the gang: {gang}")
        return Judgement(Outcome.FAILED, f"the gang is not running after {window}: {gang}")
    if obs.verdict is None or obs.verdict is Verdict.PENDING:
        if in_window:
            return Judgement(Outcome.PENDING, "waiting for the re-diagnosis")
        return Judgement(Outcome.FAILED, f"the job could not be re-diagnosed within {window}")
    if obs.verdict is not Verdict.HEALTHY or obs.denied_flows:
        if in_window:
            return Judgement(Outcome.PENDING, f"re-diagnosis says {obs.verdict.value}")
        return Judgement(
            Outcome.FAILED,
            f"flows still denied after {window}: re-diagnosis says {obs.verdict.value}"
            + (f" ({obs.denied_flows} denied flow(s))" if obs.denied_flows else ""),
        )
    flows = f"all {obs.expected_pods} pod(s) in {obs.target_zone}, every required flow allowed"
    if not obs.metrics:
        return Judgement(Outcome.VERIFIED, f"{flows}; {obs.unmeasured}")
    after = obs.utilization_after
    if after is None:
        if in_window:
            return Judgement(Outcome.PENDING, "waiting for utilization samples")
        return Judgement(Outcome.VERIFIED, f"{flows}; no utilization samples within {window}")
    threshold = recovery_threshold(obs, policy)
    if after >= threshold:
        return Judgement(
            Outcome.VERIFIED, f"{flows}; GPU utilization {after:.1f}% >= {threshold:.1f}%"
        )
    if in_window:
        return Judgement(
            Outcome.PENDING, f"GPU utilization {after:.1f}% below {threshold:.1f}% so far"
        )
    return Judgement(
        Outcome.FAILED,
        f"GPU utilization {after:.1f}% did not recover to {threshold:.1f}% within {window}",
    )
