"""What a finding rests on: lying zone-mirroring labels (`zone_label_mismatch`), unreadable
policies that may select the job (`uncertain`), caveats of deciding rules, and which labels the
dataplane's identities leave out, through the real parser and evaluator."""

from __future__ import annotations

from typing import Any

from agent.diagnosis.diagnose import diagnose_cluster
from agent.model.finding import Finding
from agent.model.network import DenyReason
from agent.model.verdict import Verdict
from agent.settings import DataplaneSetting, DiagnosisSettings
from tests.support.objects import cnp, job_pod, netpol, node, zone_only
from tests.support.snapshots import load

NODES = [node("a1", "zone-a", gpus=8), node("a2", "zone-a", gpus=8), node("b1", "zone-b", gpus=8)]
ZONE_POLICIES = [zone_only("zone-a"), zone_only("zone-b")]
TOPOLOGY = "topology.kubernetes.io/zone"
PORT = [("pytorchjob-port", 23456)]


def gang_pods(name: str, placed: list[tuple[str, dict[str, str]]], *, ns: str = "ml",
        ports: list[Any] | None = None) -> list[dict[str, Any]]:
    """A PyTorchJob: the first (node, extra labels) is the master, the others workers."""
    out = []
    for i, (where, extra) in enumerate(placed):
        rtype, index = ("master", 0) if i == 0 else ("worker", i - 1)
        out.append(job_pod("PyTorchJob", name, rtype, index, node_name=where, ns=ns,
                           coordinator=i == 0, ports=ports or PORT, extra=extra))  # fmt: skip
    return out


def diagnose(items: list[dict[str, Any]], **settings: Any) -> dict[str, Finding]:
    config = DiagnosisSettings(**settings)
    snap = load(NODES + items)
    result = diagnose_cluster(snap.state, snap.policy_set(config), settings=config)
    return {f.job.name: f for f in result.findings}


A, B = {"zone": "zone-a"}, {"zone": "zone-b"}


# -- zone_label_mismatch -------------------------------------------------------------------------


def test_a_lying_mirror_label_is_its_own_verdict_and_relabelling_is_the_fix() -> None:
    # the seed lab after a GitOps sync: everything in zone-a, the master labelled zone-b again
    found = diagnose(ZONE_POLICIES + gang_pods("llm", [("a1", B), ("a1", A), ("a2", A)]))["llm"]
    assert found.verdict is Verdict.ZONE_LABEL_MISMATCH
    assert (found.remediable, found.target_zone) == (True, "zone-a")
    assert [(m.pod, m.label, m.value, m.node_zone) for m in found.mislabelled] == [
        ("llm-master-0", "zone", "zone-b", "zone-a")
    ]
    text = " ".join(found.reasons)
    assert "must equal the node's zone" in text and "no policy change needed" in text
    assert "GitOps" in text
    assert "need a policy change" not in text.replace("no policy change needed", "")
    assert found.to_dict()["mislabelled_pods"] == [
        {"pod": "llm-master-0", "label": "zone", "value": "zone-b", "node_zone": "zone-a"}
    ]


def test_a_lying_label_comes_first_even_when_policies_need_a_change_too() -> None:
    deny = cnp("no-workers", {"endpointSelector": {"matchLabels": {"zone": "zone-a"}},
                              "ingressDeny": [{"fromEndpoints": [{}]}]})  # fmt: skip
    found = diagnose([*ZONE_POLICIES, deny, *gang_pods("llm", [("a1", B), ("a1", A), ("a2", A)])])["llm"]
    assert found.verdict is Verdict.ZONE_LABEL_MISMATCH
    assert not found.remediable and found.target_zone is None
    assert any("stay denied" in r and "policy change" in r for r in found.reasons)


def test_a_lying_label_on_a_job_whose_flows_pass_is_a_note() -> None:
    found = diagnose(gang_pods("llm", [("a1", B), ("a1", A), ("a2", A)]))["llm"]
    assert found.verdict is Verdict.HEALTHY
    assert found.mislabelled and any("its node is in zone-a" in r for r in found.reasons)


def test_a_configured_mirror_label_is_checked_whatever_the_cluster_shows() -> None:
    # one pod only carries the key: auto detection cannot tell, the setting can
    items = [*ZONE_POLICIES, *gang_pods("llm", [("a1", B), ("a1", {}), ("a2", {})])]
    assert diagnose(items)["llm"].verdict is Verdict.POLICY_BLOCKED
    found = diagnose(items, pod_zone_label="zone")["llm"]
    assert found.verdict is Verdict.ZONE_LABEL_MISMATCH


def test_a_split_job_with_a_lying_label_is_still_co_located() -> None:
    # the label makes the split look like one zone to the policies: a degraded split, not a
    # relabel (co-location sets the label to the target zone anyway)
    items = ZONE_POLICIES + gang_pods("llm", [("b1", A), ("a1", A), ("a2", A)])
    found = diagnose(items, pod_zone_label="zone")["llm"]
    assert found.verdict is Verdict.ZONE_SPLIT_DEGRADED
    assert found.target_zone == "zone-a" and found.mislabelled


# -- uncertain: an unreadable policy that may select the job --------------------------------------


BROKEN = cnp("newer-field", {"endpointSelector": {"matchLabels": {"training.kubeflow.org/job-name":
                                                                  "llm"}},
                             "ingress": [{"fromEndpoints": [{}]}], "someNewCiliumField": {}})


def test_an_unreadable_policy_marks_the_jobs_it_may_select_and_no_other() -> None:
    items = [BROKEN, *gang_pods("llm", [("a1", A), ("a2", A)]), *gang_pods("bert", [("a1", A), ("a2", A)]),
             *gang_pods("t5", [("a1", A), ("a2", A)], ns="nlp")]  # fmt: skip
    found = diagnose(items)
    assert {name: f.verdict for name, f in found.items()} == {
        "llm": Verdict.HEALTHY, "bert": Verdict.HEALTHY, "t5": Verdict.HEALTHY
    }
    [uncertain] = found["llm"].uncertain
    assert uncertain.policy == "CiliumNetworkPolicy/ml/newer-field"
    assert uncertain.field == "spec.someNewCiliumField"
    assert any(r.startswith("uncertain: policy CiliumNetworkPolicy/ml/newer-field")
               for r in found["llm"].reasons)  # fmt: skip
    assert not found["bert"].uncertain and not found["t5"].uncertain
    assert found["llm"].to_dict()["uncertain"] == [
        {"policy": "CiliumNetworkPolicy/ml/newer-field", "field": "spec.someNewCiliumField",
         "problem": "unknown field"}
    ]


def test_an_unreadable_selector_makes_every_pod_of_its_namespace_uncertain() -> None:
    broken = cnp("bad-selector", {"endpointSelector": {"matchLabels": ["x"]}})
    found = diagnose([broken, *gang_pods("llm", [("a1", A), ("a2", A)]),
                      *gang_pods("t5", [("a1", A), ("a2", A)], ns="nlp")])  # fmt: skip
    assert found["llm"].uncertain and not found["t5"].uncertain


# -- caveats and identities -----------------------------------------------------------------------


def test_a_caveat_of_a_deciding_rule_reaches_the_finding() -> None:
    auth = cnp("mtls", {"endpointSelector": {}, "ingress": [
        {"fromEndpoints": [{}], "authentication": {"mode": "required"}}]})
    found = diagnose([auth, *gang_pods("llm", [("a1", A), ("a2", A)])])["llm"]
    assert found.verdict is Verdict.HEALTHY
    assert [c.to_dict()["feature"] for c in found.caveats] == ["authentication.mode: required"]
    assert found.to_dict()["caveats"][0]["policy"] == "CiliumNetworkPolicy/ml/mtls"


def test_an_l7_rule_on_the_training_port_blocks_the_job() -> None:
    http = cnp("http-only", {"endpointSelector": {}, "ingress": [{"fromEndpoints": [{}], "toPorts": [
        {"ports": [{"port": "23456", "protocol": "TCP"}], "rules": {"http": [{}]}}]}]})
    found = diagnose([http, *gang_pods("llm", [("a1", A), ("a2", A)])])["llm"]
    assert found.verdict is Verdict.POLICY_BLOCKED
    on_port = {f.reason for f in found.denied_flows if f.ports.first == 23456 == f.ports.last}
    assert on_port == {DenyReason.L7_PROXY}


def test_cilium_identities_leave_labels_out_and_the_finding_says_which_and_why() -> None:
    by_zone = cnp("by-zone", {"endpointSelector": {"matchLabels": {TOPOLOGY: "zone-a"}},
                              "ingress": [{}]})  # fmt: skip
    extra = {"pod-template-hash": "5d8f", TOPOLOGY: "zone-a"}
    found = diagnose([by_zone, *gang_pods("llm", [("a1", extra), ("a2", extra)])])["llm"]
    note = found.identity
    assert note is not None and note.dataplane == "cilium"
    excluded = dict(note.excluded)
    assert excluded["pod-template-hash"] == "!pod-template-hash (current Cilium default)"
    assert excluded[TOPOLOGY].startswith("!topology\\.kubernetes\\.io")
    assert any(r.startswith(f"label {TOPOLOGY} is left out of Cilium identities")
               for r in found.reasons)  # fmt: skip
    assert found.verdict is Verdict.HEALTHY  # the selector never matches: nothing is denied


def test_plain_kubernetes_selects_on_every_label_and_moves_the_zone_label() -> None:
    # a dump without any Cilium object: NetworkPolicies select on the zone label Kubernetes
    # 1.35 copies onto pods; co-location moves it with the pod
    same_zone = [
        netpol(f"{z}-only", {"podSelector": {"matchLabels": {TOPOLOGY: z}},
                             "ingress": [{"from": [{"podSelector": {"matchLabels": {TOPOLOGY: z}}}]}]})
        for z in ("zone-a", "zone-b")
    ]  # fmt: skip
    items = [*same_zone, *gang_pods("llm", [("b1", {TOPOLOGY: "zone-b"}), ("a1", {TOPOLOGY: "zone-a"}),
                                      ("a2", {TOPOLOGY: "zone-a"})])]  # fmt: skip
    found = diagnose(items)["llm"]
    assert found.identity is not None and found.identity.dataplane == "kubernetes"
    assert found.identity.excluded == ()
    assert found.verdict is Verdict.ZONE_SPLIT_BLOCKED
    assert found.target_zone == "zone-a"
    # the same dump judged as Cilium (the setting): the zone label is not in identities
    assert diagnose(items, dataplane=DataplaneSetting.CILIUM)["llm"].verdict is (
        Verdict.ZONE_SPLIT_DEGRADED
    )


def test_a_named_port_resolves_on_the_rules_protocol() -> None:
    around = [{"port": 1024, "endPort": 23455}, {"port": 23457, "endPort": 65535}]
    allow_nccl = netpol("nccl", {"podSelector": {},
                                 "ingress": [{"ports": [*around, {"port": "nccl"}]}]})  # fmt: skip
    tcp = [("nccl", 23456, "TCP")]
    udp = [("nccl", 23456, "UDP"), ("pytorchjob-port", 23456, "TCP")]
    ok = diagnose([allow_nccl, *gang_pods("llm", [("a1", A), ("a2", A)], ports=tcp)])["llm"]
    assert ok.verdict is Verdict.HEALTHY
    found = diagnose([allow_nccl, *gang_pods("llm", [("a1", A), ("a2", A)], ports=udp)])["llm"]
    assert found.verdict is Verdict.POLICY_BLOCKED  # a TCP rule naming nccl: nccl is UDP here
