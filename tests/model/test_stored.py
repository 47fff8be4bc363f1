"""The stored incident document read back typed: what a document says once stored is what it said
before (`from_stored(to_dict()) == of(document)`), an empty document is an empty view, and a
malformed one is a `StoredDocumentError` naming the key."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agent.errors import ZonemedicError
from agent.model.document import AlertFacts, IncidentDocument, Reading, UtilizationEvidence
from agent.model.finding import (
    Coordinator,
    DeniedFlow,
    Finding,
    MislabelledPod,
    UncertainPolicy,
)
from agent.model.job import JobRef
from agent.model.network import Caveat, DenyReason, Hop, PortRange, Protocol
from agent.model.policy_offer import PolicyOffer
from agent.model.stored import (
    StoredDiagnosis,
    StoredDocumentError,
    StoredFlow,
    StoredJob,
    StoredWaste,
)
from agent.model.verdict import Verdict
from agent.model.waste import EgressBasis, Waste
from agent.model.workload import JobKind

AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
JOB = JobRef(JobKind.PYTORCH, "train", "gpt")
READING = UtilizationEvidence.of(Reading(30.0, 90.0, True, "below 70%"), at=AT)
WASTE = Waste(57.6, "4 GPU(s) x 60% idle", 3061.37, "measured by Beyla", 153069.0,
              EgressBasis.MEASURED, "beyla", 30.0)  # fmt: skip
FLOW = DeniedFlow("gpt-worker-0", "gpt-master-0", PortRange(23456, 23456), Hop.INGRESS,
                  DenyReason.DEFAULT_DENY, ("CiliumNetworkPolicy/train/zone-b-only",))  # fmt: skip
RANGE = DeniedFlow("gpt-worker-1", "gpt-master-0", PortRange(1000, 2000, Protocol.UDP), Hop.EGRESS,
                   DenyReason.DENY_RULE, ())  # fmt: skip
SPLIT = Finding(
    JOB, Verdict.ZONE_SPLIT_BLOCKED, {"zone-a": 3, "zone-b": 1}, Coordinator("gpt-master-0", "zone-b"),
    denied_flows=(FLOW, RANGE), denied_flows_total=7, remediable=True, target_zone="zone-a",
    reasons=("a reason",), mislabelled=(MislabelledPod("p", "zone", "zone-b", "zone-a"),),
    uncertain=(UncertainPolicy("CiliumNetworkPolicy/train/new", "", "unknown field"),),
    caveats=(Caveat("CiliumNetworkPolicy/train/mtls", "authentication.mode", "detail"),),
)  # fmt: skip
HEALTHY = Finding(JOB, Verdict.HEALTHY, {"zone-a": 4}, None)


def _as_stored(document: IncidentDocument) -> Any:
    """The document as the store gives it back: its JSON, decoded."""
    return json.loads(json.dumps(document.to_dict()))


@pytest.mark.parametrize(
    "document",
    [
        IncidentDocument.of_finding(SPLIT, uid="u-1", metrics=READING, waste=WASTE),
        IncidentDocument.of_finding(SPLIT, uid=None, metrics=UtilizationEvidence("no samples")),
        IncidentDocument.of_finding(HEALTHY, uid="u-2", metrics=READING),
        IncidentDocument.of_finding(SPLIT, uid="u-1", metrics=READING).with_fix({"summary": "s"}),
        IncidentDocument.of_drop(JOB, uid="u-3", metrics=READING),
        IncidentDocument.of_drop(JOB, uid=None, metrics=UtilizationEvidence("unreachable", at=AT)),
        IncidentDocument.of_alert(JOB, AlertFacts("GPUIdle", {"a": "b"}), metrics=READING),
    ],
    ids=["split", "split-no-reading", "healthy", "with-fix", "drop", "drop-no-reading", "alert"],
)
def test_a_stored_document_reads_as_what_the_document_says(document: IncidentDocument) -> None:
    view = StoredDiagnosis.from_stored(_as_stored(document))
    assert view == StoredDiagnosis.of(document)
    assert view.verdict is document.verdict
    assert view.job is not None and (view.job.kind, view.job.name) == ("PyTorchJob", "gpt")


def test_what_the_readers_read_of_a_split() -> None:
    view = StoredDiagnosis.from_stored(
        IncidentDocument.of_finding(SPLIT, uid="u-1", metrics=READING, waste=WASTE).to_dict()
    )
    assert view.job == StoredJob("PyTorchJob", "train", "gpt", "u-1")
    assert view.zones == {"zone-a": 3, "zone-b": 1}
    assert view.denied_flows[1] == StoredFlow("gpt-worker-1", "gpt-master-0", "1000-2000", "UDP",
                                              "egress", "deny_rule", ())  # fmt: skip
    assert (view.denied_flows_total, view.remediable, view.target_zone) == (7, True, "zone-a")
    assert view.metrics is not None and view.metrics.utilization_now == 30.0
    assert view.waste is not None and view.waste.egress_source == "measured"
    assert StoredDiagnosis.of(IncidentDocument.of_drop(JOB, uid=None, metrics=READING)).zones is None


def test_an_empty_document_is_an_empty_view() -> None:
    assert StoredDiagnosis.from_stored({}) == StoredDiagnosis()
    assert StoredDiagnosis.from_stored(None) == StoredDiagnosis()


def test_a_later_estimate_replaces_only_the_figures_it_carries() -> None:
    waste = StoredWaste.of(WASTE)
    later = waste.revised({"gpu_hours_per_day": 40.0, "gpu_hours_basis": "later"})
    assert (later.gpu_hours_per_day, later.gpu_hours_basis) == (40.0, "later")
    assert (later.egress_usd_per_day, later.egress_source) == (3061.37, "measured")


def _split(**changes: Any) -> dict[str, Any]:
    doc = IncidentDocument.of_finding(SPLIT, uid="u-1", metrics=READING, waste=WASTE).to_dict()
    doc.update(changes)
    return doc


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([1, 2], r"^diagnosis: expected an object, got list$"),
        (_split(job="gpt"), r"^diagnosis\.job: expected an object, got str$"),
        (_split(job={"kind": "PyTorchJob", "namespace": "train"}), r"^diagnosis\.job\.name: "),
        (_split(verdict="split"), r"^diagnosis\.verdict: unknown verdict 'split'$"),
        (_split(zones={"zone-a": "3"}), r"^diagnosis\.zones\.zone-a: expected an integer, got str$"),
        (_split(zones=[]), r"^diagnosis\.zones: expected an object, got list$"),
        (_split(denied_flows=[{"from_pod": "a"}]), r"^diagnosis\.denied_flows\[0\]\.port: "),
        (_split(denied_flows=["a"]), r"^diagnosis\.denied_flows\[0\]: expected an object"),
        (_split(denied_flows_total=True), r"^diagnosis\.denied_flows_total: expected an integer"),
        (_split(remediable="yes"), r"^diagnosis\.remediable: expected true or false, got str$"),
        (_split(reasons=[1]), r"^diagnosis\.reasons\[0\]: expected a string, got int$"),
        (_split(waste={"gpu_hours_per_day": "96"}), r"^diagnosis\.waste\.gpu_hours_per_day: "),
        (_split(metrics={"utilization_now": True}), r"^diagnosis\.metrics\.utilization_now: "),
        (_split(mislabelled_pods=[{"pod": "p"}]), r"^diagnosis\.mislabelled_pods\[0\]\.label: "),
    ],
)
def test_a_malformed_document_names_the_key(document: object, message: str) -> None:
    with pytest.raises(StoredDocumentError, match=message) as caught:
        StoredDiagnosis.from_stored(document)
    assert isinstance(caught.value, ZonemedicError)  # the deliverer and the CLI report it as such


# -- property: any finding's document reads back as the document says --------------------------

_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
_ports = st.tuples(st.integers(0, 65535), st.integers(0, 2000)).map(
    lambda t: PortRange(t[0], min(65535, t[0] + t[1]) if t[1] % 2 else t[0])
)
_flows = st.builds(DeniedFlow, _names, _names, _ports, st.sampled_from(Hop),
                   st.sampled_from(DenyReason), st.lists(_names, max_size=3).map(tuple))  # fmt: skip
_figures = st.one_of(st.none(), st.floats(0, 1e6, allow_nan=False), st.integers(0, 10**6))
_findings = st.builds(
    Finding,
    st.builds(JobRef, st.sampled_from(JobKind), _names, _names),
    st.sampled_from(Verdict),
    st.dictionaries(_names, st.integers(0, 500), max_size=4),
    st.one_of(st.none(), st.builds(Coordinator, _names, st.one_of(st.none(), _names))),
    denied_flows=st.lists(_flows, max_size=4).map(tuple),
    denied_flows_total=st.integers(0, 100),
    remediable=st.booleans(),
    target_zone=st.one_of(st.none(), _names),
    reasons=st.lists(_names, max_size=3).map(tuple),
    mislabelled=st.lists(st.builds(MislabelledPod, _names, _names, _names, _names), max_size=2)
    .map(tuple),
    uncertain=st.lists(st.builds(UncertainPolicy, _names, st.just("") | _names, _names), max_size=2)
    .map(tuple),
    caveats=st.lists(st.builds(Caveat, _names, _names, _names), max_size=2).map(tuple),
)
_wastes = st.one_of(st.none(), st.builds(
    Waste, _figures, _names, _figures, _names, st.one_of(st.none(), _figures),
    st.sampled_from(EgressBasis), st.one_of(st.none(), _names),
))  # fmt: skip
_evidence = st.one_of(
    st.builds(UtilizationEvidence, _names),
    st.builds(lambda now, base: UtilizationEvidence.of(Reading(now, base, False, None), at=AT),
              _figures, _figures),
)  # fmt: skip


@given(finding=_findings, uid=st.one_of(st.none(), _names), metrics=_evidence, waste=_wastes)
@hypothesis_settings(max_examples=150, deadline=None)
def test_any_findings_document_reads_back_as_it_says(
    finding: Finding, uid: str | None, metrics: UtilizationEvidence, waste: Waste | None
) -> None:
    document = IncidentDocument.of_finding(finding, uid=uid, metrics=metrics, waste=waste)
    assert StoredDiagnosis.from_stored(_as_stored(document)) == StoredDiagnosis.of(document)


@pytest.mark.parametrize("offer", [
    PolicyOffer(kind="CiliumNetworkPolicy", names=("zonemedic-allow-gpt",), yaml="kind: x\n",
                diff="--- /dev/null\n", apply="kubectl apply -f zonemedic-allow-gpt.yaml",
                blast={"touched_outside_job": ["ml/web-0"], "other_flows_changed": 2},
                exact=False, opened=3),
    PolicyOffer(refused="PyTorchJob/ml/gpt: denied by a deny rule"),
], ids=["offer", "refused"])  # fmt: skip
def test_the_policy_fix_reads_back_as_offered(offer: PolicyOffer) -> None:
    document = IncidentDocument.of_finding(dataclasses.replace(SPLIT, policy_fix=offer),
                                           uid="u-1", metrics=READING)  # fmt: skip
    view = StoredDiagnosis.from_stored(_as_stored(document))
    assert view == StoredDiagnosis.of(document)
    assert view.policy_fix is not None
    assert (view.policy_fix.refused, view.policy_fix.exact) == (offer.refused, offer.exact)
    if offer.refused is None:
        assert (view.policy_fix.opened, view.policy_fix.other_flows_changed,
                view.policy_fix.touched_outside_job) == (3, 2, ("ml/web-0",))  # fmt: skip


def test_a_malformed_policy_fix_names_its_key() -> None:
    with pytest.raises(StoredDocumentError, match=r"diagnosis.policy_fix.exact: expected true or false"):
        StoredDiagnosis.from_stored({"policy_fix": {"yaml": "", "diff": "", "apply": "", "exact": 1}})
