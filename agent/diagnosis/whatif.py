"""What if: the blast radius of a policy change before it is made.

Called by the `whatif` command with two parsed clusters, the one there is and the one a change
would make (a policy file applied, an object deleted: `agent.commands.whatif` builds both). Every
job is diagnosed in both (`diagnose_cluster`, the diagnosis's own path), and every required flow of
every job (`agent.topology.flows`), pod pair by pod pair, is checked in both by the same evaluator
(`PolicySet.check`). The answer lists each job whose verdict changes and each flow whose verdict
changes (allowed -> denied or back). Flows between pods of no training job are not enumerated.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.diagnosis.diagnose import diagnose_cluster
from agent.model.cluster import ClusterState, Pod
from agent.model.network import Endpoint, FlowVerdict, PortRange
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


def _endpoint(pod: Pod, state: ClusterState) -> Endpoint:
    ns = state.namespaces.get(pod.namespace)
    return Endpoint(pod.namespace, pod.labels, ns.labels if ns is not None else {},
                    pod.service_account, pod.named_ports())  # fmt: skip


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


def _flows(cluster: Cluster, settings: DiagnosisSettings) -> dict[tuple[str, str, str, PortRange], FlowVerdict]:
    out: dict[tuple[str, str, str, PortRange], FlowVerdict] = {}
    state, policies = cluster.state, cluster.policies
    for job in find_jobs(state, settings.groups):
        label = str(job.ref)
        for rule in required_flows(job):
            for src in rule.sources:
                for dst in rule.destinations:
                    if src is dst:
                        continue
                    key = (label, f"{src.namespace}/{src.name}", f"{dst.namespace}/{dst.name}",
                           rule.ports)  # fmt: skip
                    out[key] = policies.check(_endpoint(src, state), _endpoint(dst, state),
                                              rule.ports)  # fmt: skip
    return out


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
    flows_before = _flows(before, settings)
    flows_after = _flows(after, settings)
    flows = tuple(
        FlowChange(key[0], key[1], key[2], key[3], flows_before[key], flows_after[key])
        for key in sorted(flows_before.keys() & flows_after.keys(),
                          key=lambda k: (k[0], k[1], k[2], k[3].first, k[3].last))
        if flows_before[key].allowed != flows_after[key].allowed
    )
    return BlastRadius(jobs, flows, len(verdicts_before.keys() | verdicts_after.keys()),
                       len(flows_before.keys() | flows_after.keys()))  # fmt: skip
