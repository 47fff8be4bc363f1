"""The connections a job needs, in compact form: every source pod to every destination pod.

Built by `agent.topology.flows`; checked by `agent.diagnosis`. A `FlowRule` stands for the
|sources| x |destinations| pod pairs (a pod never needs a flow to itself), so an all-pairs rule of a
1,000-pod job stays one object instead of a million.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.model.cluster import Pod
from agent.model.network import PortRange


@dataclass(frozen=True, slots=True)
class FlowRule:
    """Every pod in `sources` must reach every other pod in `destinations` on `ports`."""

    sources: tuple[Pod, ...]
    destinations: tuple[Pod, ...]
    ports: PortRange
    purpose: str = ""
