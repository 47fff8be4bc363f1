"""Compiles the twin's stored network policies into the dataplane's `FlowCheck`.

Called by `dataplane.Dataplane` (through `cluster.TwinCluster`) whenever policies or namespaces
change. Until zonemedic's pure policy evaluator (`agent.policy`) is merged into this branch, this
allows every flow; the evaluator is the one place policy semantics live (DESIGN.md section 6), so
the twin must not grow a second one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.twin.dataplane import FlowCheck, allow_all


def compile_policies(
    policies: Sequence[Mapping[str, Any]], namespaces: Mapping[str, Mapping[str, str]]
) -> FlowCheck:
    del policies, namespaces
    return allow_all
