"""Diagnose every training job of a cluster: verdict, denied flows, remediation and impact.

Verdicts (per job with at least one live pod):
- `pending`: some live pod has no node yet.
- one zone: `healthy` if every required flow is allowed; else `zone_label_mismatch` if some pod's
  zone-mirroring label names another zone than its node's (the label lies: relabelling comes
  before any policy change; remediable when relabelling every such label to the job's zone allows
  every flow and the zone has room); else `policy_blocked`. A lying label on a healthy job is a
  note.
- several zones: `zone_split_degraded` if every flow is allowed; else `zone_split_blocked` if moving
  every pod to some single zone (mirroring labels set to it) allows every flow; else
  `policy_blocked`.
Only `zone_split_*` and `zone_label_mismatch` findings can be remediable (see
`agent.diagnosis.placement`).

A finding also names the bound pods whose zone-mirroring labels are still to come
(`awaiting_labels`, `agent.topology.zones.awaited_labels`: the verdict may change once they are
written, so the agent does not act on it yet) and whether it waits for room (`awaits_room`: a zone
would fix it, none has room now). Every finding also says how sure it is: the unreadable policies that may select the job's pods
(`uncertain`, and a reason line), the caveats of the rules that decided its flows (features not
modelled exactly) and which of its pods' labels the dataplane's identities leave out, and why
(`identity`; a reason line when a policy selector reads one of them).

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
from dataclasses import dataclass, field, replace

from agent.diagnosis.impact import estimate_impact
from agent.diagnosis.kueue import kueue_advice
from agent.diagnosis.placement import blocking_reasons, choose_target_zone
from agent.diagnosis.reachability import ClassPairs, DeniedPairs, Reachability
from agent.model.cluster import ZONE_LABEL, ClusterState, Pod
from agent.model.finding import (
    Coordinator,
    DeniedFlow,
    Finding,
    IdentityNote,
    MislabelledPod,
    UncertainPolicy,
)
from agent.model.job import Job, JobRef
from agent.model.verdict import Verdict
from agent.policy import PolicySet
from agent.settings import DiagnosisSettings
from agent.topology.capacity import CapacityIndex
from agent.topology.facts import ClusterFacts
from agent.topology.flows import required_flows
from agent.topology.jobs import find_jobs
from agent.topology.zones import AUTO, awaited_labels, mirror_label_keys, pod_zone, zone_keys

DENIED_FLOWS_CAP = 50
UNKNOWN_ZONE = "unknown"


@dataclass(frozen=True)
class Diagnosis:
    """The findings of one run plus the zone-mirroring label keys it used, and the jobs it
    diagnosed (by ref: `job`)."""

    findings: tuple[Finding, ...]
    mirror_keys: tuple[str, ...]
    jobs: Mapping[JobRef, Job] = field(default_factory=dict)

    def job(self, ref: JobRef) -> Job | None:
        """The diagnosed job of that ref (None: it had no live pod, or was not in scope)."""
        return self.jobs.get(ref)


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
        self.policies = policies
        # Under an identity that keeps the node zone label Kubernetes copies onto pods (plain
        # Kubernetes; Cilium before 1.19), a policy may select on it: a moved pod carries the new
        # zone there too (set by the API server at binding, never by a patch).
        moving = self.mirror_keys
        if ZONE_LABEL not in moving and ZONE_LABEL in policies.pod_label_keys():
            moving = (*moving, ZONE_LABEL)
        self.reach = Reachability(
            policies,
            state.namespaces,
            label_keys=policies.pod_label_keys(),
            mirror_keys=moving,
        )
        self._selector_keys = policies.selector_label_keys()
        self._readable_keys = policies.pod_label_keys()
        self._zone_keys_in: dict[str, tuple[str, ...]] = {}
        self._excluded: dict[str, str | None] = {}
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

    def _identity(self, job: Job) -> tuple[IdentityNote, list[str]]:
        """The job's identity note, and reason lines for left-out labels a selector reads."""
        identity = self.policies.identity
        keys: set[str] = set()
        for pod in job.pods:
            keys.update(pod.labels)
        excluded: list[tuple[str, str]] = []
        if identity.filters:
            for key in sorted(keys):
                why = self._excluded.get(key, "")
                if why == "":
                    why = self._excluded[key] = identity.why_excluded(key)
                if why is not None:
                    excluded.append((key, why))
        dataplane = self.policies.dataplane
        note = IdentityNote(
            dataplane=dataplane.kind.value,
            reason=dataplane.reason,
            filter=identity.description,
            excluded=tuple(excluded),
        )
        reasons = [
            f"label {key} is left out of Cilium identities ({why}): policy selectors on it "
            "never match"
            for key, why in excluded
            if key in self._selector_keys
        ]
        return note, reasons

    def _mislabelled(self, job: Job) -> list[MislabelledPod]:
        out: list[MislabelledPod] = []
        node_zone = self.node_zone
        for pod in job.pods:
            zone = node_zone.get(pod.node_name) if pod.node_name is not None else None
            if zone is None:
                continue
            for key in self.mirror_keys:
                value = pod.labels.get(key)
                if value is not None and value != zone:
                    out.append(MislabelledPod(pod.name, key, value, zone))
        return out

    def _zone_keys(self, namespace: str) -> tuple[str, ...]:
        found = self._zone_keys_in.get(namespace)
        if found is None:
            found = self._zone_keys_in[namespace] = zone_keys(
                self.policies.selector_values(namespace), zones=self.zones,
                mirror_keys=self.mirror_keys, readable=self._readable_keys)
        return found

    def diagnose(self, job: Job) -> Finding:
        finding = self._diagnose(job)
        if finding.verdict is Verdict.PENDING:
            return finding
        awaited = awaited_labels(job.pods, keys=self._zone_keys(job.ref.namespace),
                                 node_zone=self.node_zone)
        return replace(finding, awaiting_labels=awaited) if awaited else finding

    def _diagnose(self, job: Job) -> Finding:
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
        uncertain = tuple(
            UncertainPolicy(u.id, u.field, u.problem) for u in self.reach.uncertain(job.pods)
        )
        for u in uncertain:
            where = f" ({u.field}: {u.problem})" if u.field else f" ({u.problem})"
            reasons.append(
                f"uncertain: policy {u.policy} cannot be read{where} and may select this job's "
                "pods; the verdict does not account for it"
            )
        identity, identity_reasons = self._identity(job)
        reasons.extend(identity_reasons)
        mislabelled = self._mislabelled(job)
        for m in mislabelled:
            reasons.append(
                f"pod {m.pod}: zone-mirroring label {m.label}={m.value}, but its node is in "
                f"{m.node_zone}"
            )
        # what every verdict below reports; each return adds its verdict, reasons and outcome
        seen = Finding(
            job=job.ref,
            verdict=Verdict.POLICY_BLOCKED,
            zones=zones_map,
            coordinator=coordinator,
            denied_flows=tuple(flows),
            denied_flows_total=total,
            mislabelled=tuple(mislabelled),
            uncertain=uncertain,
            caveats=self.reach.caveats(pairs),
            identity=identity,
        )
        if len(known_zones) <= 1:
            if denied and mislabelled:
                seen = replace(seen, gpus=dict(sorted(gpus_by_zone.items())))
                return self._mismatch(job, seen, pairs, known_zones, reasons)
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
        best = choose_target_zone(candidates, job_gpus=gpus_by_zone, free_gpus=free)
        kueue = kueue_advice(job.obj, self.state.kueue, zone=best)
        through_kueue = kueue is not None and kueue.agent_fixable
        blocking = blocking_reasons(job, protected_namespaces=self.settings.protected_namespaces,
                                    through_kueue=through_kueue)  # fmt: skip
        awaits_room = bool(fixing) and not candidates and not blocking
        reasons.extend(blocking)
        if kueue is not None:
            blocked = None
            if not fixing:
                blocked = ("no zone where the policies allow every required flow: fix the "
                           "policies before re-placing the job through Kueue")
            elif not candidates:
                blocked = (f"no zone the policies allow ({', '.join(fixing)}) has {need} free "
                           "GPUs for the whole job")
            kueue = replace(kueue, zones=tuple(candidates), blocked=blocked)
            reasons.append(kueue.message)
            if blocked is not None:
                reasons.append(blocked)
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
            awaits_room=awaits_room,
            kueue=kueue,
            no_room=bool(fixing) and not candidates,
        )


    def _mismatch(
        self,
        job: Job,
        seen: Finding,
        pairs: Sequence[ClassPairs],
        zones: Sequence[str],
        reasons: list[str],
    ) -> Finding:
        """A one-zone job whose zone-mirroring labels lie: relabelling is the fix."""
        zone = zones[0] if zones else None
        still = self.reach.denied(pairs, zone=zone) if zone is not None else [None]
        fixed = not still
        reasons.append(
            "the zone-mirroring label must equal the node's zone: relabel the pod template(s)"
            + (f" to {zone}" if zone else "")
        )
        if fixed:
            reasons.append("relabelled, every required flow is allowed: no policy change needed")
        else:
            left = sum(d.count for d in still if d is not None)
            reasons.append(
                f"relabelled, {left} pod pair(s) stay denied: those need a policy change as well"
            )
        reasons.append(
            "if the manifests (a GitOps repository, a re-run of kubectl apply) set this label, "
            "fix it there too, or the next sync puts it back"
        )
        blocking = blocking_reasons(job, protected_namespaces=self.settings.protected_namespaces)
        reasons.extend(blocking)
        need = job.gpu_request
        free = self.capacity.free_gpus(job.pods)
        room = zone is not None and free.get(zone, 0) >= need
        if fixed and zone is not None and not room:
            reasons.append(f"{zone} has {free.get(zone, 0)} free GPUs, the job needs {need}")
        target = zone if fixed and room and not blocking else None
        return replace(
            seen,
            verdict=Verdict.ZONE_LABEL_MISMATCH,
            remediable=target is not None,
            target_zone=target,
            reasons=tuple(reasons),
            awaits_room=fixed and zone is not None and not room and not blocking,
        )


def diagnose_cluster(
    state: ClusterState,
    policies: PolicySet,
    *,
    settings: DiagnosisSettings,
    only: JobScope | None = None,
    facts: ClusterFacts | None = None,
    jobs_found: Sequence[Job] | None = None,
) -> Diagnosis:
    """One finding per job with live pods (Kubeflow jobs, then configured groups); with `only`,
    just the covered jobs' findings, in the same order as in the whole-cluster result. `facts`:
    the cluster-wide parts, precomputed for this same state; `jobs_found` (without `only`): the
    jobs of this same state, found already (a what-if diagnosing one state under two policy
    sets finds them once)."""
    diagnoser = _Diagnoser(state, policies, settings=settings, facts=facts)
    jobs: Sequence[Job]
    if only is None and jobs_found is not None:
        jobs = jobs_found
    elif only is None:
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
        jobs={job.ref: job for job in jobs},
    )
