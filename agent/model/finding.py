"""A finding: the diagnosis of one job (verdict, zones, denied flows, remediation, impact).

Built by `agent.diagnosis.diagnose`; rendered by the `diagnose` command (JSON, table) and later by
chatops and the store. `to_dict` gives the JSON shape of `zonemedic diagnose --output json`.
Plain data only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.model.job import JobRef
from agent.model.kueue import KueueAdvice
from agent.model.network import Caveat, DenyReason, Hop, PortRange
from agent.model.policy_offer import PolicyOffer
from agent.model.verdict import Verdict

SPLIT_VERDICTS = frozenset({Verdict.ZONE_SPLIT_DEGRADED, Verdict.ZONE_SPLIT_BLOCKED})
# verdicts whose fix is a restart of the job's templates in one zone (co-location, or relabelling
# the zone-mirroring label to the zone the pods are in)
REMEDIABLE_VERDICTS = SPLIT_VERDICTS | {Verdict.ZONE_LABEL_MISMATCH}


@dataclass(frozen=True, slots=True)
class DeniedFlow:
    """One denied pod-to-pod connection: which hop dropped it, why, and the policies responsible."""

    from_pod: str
    to_pod: str
    ports: PortRange
    hop: Hop
    reason: DenyReason
    policies: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "from_pod": self.from_pod,
            "to_pod": self.to_pod,
            "port": self.ports.first if self.ports.first == self.ports.last else str(self.ports),
            "protocol": str(self.ports.protocol),
            "hop": str(self.hop),
            "reason": str(self.reason),
            "policies": list(self.policies),
        }


@dataclass(frozen=True, slots=True)
class Impact:
    """Damage estimate of a split job (see `agent.diagnosis.impact` for the formulas).

    `reference_zone` is the target zone, or (no target) the zone holding most of the job's GPUs.
    Cost figures are None until a bytes-per-step figure is known (config or, later, metrics).
    """

    gpus_total: int
    gpus_outside_target: int
    gpu_share_outside_target: float
    pods_outside_target: int
    cross_zone_bytes_per_step: int | None = None
    cross_zone_cost_per_step_usd: float | None = None
    reference_zone: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "gpus_total": self.gpus_total,
            "gpus_outside_target": self.gpus_outside_target,
            "gpu_share_outside_target": round(self.gpu_share_outside_target, 4),
            "pods_outside_target": self.pods_outside_target,
            "reference_zone": self.reference_zone,
        }
        if self.cross_zone_bytes_per_step is not None:
            out["cross_zone_bytes_per_step"] = self.cross_zone_bytes_per_step
        if self.cross_zone_cost_per_step_usd is not None:
            out["cross_zone_cost_per_step_usd"] = self.cross_zone_cost_per_step_usd
        return out


@dataclass(frozen=True, slots=True)
class Coordinator:
    pod: str
    zone: str | None


@dataclass(frozen=True, slots=True)
class MislabelledPod:
    """A pod whose zone-mirroring label names another zone than its node's."""

    pod: str
    label: str
    value: str
    node_zone: str

    def to_dict(self) -> dict[str, str]:
        return {"pod": self.pod, "label": self.label, "value": self.value,
                "node_zone": self.node_zone}  # fmt: skip


@dataclass(frozen=True, slots=True)
class UncertainPolicy:
    """A policy that could not be read and may select the job's pods: the answer may be wrong."""

    policy: str
    field: str
    problem: str

    def to_dict(self) -> dict[str, str]:
        return {"policy": self.policy, "field": self.field, "problem": self.problem}


@dataclass(frozen=True, slots=True)
class IdentityNote:
    """How the dataplane's identities see the job's pods: which dataplane (and why), the label
    filter, and the job's pod label keys left out of identities, each with the pattern that
    leaves it out."""

    dataplane: str
    reason: str
    filter: str
    excluded: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataplane": self.dataplane,
            "reason": self.reason,
            "filter": self.filter,
            "excluded": [{"label": k, "why": why} for k, why in self.excluded],
        }


@dataclass(frozen=True, slots=True)
class Finding:
    """The diagnosis of one job.

    `denied_flows` lists at most `DENIED_FLOWS_CAP` pod pairs (see `agent.diagnosis.diagnose`);
    `denied_flows_total` counts them all. `gpus` holds the job's GPU requests per zone (split
    findings; for remediation planning, not part of the JSON output). `mislabelled`: pods whose
    zone-mirroring label lies; `uncertain`: unreadable policies that may select the job's pods;
    `caveats`: features not modelled exactly that rules deciding its flows use; `identity`: what
    the dataplane's identities leave out of the job's pod labels. `awaiting_labels`: the bound
    pods whose zone-mirroring labels are still to come (the verdict may change once they are
    written: not acted on until then); `awaits_room`: a split (or a mislabelled job) some zone
    would fix, none of which has room for the job now. Neither is part of the JSON output.
    `kueue`: for a split job Kueue manages, why Kueue let it split and the configuration to add.
    `no_room`: a split some zone's policies would fix, none of which has room for the whole job.
    `policy_fix`: when co-location is refused (the policies block the job in every zone, or no
    zone has room for it), the policy-side fix offered instead (`agent.diagnosis.policy_fix`).
    """

    job: JobRef
    verdict: Verdict
    zones: Mapping[str, int]
    coordinator: Coordinator | None
    denied_flows: tuple[DeniedFlow, ...] = ()
    denied_flows_total: int = 0
    remediable: bool = False
    target_zone: str | None = None
    reasons: tuple[str, ...] = ()
    impact: Impact | None = None
    gpus: Mapping[str, int] = field(default_factory=dict)
    mislabelled: tuple[MislabelledPod, ...] = ()
    uncertain: tuple[UncertainPolicy, ...] = ()
    caveats: tuple[Caveat, ...] = ()
    identity: IdentityNote | None = None
    awaiting_labels: tuple[str, ...] = ()
    awaits_room: bool = False
    kueue: KueueAdvice | None = None
    no_room: bool = False
    policy_fix: PolicyOffer | None = None

    @property
    def colocation_refused(self) -> bool:
        """Some required flow is denied and moving the job cannot help: the policies block it in
        every zone (or it is in one zone already), or no zone that would fix it has room."""
        if not self.denied_flows_total:
            return False
        if self.verdict is Verdict.POLICY_BLOCKED:
            return True
        return self.verdict is Verdict.ZONE_SPLIT_BLOCKED and self.no_room and not self.remediable

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": {
                "kind": str(self.job.kind),
                "namespace": self.job.namespace,
                "name": self.job.name,
            },
            "verdict": str(self.verdict),
            "zones": dict(self.zones),
            "coordinator": (
                {"pod": self.coordinator.pod, "zone": self.coordinator.zone}
                if self.coordinator is not None
                else None
            ),
            "denied_flows": [f.to_dict() for f in self.denied_flows],
            "denied_flows_total": self.denied_flows_total,
            "remediable": self.remediable,
            "target_zone": self.target_zone,
            "reasons": list(self.reasons),
            "impact": self.impact.to_dict() if self.impact is not None else None,
            "mislabelled_pods": [m.to_dict() for m in self.mislabelled],
            "uncertain": [u.to_dict() for u in self.uncertain],
            "caveats": [c.to_dict() for c in self.caveats],
            "identity_labels": self.identity.to_dict() if self.identity is not None else None,
            "kueue": self.kueue.to_dict() if self.kueue is not None else None,
            "policy_fix": self.policy_fix.to_dict() if self.policy_fix is not None else None,
        }
