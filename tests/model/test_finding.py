"""The JSON shape of a finding (`zonemedic diagnose --output json`)."""

from __future__ import annotations

from agent.model.finding import Coordinator, DeniedFlow, Finding, Impact, Verdict
from agent.model.job import JobRef
from agent.model.network import DenyReason, Hop, PortRange
from agent.model.workload import JobKind


def test_finding_to_dict_matches_the_issue_shape() -> None:
    finding = Finding(
        job=JobRef(JobKind.PYTORCH, "ml", "resnet"),
        verdict=Verdict.ZONE_SPLIT_BLOCKED,
        zones={"zone-a": 3, "zone-b": 1},
        coordinator=Coordinator("resnet-master-0", "zone-b"),
        denied_flows=(
            DeniedFlow(
                "resnet-worker-0",
                "resnet-master-0",
                PortRange.single(23456),
                Hop.INGRESS,
                DenyReason.DEFAULT_DENY,
                ("CiliumNetworkPolicy/ml/zone-b-only",),
            ),
            DeniedFlow(
                "resnet-master-0",
                "resnet-worker-0",
                PortRange(1024, 65535),
                Hop.EGRESS,
                DenyReason.DENY_RULE,
                ("CiliumClusterwideNetworkPolicy/x",),
            ),
        ),
        denied_flows_total=2,
        remediable=True,
        target_zone="zone-a",
        impact=Impact(
            gpus_total=4,
            gpus_outside_target=1,
            gpu_share_outside_target=0.25,
            pods_outside_target=1,
            reference_zone="zone-a",
        ),
    )
    assert finding.to_dict() == {
        "job": {"kind": "PyTorchJob", "namespace": "ml", "name": "resnet"},
        "verdict": "zone_split_blocked",
        "zones": {"zone-a": 3, "zone-b": 1},
        "coordinator": {"pod": "resnet-master-0", "zone": "zone-b"},
        "denied_flows": [
            {
                "from_pod": "resnet-worker-0",
                "to_pod": "resnet-master-0",
                "port": 23456,
                "protocol": "TCP",
                "hop": "ingress",
                "reason": "default_deny",
                "policies": ["CiliumNetworkPolicy/ml/zone-b-only"],
            },
            {
                "from_pod": "resnet-master-0",
                "to_pod": "resnet-worker-0",
                "port": "1024-65535",
                "protocol": "TCP",
                "hop": "egress",
                "reason": "deny_rule",
                "policies": ["CiliumClusterwideNetworkPolicy/x"],
            },
        ],
        "denied_flows_total": 2,
        "remediable": True,
        "target_zone": "zone-a",
        "reasons": [],
        "impact": {
            "gpus_total": 4,
            "gpus_outside_target": 1,
            "gpu_share_outside_target": 0.25,
            "pods_outside_target": 1,
            "reference_zone": "zone-a",
        },
        "mislabelled_pods": [],
        "uncertain": [],
        "caveats": [],
        "identity_labels": None,
        "kueue": None,
        "policy_fix": None,
    }


def test_healthy_finding_has_null_impact_and_target() -> None:
    finding = Finding(
        job=JobRef(JobKind.GROUP, "lab", "g"),
        verdict=Verdict.HEALTHY,
        zones={"zone-a": 2},
        coordinator=None,
    )
    out = finding.to_dict()
    assert (out["job"]["kind"], out["coordinator"], out["target_zone"], out["impact"]) == (
        "Group",
        None,
        None,
        None,
    )
