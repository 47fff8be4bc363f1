"""The pure judge of a remediation: table tests over placement, flows and utilization."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agent.model.verdict import Verdict
from agent.remediation.verify import (
    Observation,
    Outcome,
    PodObservation,
    VerifyPolicy,
    judge,
    judge_placement,
    recovery_threshold,
)

POLICY = VerifyPolicy(
    schedule_timeout=timedelta(seconds=30), verify_window=timedelta(seconds=60),
    recovery_fraction=0.8,
)  # fmt: skip
S = timedelta(seconds=1)
UNSCHEDULABLE = "0/4 nodes are available: 2 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector."


def pods(*zones: str | None, **kw: Any) -> tuple[PodObservation, ...]:
    return tuple(
        PodObservation(f"p-{i}", zone, phase="Running" if zone else "Pending", **kw)
        for i, zone in enumerate(zones)
    )


def obs(*zones: str | None, expected: int | None = None, **kw: Any) -> Observation:
    return Observation(target_zone="a", expected_pods=len(zones) if expected is None else expected,
                       pods=kw.pop("the_pods", pods(*zones)), **kw)  # fmt: skip


@pytest.mark.parametrize(
    ("observation", "elapsed", "outcome", "reason"),
    [
        (obs("a", "a", "a"), 1 * S, Outcome.VERIFIED, "all 3 pod(s) bound in a"),
        (obs("a", None, "a"), 5 * S, Outcome.PENDING, "1 pod(s) not bound yet"),
        (obs("a", None, "a"), 30 * S, Outcome.FAILED, "pod p-1 unschedulable after 30s: no scheduling decision"),
        (obs(the_pods=(PodObservation("m", "a", "Running"),
                       PodObservation("w", None, unschedulable=UNSCHEDULABLE)), expected=2),
         31 * S, Outcome.FAILED, f"pod w unschedulable after 30s: {UNSCHEDULABLE}"),
        (obs("a", "b", "a"), 1 * S, Outcome.FAILED, "not co-located: p-1 bound outside a (a: 2, b: 1)"),
        (obs("a", "a", expected=3), 1 * S, Outcome.PENDING, "2 of 3 pod(s) exist"),
        (obs("a", "a", expected=3), 40 * S, Outcome.FAILED, "only 2 of 3 pod(s) exist after 30s"),
        (obs(the_pods=(*pods("a", "a"), PodObservation("old", "b", "Running", terminating=True))),
         1 * S, Outcome.VERIFIED, "all 2 pod(s) bound in a"),
    ],
)  # fmt: skip
def test_placement(observation: Observation, elapsed: timedelta, outcome: Outcome, reason: str) -> None:
    got = judge_placement(observation, POLICY, elapsed=elapsed)
    assert got.outcome is outcome, got
    assert got.reason.startswith(reason), got


HEALTHY: dict[str, Any] = {"verdict": Verdict.HEALTHY}


@pytest.mark.parametrize(
    ("observation", "elapsed", "outcome", "reason"),
    [
        (obs("a", "a", **HEALTHY), 1 * S, Outcome.VERIFIED, "no metrics configured"),
        (obs("a", "a", unmeasured="GPU utilization not measured for a generic group", **HEALTHY),
         1 * S, Outcome.VERIFIED, "every required flow allowed; GPU utilization not measured for a generic group"),
        (obs("a", "a"), 1 * S, Outcome.PENDING, "waiting for the re-diagnosis"),
        (obs("a", "a"), 60 * S, Outcome.FAILED, "could not be re-diagnosed within 60s"),
        (obs("a", "a", verdict=Verdict.POLICY_BLOCKED, denied_flows=2), 10 * S, Outcome.PENDING,
         "re-diagnosis says policy_blocked"),
        (obs("a", "a", verdict=Verdict.POLICY_BLOCKED, denied_flows=2), 61 * S, Outcome.FAILED,
         "flows still denied after 60s: re-diagnosis says policy_blocked (2 denied flow(s))"),
        (obs("a", "b", **HEALTHY), 1 * S, Outcome.FAILED, "not co-located"),
        (obs("a", None, **HEALTHY), 10 * S, Outcome.PENDING, "1 pod(s) not bound yet"),
        (obs("a", None, **HEALTHY), 61 * S, Outcome.FAILED, "pod p-1 unschedulable after 30s"),
        # utilization, no pre-split baseline: 0.8 x 100
        (obs("a", "a", metrics=True, utilization_before=40.0, utilization_after=85.0, **HEALTHY),
         5 * S, Outcome.VERIFIED, "GPU utilization 85.0% >= 80.0%"),
        (obs("a", "a", metrics=True, utilization_before=40.0, utilization_after=50.0, **HEALTHY),
         5 * S, Outcome.PENDING, "GPU utilization 50.0% below 80.0% so far"),
        (obs("a", "a", metrics=True, utilization_before=40.0, utilization_after=50.0, **HEALTHY),
         60 * S, Outcome.FAILED, "GPU utilization 50.0% did not recover to 80.0% within 60s"),
        # a pre-split baseline of 70: 0.8 x 70 = 56
        (obs("a", "a", metrics=True, utilization_before=30.0, utilization_baseline=70.0,
             utilization_after=60.0, **HEALTHY), 5 * S, Outcome.VERIFIED, "60.0% >= 56.0%"),
        (obs("a", "a", metrics=True, **HEALTHY), 5 * S, Outcome.PENDING, "waiting for utilization samples"),
        (obs("a", "a", metrics=True, **HEALTHY), 60 * S, Outcome.VERIFIED, "no utilization samples within 60s"),
        # the whole gang must run: a pod that crash-loops, or fewer pods than the gang, is not done
        (obs(the_pods=(*pods("a"), PodObservation("w", "a", "Running", waiting="CrashLoopBackOff")),
             expected=2, **HEALTHY), 10 * S, Outcome.PENDING, "waiting for the gang: 1 of 2 pod(s) running: w (CrashLoopBackOff)"),
        (obs(the_pods=(*pods("a"), PodObservation("w", "a", "Running", waiting="CrashLoopBackOff")),
             expected=2, **HEALTHY), 60 * S, Outcome.FAILED,
         "the gang is not running after 60s: 1 of 2 pod(s) running: w (CrashLoopBackOff)"),
        (obs(the_pods=(*pods("a", "a"), PodObservation("gone", "a", "Failed")), expected=3, **HEALTHY),
         10 * S, Outcome.PENDING, "2 of 3 pod(s) exist"),
    ],
)  # fmt: skip
def test_verification(observation: Observation, elapsed: timedelta, outcome: Outcome, reason: str) -> None:
    got = judge(observation, POLICY, elapsed=elapsed)
    assert got.outcome is outcome, got
    assert reason in got.reason, got
    assert got.done is (outcome is not Outcome.PENDING)


@pytest.mark.parametrize(
    ("before", "baseline", "threshold"),
    [(None, None, 80.0), (40.0, None, 80.0), (40.0, 90.0, 72.0), (40.0, 30.0, 80.0), (None, 50.0, 40.0)],
)
def test_threshold_uses_a_baseline_only_when_it_is_above_the_figure_before(
    before: float | None, baseline: float | None, threshold: float
) -> None:
    o = obs("a", utilization_before=before, utilization_baseline=baseline)
    assert recovery_threshold(o, POLICY) == pytest.approx(threshold)


@pytest.mark.parametrize(
    ("pod", "running"),
    [(PodObservation("p", "a", "Running"), True),
     (PodObservation("p", "a", "Running", waiting="CrashLoopBackOff"), False),
     (PodObservation("p", "a", "Running", terminating=True), False),
     (PodObservation("p", "a", "Pending"), False),
     (PodObservation("p", "a", "Succeeded"), False)],
)  # fmt: skip
def test_a_pod_runs_only_with_every_container_running(pod: PodObservation, running: bool) -> None:
    assert pod.running is running
