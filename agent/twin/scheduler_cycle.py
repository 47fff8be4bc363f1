"""One scheduling cycle: filter every node, score the feasible ones, pick one with a seeded tie-break.

Called by `scheduler.Scheduler` for each pending pod, and by tests on small tables. Returns either
the chosen node or kube-scheduler's FitError message ("0/6 nodes are available: 2 node(s) had
untolerated taint {nvidia.com/gpu: present}, 4 Insufficient nvidia.com/gpu."). Pure apart from the
`random.Random` the caller passes (seeded per scenario, so placements are reproducible). It does not
bind, write events or preempt.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.twin.scheduler_filters import prefilter, run_filters
from agent.twin.scheduler_scores import score_nodes
from agent.twin.scheduler_snapshot import Snapshot, name_of

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Decision:
    node: str | None
    message: str  # FitError text when node is None; "" otherwise
    feasible: int = 0


def fit_error(total: int, reasons_by_node: Mapping[str, list[str]]) -> str:
    """kube-scheduler's FitError.Error(): a histogram of reasons, sorted as strings."""
    histogram: dict[str, int] = {}
    for reasons in reasons_by_node.values():
        for reason in reasons:
            histogram[reason] = histogram.get(reason, 0) + 1
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    if not parts:
        return f"0/{total} nodes are available."
    return f"0/{total} nodes are available: {', '.join(parts)}."


def schedule(pod: Obj, snapshot: Snapshot, rng: random.Random) -> Decision:
    state = prefilter(pod, snapshot)
    feasible: list[Obj] = []
    refused: dict[str, list[str]] = {}
    for node in snapshot.nodes:
        reasons = run_filters(pod, node, state, snapshot)
        if reasons:
            refused[name_of(node)] = reasons
        else:
            feasible.append(node)
    if not feasible:
        return Decision(node=None, message=fit_error(len(snapshot.nodes), refused))
    scores = score_nodes(pod, feasible, state, snapshot)
    best = max(scores)
    top = [name_of(n) for n, s in zip(feasible, scores, strict=True) if abs(s - best) < 1e-9]
    return Decision(node=rng.choice(top), message="", feasible=len(feasible))
