"""What if: the blast radius of a policy change before it is made.

Called by the `whatif` command with two parsed clusters, the one there is and the one a change
would make (a policy file applied, an object deleted, a job moved to a zone: `moved`;
`agent.commands.whatif` builds both). Every
job is diagnosed in both (`diagnose_cluster`, the diagnosis's own path), and every required flow of
every job (`agent.topology.flows`) is checked in both by the same evaluator through the diagnosis's
own grouping (`agent.diagnosis.reachability`: pods no policy can tell apart share one check), and
listed pod pair by pod pair where the verdict changes. Pods the change deletes are left out. The answer lists each job whose verdict changes and each flow whose verdict
changes (allowed -> denied or back). Flows between pods of no training job are not enumerated.
Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.diagnosis.diagnose import diagnose_cluster
from agent.diagnosis.reachability import Reachability
from agent.errors import WhatIfError
from agent.model.cluster import ClusterState, Pod
from agent.model.job import Job
from agent.model.network import FlowVerdict, PortRange
from agent.policy import PolicySet
from agent.settings import DiagnosisSettings
from agent.topology.facts import ClusterFacts, FactsIndex
from agent.topology.flows import required_flows


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


class _Classes:
    """Each pod's (class before, class after), found once; None for a pod the change deletes.
    The class after is that of the pod of the same namespace and name after the change (a moved
    job's pods carry new labels)."""

    def __init__(self, before: Reachability, after: Reachability,
                 present: dict[tuple[str, str], Pod]) -> None:
        self._before, self._after, self._present = before, after, present
        self._known: dict[int, tuple[int, int] | None] = {}

    def groups(self, pods: tuple[Pod, ...]) -> dict[tuple[int, int], list[Pod]]:
        """The pods still there after the change, by (class before, class after)."""
        out: dict[tuple[int, int], list[Pod]] = {}
        known = self._known
        for pod in pods:
            if id(pod) in known:
                key = known[id(pod)]
            else:
                now = self._present.get((pod.namespace, pod.name))
                key = known[id(pod)] = (
                    None if now is None
                    else (self._before.class_of(pod), self._after.class_of(now))
                )
            if key is not None:
                group = out.get(key)
                if group is None:
                    out[key] = [pod]
                else:
                    group.append(pod)
        return out


def _flow_changes(
    before: Cluster, after: Cluster, jobs: Iterable[Job]
) -> tuple[list[FlowChange], int]:
    """The required flows (pod pairs) whose verdict changes, and how many pod pairs were checked.
    Pods the policies cannot tell apart, before and after alike, are checked once per class pair
    (`Reachability`, the diagnosis's own grouping); only pairs whose verdict changes are listed."""
    reach_before = Reachability(before.policies, before.state.namespaces,
                                label_keys=before.policies.pod_label_keys())  # fmt: skip
    reach_after = Reachability(after.policies, after.state.namespaces,
                               label_keys=after.policies.pod_label_keys())  # fmt: skip
    classes = _Classes(reach_before, reach_after,
                       {(p.namespace, p.name): p for p in after.state.pods})
    changes: list[FlowChange] = []
    checked = 0
    for job in jobs:
        label = str(job.ref)
        for rule in required_flows(job):
            sources = classes.groups(rule.sources)
            destinations = classes.groups(rule.destinations)
            for src_key, src_pods in sources.items():
                for dst_key, dst_pods in destinations.items():
                    # a pod is never its own peer: only a group pair of one key can share pods
                    shared = (len({id(p) for p in src_pods} & {id(p) for p in dst_pods})
                              if src_key == dst_key else 0)  # fmt: skip
                    checked += len(src_pods) * len(dst_pods) - shared
                    old = reach_before.verdict(src_key[0], dst_key[0], rule.ports)
                    new = reach_after.verdict(src_key[1], dst_key[1], rule.ports)
                    if old.allowed == new.allowed:
                        continue
                    changes.extend(
                        FlowChange(label, f"{s.namespace}/{s.name}", f"{d.namespace}/{d.name}",
                                   rule.ports, old, new)
                        for s in src_pods for d in dst_pods if s is not d
                    )  # fmt: skip
    changes.sort(key=lambda c: (c.job, c.source, c.destination, c.ports.first, c.ports.last))
    return changes, checked


def _facts(state: ClusterState) -> ClusterFacts:
    """The cluster-wide parts of a diagnosis of `state` (zone-mirroring keys, capacity, pods
    by namespace), computed once for the diagnoses of the same state."""
    index = FactsIndex(state.nodes)
    index.add_many({(p.namespace, p.name): p for p in state.pods})
    return index.facts()


def blast_radius(before: Cluster, after: Cluster, *, settings: DiagnosisSettings) -> BlastRadius:
    """What changes between `before` and `after` (see the module docstring)."""
    facts = _facts(before.state)
    diagnosed = diagnose_cluster(before.state, before.policies, settings=settings, facts=facts)
    verdicts_before = {str(f.job): f.verdict.value for f in diagnosed.findings}
    if after.state is before.state:  # a policy change only: the same jobs, the same facts
        again = diagnose_cluster(after.state, after.policies, settings=settings, facts=facts,
                                 jobs_found=tuple(diagnosed.jobs.values()))  # fmt: skip
    else:
        again = diagnose_cluster(after.state, after.policies, settings=settings,
                                 facts=_facts(after.state))  # fmt: skip
    verdicts_after = {str(f.job): f.verdict.value for f in again.findings}
    jobs = tuple(
        JobChange(job, verdicts_before.get(job), verdicts_after.get(job))
        for job in sorted(verdicts_before.keys() | verdicts_after.keys())
        if verdicts_before.get(job) != verdicts_after.get(job)
    )
    flows, checked = _flow_changes(before, after, diagnosed.jobs.values())
    return BlastRadius(jobs, tuple(flows), len(verdicts_before.keys() | verdicts_after.keys()),
                       checked)


def moved(
    state: ClusterState, job: Job, *, zone: str, mirror_keys: Sequence[str]
) -> ClusterState:
    """The cluster with `job` co-located in `zone` as the planner's fix leaves it for the
    policies and the placement: every zone-mirroring label key set to `zone` on each of its pods
    (the planner's patch relabels the templates the same way) and each pod bound to a node of
    `zone` (GPU pods to a node with GPUs when there is one). `WhatIfError` when no node is in
    `zone`. The planner's other patches (tolerations, affinity) decide where the scheduler puts
    the pods, which this stands in for; they change no verdict here."""
    nodes = sorted((n for n in state.nodes.values() if n.zone == zone), key=lambda n: n.name)
    if not nodes:
        zones = ", ".join(sorted({z for n in state.nodes.values() if (z := n.zone)})) or "none"
        raise WhatIfError(f"--zone: no node in zone {zone!r} (zones: {zones})")
    gpu_nodes = [n for n in nodes if n.gpu_allocatable > 0] or nodes
    members = {(p.namespace, p.name) for p in job.pods}
    pods = []
    for pod in state.pods:
        if (pod.namespace, pod.name) not in members:
            pods.append(pod)
            continue
        labels = {**pod.labels, **{k: zone for k in mirror_keys}}
        node = (gpu_nodes if pod.gpu_request else nodes)[0]
        pods.append(dataclasses.replace(pod, labels=labels, node_name=node.name))
    return dataclasses.replace(state, pods=tuple(pods))


def find_job(jobs: Iterable[Job], target: str) -> Job:
    """The job named `NS/NAME` (or `Kind/NS/NAME`); `WhatIfError` when none or several are."""
    parts = target.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise WhatIfError(f"--move: expected NAMESPACE/NAME (or KIND/NAMESPACE/NAME), got {target!r}")
    found = [j for j in jobs
             if (j.ref.namespace, j.ref.name) == tuple(parts[-2:])
             and (len(parts) == 2 or j.ref.kind.value == parts[0])]  # fmt: skip
    if not found:
        raise WhatIfError(f"--move: no training job {target} with live pods")
    if len(found) > 1:
        kinds = ", ".join(str(j.ref) for j in found)
        raise WhatIfError(f"--move: {target} names several jobs ({kinds}): give KIND/NS/NAME")
    return found[0]
