"""The incident's stored `diagnosis` read back as one typed view: what its readers use of it.

The pipeline builds an `agent.model.document.IncidentDocument` once and the store persists its
`to_dict()` as the incident's `diagnosis` column. The readers of that column read it through
`StoredDiagnosis.from_stored`, never key by key: the Slack message (`agent.chatops.render`,
`agent.chatops.delivery`: zones, denied flows, notes, waste, utilization), `incidents show`
(`agent.commands.incidents`: waste), Kueue's advice and the policy-side fix (the Slack message), the remediation's re-check (`agent.remediation.recheck`: the
zones the incident was about) and the demo (the egress figure's source). Later evidence in the
timeline (an event's `metrics`, `waste`) has the same shapes and is read with the same types.

The view holds exactly those fields. Each key may be absent (or null): an empty document (an
incident recorded without one) reads as an empty view. A key present with another shape than
the one `to_dict()` writes is a `StoredDocumentError` naming the key, so a malformed document
fails where it is read instead of rendering something else. `StoredDiagnosis.of(document)` is the
view of a document not yet stored: `from_stored(document.to_dict())` equals it (the tests check
it). What it does not do: rebuild the whole `IncidentDocument` (the finding's impact, identity
notes and the proposed fix have no reader here; the HTTP API and `--output json` print the stored
JSON as it is), or read the database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from agent.errors import ZonemedicError
from agent.model.document import IncidentDocument, UtilizationEvidence
from agent.model.finding import DeniedFlow
from agent.model.kueue import KueueAdvice
from agent.model.policy_offer import PolicyOffer
from agent.model.verdict import Verdict
from agent.model.waste import Waste


class StoredDocumentError(ZonemedicError):
    """A stored incident document (or a timeline event's evidence) has another shape than the one
    the agent writes; the message names the key and what was found."""


# -- reading one value of the stored JSON ---------------------------------------------------------


def _fail(where: str, expected: str, value: object) -> StoredDocumentError:
    return StoredDocumentError(f"{where}: expected {expected}, got {type(value).__name__}")


def _mapping(value: object, where: str) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _fail(where, "an object", value)
    return value


def _items(value: object, where: str) -> list[tuple[str, Mapping[str, Any]]]:
    """A list of objects, each with where it is (`where[i]`); absent or null: none."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise _fail(where, "a list", value)
    out = []
    for index, item in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(item, Mapping):
            raise _fail(at, "an object", item)
        out.append((at, item))
    return out


def _text(doc: Mapping[str, Any], key: str, where: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str):
        raise _fail(f"{where}.{key}", "a string", value)
    return value


def _optional_text(doc: Mapping[str, Any], key: str, where: str) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise _fail(f"{where}.{key}", "a string or null", value)
    return value


def _number(doc: Mapping[str, Any], key: str, where: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(f"{where}.{key}", "a number or null", value)
    number: float = value
    return number


def _count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, "an integer", value)
    return value


def _texts(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise _fail(where, "a list", value)
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise _fail(f"{where}[{index}]", "a string", item)
    return tuple(value)


# -- the view -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredJob:
    """The job the document is about (`uid`: as the watch cache knew it; an alert has none)."""

    kind: str
    namespace: str
    name: str
    uid: str | None = None


@dataclass(frozen=True)
class StoredCoordinator:
    pod: str
    zone: str | None


@dataclass(frozen=True)
class StoredFlow:
    """One denied flow as stored: `port` is a number, or a range written `first-last`."""

    from_pod: str
    to_pod: str
    port: int | str
    protocol: str
    hop: str
    reason: str
    policies: tuple[str, ...]

    @classmethod
    def of(cls, flow: DeniedFlow) -> StoredFlow:
        ports = flow.ports
        port: int | str = ports.first if ports.first == ports.last else str(ports)
        return cls(flow.from_pod, flow.to_pod, port, str(ports.protocol), str(flow.hop),
                   str(flow.reason), tuple(flow.policies))  # fmt: skip


@dataclass(frozen=True)
class StoredMislabelled:
    pod: str
    label: str
    value: str
    node_zone: str


@dataclass(frozen=True)
class StoredUncertain:
    policy: str
    field: str
    problem: str


@dataclass(frozen=True)
class StoredCaveat:
    policy: str
    feature: str


@dataclass(frozen=True)
class StoredWaste:
    """A split's waste per day as stored (`agent.model.waste.Waste.to_dict`): each figure None
    when unknown, its basis saying why (a basis may be absent in an older document)."""

    gpu_hours_per_day: float | None
    gpu_hours_basis: str | None
    egress_usd_per_day: float | None
    egress_basis: str | None
    egress_source: str | None = None  # an `EgressBasis` value (absent in an older document)
    egress_measured_by: str | None = None
    cross_zone_gb_per_day: float | None = None

    @classmethod
    def of(cls, waste: Waste) -> StoredWaste:
        return cls(waste.gpu_hours_per_day, waste.gpu_hours_basis, waste.egress_usd_per_day,
                   waste.egress_basis, waste.egress_source.value, waste.egress_measured_by,
                   waste.cross_zone_gb_per_day)  # fmt: skip

    @classmethod
    def from_stored(cls, doc: Mapping[str, Any], *, where: str = "waste") -> StoredWaste:
        return cls(
            gpu_hours_per_day=_number(doc, "gpu_hours_per_day", where),
            gpu_hours_basis=_optional_text(doc, "gpu_hours_basis", where),
            egress_usd_per_day=_number(doc, "egress_usd_per_day", where),
            egress_basis=_optional_text(doc, "egress_basis", where),
            egress_source=_optional_text(doc, "egress_source", where),
            egress_measured_by=_optional_text(doc, "egress_measured_by", where),
            cross_zone_gb_per_day=_number(doc, "cross_zone_gb_per_day", where),
        )

    def revised(self, again: Mapping[str, Any], *, where: str = "waste") -> StoredWaste:
        """This waste with the figures a later estimate (`again`, the same shape) carries."""
        later = StoredWaste.from_stored(again, where=where)
        return StoredWaste(**{
            name: getattr(later if name in again else self, name) for name in _WASTE_FIELDS
        })


_WASTE_FIELDS = tuple(f.name for f in fields(StoredWaste))


@dataclass(frozen=True)
class StoredMetrics:
    """The utilization evidence as stored (`UtilizationEvidence.to_dict`): now and the baseline,
    None when there was no reading (`status` says why; absent in an older document)."""

    status: str | None = None
    utilization_now: float | None = None
    utilization_baseline: float | None = None

    @classmethod
    def of(cls, evidence: UtilizationEvidence) -> StoredMetrics:
        return cls(evidence.status, evidence.utilization_now, evidence.utilization_baseline)

    @classmethod
    def from_stored(cls, doc: Mapping[str, Any], *, where: str = "metrics") -> StoredMetrics:
        return cls(
            status=_optional_text(doc, "status", where),
            utilization_now=_number(doc, "utilization_now", where),
            utilization_baseline=_number(doc, "utilization_baseline", where),
        )


@dataclass(frozen=True)
class StoredKueue:
    """Why Kueue let a job it manages split (`KueueAdvice.to_dict`): the cause, the queue, the
    words, the Kueue configuration to add (YAML), and whether zonemedic's Kueue fix applies it."""

    cause: str
    queue: str
    message: str
    proposal: str
    agent_fixable: bool = False

    @classmethod
    def of(cls, advice: KueueAdvice) -> StoredKueue:
        return cls(str(advice.cause), advice.queue, advice.message, advice.proposal,
                   advice.agent_fixable)  # fmt: skip

    @classmethod
    def from_stored(cls, doc: Mapping[str, Any], *, where: str = "diagnosis.kueue") -> StoredKueue:
        fixable = doc.get("agent_fixable", False)
        if not isinstance(fixable, bool):
            raise _fail(f"{where}.agent_fixable", "true or false", fixable)
        return cls(_text(doc, "cause", where), _text(doc, "queue", where),
                   _text(doc, "message", where), _text(doc, "proposal", where), fixable)  # fmt: skip


@dataclass(frozen=True)
class StoredPolicyOffer:
    """The policy-side fix offered when co-location is refused (`PolicyOffer.to_dict`): the
    kind, YAML, diff, the command that applies it, whether its blast radius is exactly the job's
    denied flows and how many it opens, the note that zonemedic does not apply it; or why there
    is none (`refused`)."""

    kind: str | None = None
    yaml: str = ""
    diff: str = ""
    apply: str = ""
    exact: bool = False
    opened: int = 0
    other_flows_changed: int = 0
    touched_outside_job: tuple[str, ...] = ()
    note: str = ""
    refused: str | None = None

    @classmethod
    def of(cls, offer: PolicyOffer) -> StoredPolicyOffer:
        return cls.from_stored(offer.to_dict())

    @classmethod
    def from_stored(cls, doc: Mapping[str, Any], *,
                    where: str = "diagnosis.policy_fix") -> StoredPolicyOffer:  # fmt: skip
        note = _optional_text(doc, "note", where) or ""
        refused = _optional_text(doc, "refused", where)
        if refused is not None:
            return cls(note=note, refused=refused)
        exact = doc.get("exact", False)
        if not isinstance(exact, bool):
            raise _fail(f"{where}.exact", "true or false", exact)
        blast = _mapping(doc.get("blast_radius"), f"{where}.blast_radius") or {}
        others = blast.get("other_flows_changed", 0)
        return cls(
            kind=_optional_text(doc, "kind", where), yaml=_text(doc, "yaml", where),
            diff=_text(doc, "diff", where), apply=_text(doc, "apply", where), exact=exact,
            opened=_count(doc.get("opened_flows", 0), f"{where}.opened_flows"),
            other_flows_changed=_count(others, f"{where}.blast_radius.other_flows_changed"),
            touched_outside_job=_texts(blast.get("touched_outside_job"),
                                       f"{where}.blast_radius.touched_outside_job"),
            note=note,
        )  # fmt: skip


@dataclass(frozen=True)
class StoredDiagnosis:
    """What the readers of an incident's stored `diagnosis` use of it (see the module docstring)."""

    job: StoredJob | None = None
    verdict: Verdict | None = None
    zones: Mapping[str, int] | None = None  # None: the document names none (a drop, an alert)
    coordinator: StoredCoordinator | None = None
    denied_flows: tuple[StoredFlow, ...] = ()
    denied_flows_total: int | None = None
    remediable: bool = False
    target_zone: str | None = None
    reasons: tuple[str, ...] = ()
    mislabelled: tuple[StoredMislabelled, ...] = ()
    uncertain: tuple[StoredUncertain, ...] = ()
    caveats: tuple[StoredCaveat, ...] = ()
    waste: StoredWaste | None = None
    metrics: StoredMetrics | None = None
    kueue: StoredKueue | None = None
    policy_fix: StoredPolicyOffer | None = None

    @classmethod
    def of(cls, document: IncidentDocument) -> StoredDiagnosis:
        """The view of a document as it will read once stored (`to_dict`)."""
        ref = document.job
        uid = document.uid if document.finding is not None or document.alert is None else None
        base = cls(
            job=StoredJob(ref.kind.value, ref.namespace, ref.name, uid),
            verdict=document.verdict,
            waste=StoredWaste.of(document.waste) if document.waste is not None else None,
            metrics=StoredMetrics.of(document.metrics),
        )
        f = document.finding
        if f is None:
            return base
        coordinator = f.coordinator
        return cls(
            job=base.job, verdict=base.verdict, zones=dict(f.zones),
            coordinator=(StoredCoordinator(coordinator.pod, coordinator.zone)
                         if coordinator is not None else None),
            denied_flows=tuple(StoredFlow.of(d) for d in f.denied_flows),
            denied_flows_total=f.denied_flows_total, remediable=f.remediable,
            target_zone=f.target_zone, reasons=tuple(f.reasons),
            mislabelled=tuple(StoredMislabelled(m.pod, m.label, m.value, m.node_zone)
                              for m in f.mislabelled),
            uncertain=tuple(StoredUncertain(u.policy, u.field, u.problem) for u in f.uncertain),
            caveats=tuple(StoredCaveat(c.policy, c.feature) for c in f.caveats),
            waste=base.waste, metrics=base.metrics,
            kueue=StoredKueue.of(f.kueue) if f.kueue is not None else None,
            policy_fix=StoredPolicyOffer.of(f.policy_fix) if f.policy_fix is not None else None,
        )  # fmt: skip

    @classmethod
    def from_stored(cls, doc: object) -> StoredDiagnosis:
        """Read a stored `diagnosis` (the JSON object); `StoredDocumentError` names what is not
        the shape the agent writes."""
        root = _mapping(doc, "diagnosis")
        if root is None:
            return cls()
        return cls(
            job=_job(root),
            verdict=_verdict(root),
            zones=_zones(root),
            coordinator=_coordinator(root),
            denied_flows=tuple(_flow(item, at) for at, item in
                               _items(root.get("denied_flows"), "diagnosis.denied_flows")),
            denied_flows_total=_total(root),
            remediable=_flag(root),
            target_zone=_optional_text(root, "target_zone", "diagnosis"),
            reasons=_texts(root.get("reasons"), "diagnosis.reasons"),
            mislabelled=tuple(
                StoredMislabelled(_text(m, "pod", at), _text(m, "label", at),
                                  _text(m, "value", at), _text(m, "node_zone", at))
                for at, m in _items(root.get("mislabelled_pods"), "diagnosis.mislabelled_pods")
            ),
            uncertain=tuple(
                StoredUncertain(_text(u, "policy", at), _text(u, "field", at),
                                _text(u, "problem", at))
                for at, u in _items(root.get("uncertain"), "diagnosis.uncertain")
            ),
            caveats=tuple(
                StoredCaveat(_text(c, "policy", at), _text(c, "feature", at))
                for at, c in _items(root.get("caveats"), "diagnosis.caveats")
            ),
            waste=_waste(root),
            metrics=_metrics(root),
            kueue=_kueue(root),
            policy_fix=_policy_fix(root),
        )  # fmt: skip


def _job(root: Mapping[str, Any]) -> StoredJob | None:
    job = _mapping(root.get("job"), "diagnosis.job")
    if job is None:
        return None
    where = "diagnosis.job"
    return StoredJob(_text(job, "kind", where), _text(job, "namespace", where),
                     _text(job, "name", where), _optional_text(job, "uid", where))  # fmt: skip


def _verdict(root: Mapping[str, Any]) -> Verdict | None:
    value = _optional_text(root, "verdict", "diagnosis")
    if value is None:
        return None
    try:
        return Verdict(value)
    except ValueError:
        raise StoredDocumentError(f"diagnosis.verdict: unknown verdict {value!r}") from None


def _zones(root: Mapping[str, Any]) -> dict[str, int] | None:
    zones = _mapping(root.get("zones"), "diagnosis.zones")
    if zones is None:
        return None
    return {str(zone): _count(count, f"diagnosis.zones.{zone}") for zone, count in zones.items()}


def _coordinator(root: Mapping[str, Any]) -> StoredCoordinator | None:
    found = _mapping(root.get("coordinator"), "diagnosis.coordinator")
    if found is None:
        return None
    where = "diagnosis.coordinator"
    return StoredCoordinator(_text(found, "pod", where), _optional_text(found, "zone", where))


def _flow(flow: Mapping[str, Any], where: str) -> StoredFlow:
    port = flow.get("port")
    if isinstance(port, bool) or not isinstance(port, int | str):
        raise _fail(f"{where}.port", "a number or a range", port)
    protocol = flow.get("protocol", "TCP")
    if not isinstance(protocol, str):
        raise _fail(f"{where}.protocol", "a string", protocol)
    return StoredFlow(
        from_pod=_text(flow, "from_pod", where), to_pod=_text(flow, "to_pod", where), port=port,
        protocol=protocol, hop=_text(flow, "hop", where), reason=_text(flow, "reason", where),
        policies=_texts(flow.get("policies"), f"{where}.policies"),
    )  # fmt: skip


def _total(root: Mapping[str, Any]) -> int | None:
    total = root.get("denied_flows_total")
    return None if total is None else _count(total, "diagnosis.denied_flows_total")


def _flag(root: Mapping[str, Any]) -> bool:
    value = root.get("remediable")
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _fail("diagnosis.remediable", "true or false", value)
    return value


def _kueue(root: Mapping[str, Any]) -> StoredKueue | None:
    found = _mapping(root.get("kueue"), "diagnosis.kueue")
    return None if found is None else StoredKueue.from_stored(found)


def _policy_fix(root: Mapping[str, Any]) -> StoredPolicyOffer | None:
    found = _mapping(root.get("policy_fix"), "diagnosis.policy_fix")
    return None if found is None else StoredPolicyOffer.from_stored(found)


def _waste(root: Mapping[str, Any]) -> StoredWaste | None:
    found = _mapping(root.get("waste"), "diagnosis.waste")
    return None if found is None else StoredWaste.from_stored(found, where="diagnosis.waste")


def _metrics(root: Mapping[str, Any]) -> StoredMetrics | None:
    found = _mapping(root.get("metrics"), "diagnosis.metrics")
    return None if found is None else StoredMetrics.from_stored(found, where="diagnosis.metrics")
