"""What if: the blast radius of a policy change before it is made.

Called by the `whatif` command with two parsed clusters, the one there is and the one a change
would make (a policy file applied, an object deleted: `agent.commands.whatif` builds both). Every
job is diagnosed in both (`diagnose_cluster`, the diagnosis's own path), and every required flow of
every job (`agent.topology.flows`) is checked in both by the same evaluator through the diagnosis's
own grouping (`agent.diagnosis.reachability`: pods no policy can tell apart share one check), and
listed pod pair by pod pair where the verdict changes. Pods the change deletes are left out. The answer lists each job whose verdict changes and each flow whose verdict
changes (allowed -> denied or back). Flows between pods of no training job are not enumerated.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.diagnosis.diagnose import diagnose_cluster
from agent.diagnosis.reachability import Reachability
from agent.model.cluster import ClusterState, Pod
from agent.model.network import FlowVerdict, PortRange
from agent.policy import PolicySet
from agent.settings import DiagnosisSettings
from agent.topology.flows import required_flows
from agent.topology.jobs import find_jobs


@dataclass(frozen=True, slots=True)
class Cluster:
    """One side of the comparison: a cluster state and its policies."""

    state: ClusterState
    policies: PolicySet


@dataclass(frozen=True, slots=True)
class JobChange:
    job: str
    before: str | None  # None: the job is not there before (or after)
    after: str | None


@dataclass(frozen=True, slots=True)
class FlowChange:
    job: str
    source: str
    destination: str
    ports: PortRange
    before: FlowVerdict
    after: FlowVerdict


def _verdict_dict(verdict: FlowVerdict) -> dict[str, Any]:
    if verdict.allowed:
        return {"allowed": True}
    return {"allowed": False, "hop": verdict.hop.value if verdict.hop else None,
            "reason": verdict.reason.value if verdict.reason else None,
            "policies": list(verdict.policies)}  # fmt: skip


@dataclass(frozen=True, slots=True)
class BlastRadius:
    jobs: tuple[JobChange, ...]
    flows: tuple[FlowChange, ...]
    jobs_checked: int
    flows_checked: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "jobs_checked": self.jobs_checked,
            "flows_checked": self.flows_checked,
            "jobs": [{"job": c.job, "before": c.before, "after": c.after} for c in self.jobs],
            "flows": [
                {"job": c.job, "from": c.source, "to": c.destination,
                 "port": f"{c.ports}/{c.ports.protocol.value}",
                 "before": _verdict_dict(c.before), "after": _verdict_dict(c.after)}
                for c in self.flows
            ],
        }

    def render(self) -> str:
        """For people: one line per changed job and flow, or that nothing changes."""
        lines = [f"what if: {self.jobs_checked} job(s), {self.flows_checked} pod-pair flow(s) "
                 f"checked; {len(self.jobs)} job verdict(s) and {len(self.flows)} flow(s) change"]
        for job in self.jobs:
            lines.append(f"  job {job.job}: {job.before or '(absent)'} -> {job.after or '(absent)'}")
        for flow in self.flows:
            word = ("allowed -> denied" if flow.before.allowed else "denied -> allowed")
            why = flow.after if not flow.after.allowed else flow.before
            policies = ", ".join(why.policies)
            lines.append(f"  flow {flow.source} -> {flow.destination} port {flow.ports}/"
                         f"{flow.ports.protocol.value} ({flow.job}): {word}"
                         + (f" ({why.hop.value if why.hop else ''} {policies})" if policies else ""))
        return "\n".join(lines) + "\n"


def _groups(pods: tuple[Pod, ...], before: Reachability, after: Reachability,
            present: set[tuple[str, str]]) -> dict[tuple[int, int], list[Pod]]:
    """The pods still there after the change, by (class before, class after)."""
    out: dict[tuple[int, int], list[Pod]] = {}
    for pod in pods:
        if (pod.namespace, pod.name) in present:
            out.setdefault((before.class_of(pod), after.class_of(pod)), []).append(pod)
    return out


def _flow_changes(
    before: Cluster, after: Cluster, *, settings: DiagnosisSettings
) -> tuple[list[FlowChange], int]:
    """The required flows (pod pairs) whose verdict changes, and how many pod pairs were checked.
    Pods the policies cannot tell apart, before and after alike, are checked once per class pair
    (`Reachability`, the diagnosis's own grouping); only pairs whose verdict changes are listed."""
    reach_before = Reachability(before.policies, before.state.namespaces,
                                label_keys=before.policies.pod_label_keys())  # fmt: skip
    reach_after = Reachability(after.policies, after.state.namespaces,
                               label_keys=after.policies.pod_label_keys())  # fmt: skip
    present = {(p.namespace, p.name) for p in after.state.pods}
    changes: list[FlowChange] = []
    checked = 0
    for job in find_jobs(before.state, settings.groups):
        label = str(job.ref)
        for rule in required_flows(job):
            sources = _groups(rule.sources, reach_before, reach_after, present)
            destinations = _groups(rule.destinations, reach_before, reach_after, present)
            for (sb, sa), src_pods in sources.items():
                for (db, da), dst_pods in destinations.items():
                    pairs = [(s, d) for s in src_pods for d in dst_pods if s is not d]
                    checked += len(pairs)
                    old = reach_before.verdict(sb, db, rule.ports)
                    new = reach_after.verdict(sa, da, rule.ports)
                    if old.allowed == new.allowed:
                        continue
                    changes.extend(
                        FlowChange(label, f"{s.namespace}/{s.name}", f"{d.namespace}/{d.name}",
                                   rule.ports, old, new)
                        for s, d in pairs
                    )  # fmt: skip
    changes.sort(key=lambda c: (c.job, c.source, c.destination, c.ports.first, c.ports.last))
    return changes, checked


def blast_radius(before: Cluster, after: Cluster, *, settings: DiagnosisSettings) -> BlastRadius:
    """What changes between `before` and `after` (see the module docstring)."""
    verdicts_before = {str(f.job): f.verdict.value
                       for f in diagnose_cluster(before.state, before.policies,
                                                 settings=settings).findings}  # fmt: skip
    verdicts_after = {str(f.job): f.verdict.value
                      for f in diagnose_cluster(after.state, after.policies,
                                                settings=settings).findings}  # fmt: skip
    jobs = tuple(
        JobChange(job, verdicts_before.get(job), verdicts_after.get(job))
        for job in sorted(verdicts_before.keys() | verdicts_after.keys())
        if verdicts_before.get(job) != verdicts_after.get(job)
    )
    flows, checked = _flow_changes(before, after, settings=settings)
    return BlastRadius(jobs, tuple(flows), len(verdicts_before.keys() | verdicts_after.keys()),
                       checked)
