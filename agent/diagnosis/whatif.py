"""What if: the blast radius of a change before it is made.

Called by the `whatif` command with two parsed clusters, the one there is and the one a change
would make (a policy file applied, an object deleted, a job moved to a zone; `agent.commands.whatif`
builds both). Every job is diagnosed in both (`diagnose_cluster`, the diagnosis's own path: job
verdicts, counterfactual co-location included; the jobs of the state after found again only in
the namespaces the change reaches, `agent.topology.jobs.refind_jobs`); for a change of policies alone, only the jobs it
can reach (`reached_jobs`: a pod some changed policy selects, as placed or moved to any zone) are
diagnosed, before and after, for every other keeps its verdict. The flows compared, before and after, by the same
evaluator (`agent.diagnosis.flow_universe`):
- every required flow (`agent.topology.flows`, port ranges included) of every job with a pod the
  change touches, pod pair by pod pair (a job with no touched pod keeps every flow's verdict);
- every flow from or to a touched pod on each port its destination declares, whoever owns the two
  pods (training jobs or not), from and to every pod of the cluster.
A pod is touched when a policy the change adds, removes or rewrites selects it before or after,
when the change relabels, moves or adds it, or (every pod) when it changes the dataplane or a
namespace's labels. Pods the change deletes are left out. Ports no pod declares, outside the
jobs' required ranges, are not compared. The answer lists each job whose verdict changes, each
required flow whose verdict changes, and the declared-port flows that change (counted; the first
`FLOWS_LISTED` listed). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent.diagnosis.diagnose import diagnose_cluster
from agent.diagnosis.flow_universe import (
    Cluster,
    FlowChange,
    TouchedFlows,
    group_pods,
    reached_jobs,
    required_flow_changes,
    touched_flows,
)
from agent.diagnosis.pod_shapes import PodShapes, pod_shapes
from agent.errors import WhatIfError
from agent.model.cluster import ClusterState, Pod
from agent.model.job import Job
from agent.model.network import FlowVerdict
from agent.policy.rule import Policy, UnreadablePolicy
from agent.settings import DiagnosisSettings
from agent.topology.facts import ClusterFacts, FactsIndex
from agent.topology.jobs import changed_namespaces, find_jobs, refind_jobs

__all__ = ["DELETABLE", "POLICY_KINDS", "BlastRadius", "Cluster", "FlowChange", "Held",
           "JobChange", "Remaining", "blast_radius", "delete_objects", "find_job"]

POLICY_KINDS = ("NetworkPolicy", "CiliumNetworkPolicy", "CiliumClusterwideNetworkPolicy")
DELETABLE = (*POLICY_KINDS, "Pod")


@dataclass(frozen=True, slots=True)
class Held:
    """What a long-running caller already holds of the state before the change: its cluster
    facts and the jobs found in it (computed for that same state, as the agent's cache keeps
    them), and optionally its pods by shape over the policies' selector keys. Given, they are not
    computed again."""

    facts: ClusterFacts
    jobs: tuple[Job, ...]
    shapes: PodShapes | None = None  # the state's pods by shape (`agent.diagnosis.pod_shapes`)


@dataclass(frozen=True, slots=True)
class JobChange:
    job: str
    before: str | None  # None: the job is not there before (or after)
    after: str | None


def _verdict_dict(verdict: FlowVerdict) -> dict[str, Any]:
    if verdict.allowed:
        return {"allowed": True}
    return {"allowed": False, "hop": verdict.hop.value if verdict.hop else None,
            "reason": verdict.reason.value if verdict.reason else None,
            "policies": list(verdict.policies)}  # fmt: skip


def _flow_dict(c: FlowChange, *, kind: str) -> dict[str, Any]:
    return {"job": c.job, "flow": kind, "from": c.source, "to": c.destination,
            "port": f"{c.ports}/{c.ports.protocol.value}",
            "before": _verdict_dict(c.before), "after": _verdict_dict(c.after)}  # fmt: skip


NO_TOUCHED = TouchedFlows(0, 0, 0, ())


@dataclass(frozen=True, slots=True)
class BlastRadius:
    """What a change changes: job verdicts, required flows (`flows`, every one listed) and the
    declared-port flows of the pods it touches (`touched`: counted, the first ones listed)."""

    jobs: tuple[JobChange, ...]
    flows: tuple[FlowChange, ...]
    jobs_checked: int
    flows_checked: int
    touched: TouchedFlows = NO_TOUCHED

    def all_flows(self) -> tuple[FlowChange, ...]:
        """Every listed flow change: required flows first, then declared-port ones."""
        return self.flows + self.touched.listed

    def to_dict(self) -> dict[str, Any]:
        t = self.touched
        return {
            "jobs_checked": self.jobs_checked,
            "flows_checked": self.flows_checked,
            "touched_pods": t.touched,
            "declared_port_flows_checked": t.checked,
            "declared_port_flows_changed": t.changed,
            "jobs": [{"job": c.job, "before": c.before, "after": c.after} for c in self.jobs],
            "flows": [_flow_dict(c, kind="required") for c in self.flows]
            + [_flow_dict(c, kind="declared_port") for c in t.listed],
            "flows_listed_complete": len(t.listed) == t.changed,
        }

    def render(self) -> str:
        """For people: one line per changed job and flow, or that nothing changes."""
        t = self.touched
        lines = [f"what if: {self.jobs_checked} job(s), {self.flows_checked} required pod-pair "
                 f"flow(s) checked; {len(self.jobs)} job verdict(s) and {len(self.flows)} "
                 "required flow(s) change",
                 f"  {t.touched} pod(s) touched: {t.checked} declared-port flow(s) to or from "
                 f"them checked, {t.changed} change"
                 + ("" if len(t.listed) == t.changed else f" ({len(t.listed)} listed)")]
        for job in self.jobs:
            lines.append(f"  job {job.job}: {job.before or '(absent)'} -> {job.after or '(absent)'}")
        listed = [(f, f"required by {f.job}") for f in self.flows] + [
            (f, "declared port" + (f" within {f.job}" if f.job else "")) for f in t.listed]
        for flow, what in listed:
            word = ("allowed -> denied" if flow.before.allowed else "denied -> allowed")
            why = flow.after if not flow.after.allowed else flow.before
            policies = ", ".join(why.policies)
            lines.append(f"  flow {flow.source} -> {flow.destination} port {flow.ports}/"
                         f"{flow.ports.protocol.value} ({what}): {word}"
                         + (f" ({why.hop.value if why.hop else ''} {policies})" if policies else ""))
        return "\n".join(lines) + "\n"


def _facts(state: ClusterState, *, shapes: PodShapes | None = None) -> ClusterFacts:
    """The cluster-wide parts of a diagnosis of `state` (zone-mirroring keys, capacity, pods
    by namespace), computed once for the diagnoses of the same state; `shapes`: the state's
    pods by shape, whose pod keys are taken (not built again)."""
    index = FactsIndex(state.nodes)
    if shapes is not None and shapes.pods is state.pods:
        index.add_many(dict(zip(shapes.keys, state.pods, strict=True)))
    else:
        index.add_many({(p.namespace, p.name): p for p in state.pods})
    return index.facts()


def blast_radius(before: Cluster, after: Cluster, *, settings: DiagnosisSettings,
                 held: Held | None = None) -> BlastRadius:  # fmt: skip
    """What changes between `before` and `after` (see the module docstring); `held`: the facts
    and jobs of `before.state`, already known."""
    shapes = None if held is None else held.shapes
    if shapes is None and after.state is before.state:  # found once: the grouping's, the facts'
        shapes = pod_shapes(before.state,
                            before.policies.pod_label_keys() | after.policies.pod_label_keys())
    facts = _facts(before.state, shapes=shapes) if held is None else held.facts
    groups = group_pods(before, after, shapes=shapes)
    if after.state is before.state:  # a policy change only: the same jobs, the same facts
        found = find_jobs(before.state, settings.groups) if held is None else held.jobs
        every = {str(j.ref) for j in found}
        # a job the change cannot reach keeps its verdict: only the reached are diagnosed, twice
        keys = diagnose_cluster(before.state, before.policies, settings=settings, facts=facts,
                                jobs_found=()).mirror_keys  # fmt: skip
        reached = reached_jobs(before, after, groups, found, mirror_keys=keys, zones=facts.zones)
        scope = tuple(found if reached is None else reached)
        diagnosed = diagnose_cluster(before.state, before.policies, settings=settings,
                                     facts=facts, jobs_found=scope)  # fmt: skip
        again = diagnose_cluster(after.state, after.policies, settings=settings, facts=facts,
                                 jobs_found=scope)  # fmt: skip
        jobs_found: Iterable[Job] = found
    else:  # the state changes: its jobs found again only where it changes (`refind_jobs`)
        found = find_jobs(before.state, settings.groups) if held is None else held.jobs
        changed = changed_namespaces(before.state, after.state)
        diagnosed = diagnose_cluster(before.state, before.policies, settings=settings, facts=facts,
                                     jobs_found=found)  # fmt: skip
        again = diagnose_cluster(after.state, after.policies, settings=settings,
                                 facts=_facts(after.state),
                                 jobs_found=refind_jobs(after.state, settings.groups, jobs=found,
                                                        changed=changed))  # fmt: skip
        jobs_found = diagnosed.jobs.values()
        every = {str(f.job) for f in (*diagnosed.findings, *again.findings)}
    verdicts_before = {str(f.job): f.verdict.value for f in diagnosed.findings}
    verdicts_after = {str(f.job): f.verdict.value for f in again.findings}
    jobs = tuple(
        JobChange(job, verdicts_before.get(job), verdicts_after.get(job))
        for job in sorted(verdicts_before.keys() | verdicts_after.keys())
        if verdicts_before.get(job) != verdicts_after.get(job)
    )
    touched = groups.touched()
    # a job's required flows can change only when the change touches one of its pods
    hit = [j for j in jobs_found if any((p.namespace, p.name) in touched for p in j.pods)]
    flows, checked = required_flow_changes(before, after, hit)
    owner = {(p.namespace, p.name): str(j.ref) for j in hit for p in j.pods}
    declared = touched_flows(before, after, groups, owner=owner)
    return BlastRadius(jobs, tuple(flows), len(every), checked, declared)


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


@dataclass(frozen=True, slots=True)
class Remaining:
    """What is left once objects are deleted: the policies (readable or not) and the pods, each
    in its order; `pods` is the very tuple given when no pod goes."""

    policies: tuple[Policy, ...]
    unreadable: tuple[UnreadablePolicy, ...]
    pods: tuple[Pod, ...]


def delete_objects(targets: Iterable[str], *, policies: Iterable[Policy],
                   unreadable: Iterable[UnreadablePolicy], pods: tuple[Pod, ...],
                   flag: str = "delete", where: str = "the cluster") -> Remaining:  # fmt: skip
    """The objects left once each `KIND/NS/NAME` of `targets` is deleted (a policy by its id,
    `CiliumClusterwideNetworkPolicy/NAME` included, or `Pod/NS/NAME`), as `zonemedic whatif
    --delete` and the agent's what-if do. `WhatIfError` (`flag`: the option named, `where`: the
    place searched) for a kind it cannot delete or an object that is not there (deleting one
    object twice included)."""
    kept: dict[str, Policy | UnreadablePolicy] = {p.id: p for p in policies}
    kept.update((u.id, u) for u in unreadable)
    gone: set[tuple[str, str]] = set()
    present: set[tuple[str, str]] | None = None
    for target in targets:
        kind, _, rest = target.partition("/")
        if kind not in DELETABLE:
            raise WhatIfError(f"{flag}: cannot delete a {kind!r} (kinds: {', '.join(DELETABLE)})")
        if kind == "Pod":
            if present is None:
                present = {(p.namespace, p.name) for p in pods}
            namespace, _, name = rest.partition("/")
            if (namespace, name) not in present or (namespace, name) in gone:
                raise WhatIfError(f"{flag}: no {target} in {where}")
            gone.add((namespace, name))
        elif kept.pop(target, None) is None:
            raise WhatIfError(f"{flag}: no {target} in {where}")
    return Remaining(
        tuple(p for p in kept.values() if isinstance(p, Policy)),
        tuple(p for p in kept.values() if isinstance(p, UnreadablePolicy)),
        tuple(p for p in pods if (p.namespace, p.name) not in gone) if gone else pods)
