"""What the demo sees of its stage: the conditions the story waits on, read from each part.

Who calls it: `agent.demo.story`, whose steps wait until one of these reads says the agent did the
next thing. It reads where the target's pods are (the twin's store: placed, co-located, pods per
zone), the incident and its record (the agent's store), what reached Slack (the fake Slack: the
finding's post, its edits and its thread), and the target's GPU utilization (the demo's Prometheus,
`utilization_expr`). Each read answers at once, from what is there now.

What it does not do: wait, narrate, click or write anything (the story does the first three; the
agent does everything else).
"""

from __future__ import annotations

import collections
import json
from typing import Any

from agent.demo.stage import Stage, Target
from agent.fakes.slack import FakeSlack
from agent.model.incident import IncidentDetail, IncidentQuery, IncidentSummary
from agent.model.lifecycle import IncidentStatus


def utilization_expr(target: Target) -> str:
    """PromQL: the mean GPU utilization (0-100) of the target's pods (DCGM joined with
    kube-state-metrics' pod labels, so Kubeflow jobs and generic groups alike)."""
    labels = ",".join(f'label_{_sanitize(k)}="{v}"' for k, v in sorted(target.pod_labels.items()))
    pods = f'kube_pod_labels{{namespace="{target.namespace}",{labels}}}'
    return (f'avg(DCGM_FI_DEV_GPU_UTIL{{namespace="{target.namespace}",pod!=""}} '
            f"* on (namespace, pod) group_left max by (namespace, pod) ({pods}))")


def _sanitize(key: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in key)


class Lookout:
    """The reads of one stage, for the story's conditions."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage

    # -- the cluster -----------------------------------------------------------------------------

    def zones(self) -> dict[str, int]:
        """The target's live pods per zone (`(unscheduled)` for a pod not bound yet)."""
        counts: collections.Counter[str] = collections.Counter()
        for pod in self.stage.target_pods():
            node = (pod.get("spec") or {}).get("nodeName")
            zone = self.stage.zone_of_node(str(node)) if node else None
            counts[zone or "(unscheduled)"] += 1
        return dict(counts)

    def pods_settled(self) -> list[dict[str, Any]] | None:
        """The target's live pods once there are some, as many as its gang counts (when its kind
        counts them), and every one is bound to a node."""
        pods = self.stage.target_pods()
        expected = self.stage.expected_pods()
        if expected is not None and len(pods) < expected:
            return None
        if pods and all((p.get("spec") or {}).get("nodeName") for p in pods):
            return pods
        return None

    def colocated(self) -> dict[str, int] | None:
        """The pods per zone once every pod is bound, all in one zone."""
        if self.pods_settled() is None:
            return None
        zones = self.zones()
        return zones if len(zones) == 1 else None

    # -- the incident ----------------------------------------------------------------------------

    def incident(self) -> IncidentSummary | None:
        """The target's newest incident, if the agent recorded one."""
        store, target = self.stage.store, self.stage.target
        assert store is not None
        found = store.list_incidents(IncidentQuery(namespace=target.namespace, name=target.name,
                                                   limit=5)).incidents
        return found[0] if found else None

    def detail(self, incident_id: int) -> IncidentDetail:
        assert self.stage.store is not None
        return self.stage.store.get_incident(incident_id)

    def status_in(self, incident_id: int, statuses: set[IncidentStatus] | frozenset[IncidentStatus]
                  ) -> IncidentSummary | None:
        """The incident, once its status is one of `statuses`."""
        summary = self.detail(incident_id).incident
        return summary if summary.status in statuses else None

    # -- Slack -----------------------------------------------------------------------------------

    @property
    def slack(self) -> FakeSlack:
        return self.stage.slack

    def thread_says(self, words: str) -> bool:
        """A reply in a thread holds `words`."""
        return any(m.thread_ts is not None and words in m.text for m in self.slack.messages())

    def utilization_shown(self) -> bool:
        """The finding's message shows the job's utilization (the agent's evidence arrived)."""
        posts = [m for m in self.slack.messages() if m.thread_ts is None]
        return bool(posts) and "GPU utilization:" in json.dumps(posts[0].blocks)

    def message_is(self, status: str) -> bool:
        """The finding's message was edited to say the incident is `status` (its fallback text
        carries the status in brackets)."""
        posts = [m for m in self.slack.messages() if m.thread_ts is None]
        return bool(posts) and f"[{status}]" in posts[0].text

    # -- Prometheus ------------------------------------------------------------------------------

    def utilization_now(self) -> float | None:
        """The target's mean GPU utilization now (None: no Prometheus, or no sample yet)."""
        prometheus = self.stage.prometheus
        if prometheus is None:
            return None
        result = prometheus.query(utilization_expr(self.stage.target))
        return float(result[0]["value"][1]) if result else None

    def utilization_samples(self, *, start: float, end: float) -> list[tuple[float, float]]:
        """Every (time, percent) sample of the target's utilization between `start` and `end`
        (none without Prometheus)."""
        prometheus = self.stage.prometheus
        if prometheus is None:
            return []
        result = prometheus.query_range(utilization_expr(self.stage.target),
                                        start=start, end=end, step=1.0)
        return [(float(t), float(v)) for series in result for t, v in series["values"]]
