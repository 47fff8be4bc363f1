"""Diagnose every training job of a cluster: verdict, denied flows, remediation and impact.

Verdicts (per job with at least one live pod):
- `pending`: some live pod has no node yet.
- one zone: `healthy` if every required flow is allowed, else `policy_blocked`.
- several zones: `zone_split_degraded` if every flow is allowed; else `zone_split_blocked` if moving
  every pod to some single zone (mirroring labels set to it) allows every flow; else
  `policy_blocked`.
Only `zone_split_*` findings can be remediable (see `agent.diagnosis.placement`).

`denied_flows` lists denied pod pairs, at most `DENIED_FLOWS_CAP` (50) of them in rule order;
`denied_flows_total` counts every denied pod pair, so a 1,000-pod job stays a small finding.
Pods on nodes without a zone label (or unknown nodes) are counted under `unknown` and do not make
a job split.

Scoped diagnosis (`only=JobScope(...)`): the findings of some jobs (named jobs, and every job of
some namespaces), each equal to that job's finding in a whole-cluster diagnosis. The parts a
finding depends on across jobs stay cluster-wide (the zone-mirroring label detection, zones, free
GPUs per zone counting every other job's pods); only the job grouping and the per-job work are
limited to the scope's namespaces and jobs. Those cluster-wide parts may come precomputed
(`facts=ClusterFacts`, kept up to date pod by pod by the agent: `agent.topology.facts`), so a
scoped diagnosis costs the scope, not the cluster; they must then describe the same state.
Called by the `diagnose` command, the agent's sweep (whole cluster) and its event-driven
detection (scoped). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from agent.diagnosis.impact import estimate_impact
from agent.diagnosis.placement import blocking_reasons, choose_target_zone
from agent.diagnosis.reachability import DeniedPairs, Reachability
from agent.model.cluster import ClusterState, Pod
from agent.model.finding import Coordinator, DeniedFlow, Finding
from agent.model.job import Job, JobRef
from agent.model.verdict import Verdict
from agent.policy import PolicySet
from agent.settings import DiagnosisSettings
from agent.topology.capacity import CapacityIndex
from agent.topology.facts import ClusterFacts
from agent.topology.flows import required_flows
from agent.topology.jobs import find_jobs
from agent.topology.zones import AUTO, mirror_label_keys, pod_zone

DENIED_FLOWS_CAP = 50
UNKNOWN_ZONE = "unknown"


@dataclass(frozen=True)
class Diagnosis:
    """The findings of one run plus the zone-mirroring label keys it used."""

    findings: tuple[Finding, ...]
    mirror_keys: tuple[str, ...]


@dataclass(frozen=True)
class JobScope:
    """Which jobs a scoped diagnosis covers: the named jobs, and every job of the namespaces."""

    jobs: frozenset[JobRef] = frozenset()
    namespaces: frozenset[str] = frozenset()

    def covers(self, ref: JobRef) -> bool:
        return ref in self.jobs or ref.namespace in self.namespaces

    def touched_namespaces(self) -> frozenset[str]:
        """Every namespace a covered job can live in (a job's pods share its namespace)."""
        return self.namespaces | {ref.namespace for ref in self.jobs}


def _denied_flows(groups: Sequence[DeniedPairs], cap: int) -> tuple[list[DeniedFlow], int]:
    flows: list[DeniedFlow] = []
    total = 0
    for g in groups:
        total += g.count
        if len(flows) >= cap:
            continue
        v = g.verdict
        assert v.hop is not None and v.reason is not None, "a denied verdict names hop and reason"
        for src in g.sources:
            if len(flows) >= cap:
                break
            for dst in g.destinations:
                if dst is src:
                    continue
                flows.append(DeniedFlow(src.name, dst.name, g.ports, v.hop, v.reason, v.policies))
                if len(flows) >= cap:
                    break
    return flows, total


class _Diagnoser:
    def __init__(
        self,
        state: ClusterState,
        policies: PolicySet,
        *,
        settings: DiagnosisSettings,
        facts: ClusterFacts | None = None,
    ) -> None:
        self.state = state
        self.settings = settings
        if facts is not None and settings.pod_zone_label == AUTO:
            self.mirror_keys = facts.mirror_keys
        else:
            self.mirror_keys = mirror_label_keys(
                settings.pod_zone_label, pods=state.pods if facts is None else (), nodes=state.nodes
            )
        self.reach = Reachability(
            policies,
            state.namespaces,
            label_keys=policies.pod_label_keys(),
            mirror_keys=self.mirror_keys,
        )
        if facts is None:
            self.capacity = CapacityIndex(state.nodes, state.pods)
            self.zones = state.zones()
            self.node_zone: Mapping[str, str | None] = {
                name: node.zone for name, node in state.nodes.items()
            }
        else:
            self.capacity = CapacityIndex(
                state.nodes, (), used=facts.gpu_used, free=facts.zone_free
            )
            self.zones = list(facts.zones)
            self.node_zone = facts.node_zone

    def _zone(self, pod: Pod) -> str | None:
        return pod_zone(pod, self.state.nodes)

    def diagnose(self, job: Job) -> Finding:
        pods_by_zone: dict[str, int] = {}
        gpus_by_zone: dict[str, int] = {}
        pending = False
        node_zone = self.node_zone
        for pod in job.pods:
            if pod.node_name is None:
                pending = True
                continue
            zone = node_zone.get(pod.node_name) or UNKNOWN_ZONE
            pods_by_zone[zone] = pods_by_zone.get(zone, 0) + 1
            gpus_by_zone[zone] = gpus_by_zone.get(zone, 0) + pod.gpu_request
        coord = job.coordinator
        coordinator = Coordinator(coord.name, self._zone(coord)) if coord is not None else None
        zones_map = dict(sorted(pods_by_zone.items()))
        if pending:
            unscheduled = sum(1 for p in job.pods if p.node_name is None)
            return Finding(
                job=job.ref,
                verdict=Verdict.PENDING,
                zones=zones_map,
                coordinator=coordinator,
                reasons=(f"{unscheduled} pod(s) not scheduled yet",),
            )
        rules = required_flows(job)
        pairs = self.reach.prepare(rules)
        denied = self.reach.denied(pairs)
        flows, total = _denied_flows(denied, DENIED_FLOWS_CAP)
        known_zones = [z for z in pods_by_zone if z != UNKNOWN_ZONE]
        reasons: list[str] = []
        if UNKNOWN_ZONE in pods_by_zone:
            reasons.append(f"{pods_by_zone[UNKNOWN_ZONE]} pod(s) on nodes with no zone label")
        # what every verdict below reports; each return adds its verdict, reasons and outcome
        seen = Finding(
            job=job.ref,
            verdict=Verdict.POLICY_BLOCKED,
            zones=zones_map,
            coordinator=coordinator,
            denied_flows=tuple(flows),
            denied_flows_total=total,
        )
        if len(known_zones) <= 1:
            if denied:
                reasons.append("the job is in one zone: the denied flows need a policy change")
            verdict = Verdict.POLICY_BLOCKED if denied else Verdict.HEALTHY
            return replace(seen, verdict=verdict, reasons=tuple(reasons))
        fixing = [z for z in self.zones if not self.reach.denied(pairs, zone=z, first_only=True)]
        if denied and not fixing:
            reasons.append("no single zone makes every required flow allowed: fix the policies")
            return replace(seen, verdict=Verdict.POLICY_BLOCKED, reasons=tuple(reasons))
        verdict = Verdict.ZONE_SPLIT_BLOCKED if denied else Verdict.ZONE_SPLIT_DEGRADED
        need = job.gpu_request
        free = self.capacity.free_gpus(job.pods)
        candidates = [z for z in fixing if free.get(z, 0) >= need]
        if not fixing:
            reasons.append("co-locating in any single zone would deny some required flow")
        elif not candidates:
            room = ", ".join(f"{z}: {free.get(z, 0)}" for z in fixing)
            reasons.append(f"no zone has {need} free GPUs for the job (free: {room})")
        blocking = blocking_reasons(job, protected_namespaces=self.settings.protected_namespaces)
        reasons.extend(blocking)
        best = choose_target_zone(candidates, job_gpus=gpus_by_zone, free_gpus=free)
        target = best if not blocking else None
        if best is not None and blocking:
            reasons.append(f"{best} can hold the whole job: co-locate it there by other means")
        impact = estimate_impact(
            gpus_by_zone=gpus_by_zone,
            pods_by_zone=pods_by_zone,
            target_zone=target,
            bytes_per_step=self.settings.bytes_per_step,
            price_per_gb=self.settings.price_per_gb,
        )
        return replace(
            seen,
            verdict=verdict,
            remediable=target is not None,
            target_zone=target,
            reasons=tuple(reasons),
            impact=impact,
            gpus=dict(sorted(gpus_by_zone.items())),
        )


def diagnose_cluster(
    state: ClusterState,
    policies: PolicySet,
    *,
    settings: DiagnosisSettings,
    only: JobScope | None = None,
    facts: ClusterFacts | None = None,
) -> Diagnosis:
    """One finding per job with live pods (Kubeflow jobs, then configured groups); with `only`,
    just the covered jobs' findings, in the same order as in the whole-cluster result. `facts`:
    the cluster-wide parts, precomputed for this same state."""
    diagnoser = _Diagnoser(state, policies, settings=settings, facts=facts)
    if only is None:
        jobs = find_jobs(state, settings.groups)
    else:
        in_namespaces = find_jobs(
            state,
            settings.groups,
            namespaces=only.touched_namespaces(),
            pods_in=None if facts is None else facts.pods_in,
        )
        jobs = [job for job in in_namespaces if only.covers(job.ref)]
    return Diagnosis(
        findings=tuple(diagnoser.diagnose(job) for job in jobs),
        mirror_keys=diagnoser.mirror_keys,
    )
