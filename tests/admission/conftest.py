"""Fixtures of the admission tests: a cluster of three zones as the watch cache's parsed view.

The cluster: zones a, b and c, one 8-GPU node each (tainted `nvidia.com/gpu`), c's node holding
no GPU; namespace `ml`; a CiliumNetworkPolicy that denies ingress to pods labelled `zone: b` (so
a job whose template says `zone: b` is allowed only once relabelled, and zone b never is). The
zone-mirroring label is `zone` (`diagnosis.pod_zone_label`). `view_of(items)` parses extra
objects (bound pods, more policies) the way the cache's mirror does (`parse_objects`, then the
facts).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from agent.admission.decision import View
from agent.settings import DiagnosisSettings, GroupSpec
from agent.snapshot.collection import parse_objects
from agent.topology.facts import cluster_facts
from tests.support import objects as o

GROUP = GroupSpec(name="lab", selector={"app": "lab"}, coordinator={"role": "coordinator"},
                  workers={"role": "worker"}, ports=[29500])  # fmt: skip
SETTINGS = DiagnosisSettings(pod_zone_label="zone", groups=[GROUP])
DENY_B = o.cnp("deny-zone-b", {"endpointSelector": {"matchLabels": {"zone": "b"}},
                               "ingressDeny": [{"fromEndpoints": [{}]}]})  # fmt: skip


def base_items() -> list[dict[str, Any]]:
    return [o.node("a1", "a", gpus=8), o.node("b1", "b", gpus=8), o.node("c1", "c", gpus=0),
            o.namespace("ml"), o.namespace("kube-system"), DENY_B]  # fmt: skip


def make_view(items: Sequence[dict[str, Any]], settings: DiagnosisSettings = SETTINGS) -> View:
    snapshot = parse_objects(list(items), source="test")
    facts = cluster_facts(snapshot.state.nodes, snapshot.state.pods)
    return View(snapshot.state, snapshot.policy_set(settings), facts)


@pytest.fixture
def view_of() -> Callable[..., View]:
    return lambda *extra: make_view([*base_items(), *extra])
