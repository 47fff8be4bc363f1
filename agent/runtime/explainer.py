"""The running agent's explanations: `explain` over the watch cache's parsed mirror, for the HTTP
API (`GET /api/explain`) and the Slack `/zonemedic explain` command.

Called by `agent.runtime.http` (query parameters through `parse_params`) and the chat layer (the
slash command's parsed query). Each answer reads the pipeline's current view (`view`: the cluster
state, the `PolicySet` and the facts the next diagnosis uses, taken under the pipeline's lock), so
an explanation is the same evaluator's answer as the agent's diagnosis at that moment; the zone
label keys are resolved as the diagnosis resolves them. Before the caches are synced it refuses
(`UnavailableError`: 503), since a half-listed cluster would explain wrongly. What it does not do:
read the API server, or change anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agent.errors import ExplainError, UnavailableError
from agent.model.cluster import ClusterState
from agent.policy import PolicySet
from agent.policy.explanation import ExplainQuery, PodIndex, explain, parse_query
from agent.settings import DiagnosisSettings
from agent.topology.facts import ClusterFacts
from agent.topology.zones import AUTO, mirror_label_keys

View = Callable[[], tuple[ClusterState, PolicySet, ClusterFacts]]
PARAMS = ("from", "to", "port", "from_labels", "to_labels", "from_service_account",
          "to_service_account")


def parse_params(params: Mapping[str, str]) -> ExplainQuery:
    """`GET /api/explain` query parameters -> the query; `ExplainError` names a bad one."""
    for key in params:
        if key not in PARAMS:
            raise ExplainError(f"unknown query parameter {key!r} (known: {', '.join(PARAMS)})")
    return parse_query(
        source=params.get("from"), destination=params.get("to"), port=params.get("port"),
        from_labels=params.get("from_labels"), to_labels=params.get("to_labels"),
        from_service_account=params.get("from_service_account"),
        to_service_account=params.get("to_service_account"),
    )  # fmt: skip


class LiveExplainer:
    """Explanations over the agent's view of the cluster."""

    def __init__(
        self, view: View, *, settings: DiagnosisSettings, ready: Callable[[], bool]
    ) -> None:
        self._view = view
        self._settings = settings
        self._ready = ready

    def explain(self, query: ExplainQuery) -> dict[str, Any]:
        """The explanation's JSON form (`Explanation.to_dict`)."""
        if not self._ready():
            raise UnavailableError("caches are not synced yet; retry later")
        state, policies, facts = self._view()
        setting = self._settings.pod_zone_label
        keys = facts.mirror_keys if setting == AUTO else mirror_label_keys(
            setting, pods=(), nodes=state.nodes)
        index = PodIndex(state, pods_in=facts.pods_in)
        return explain(index, policies, query, mirror_keys=keys).to_dict()
