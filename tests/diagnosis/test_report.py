"""The table renderer: one row per job, denied flows and notes beneath, colour only on request."""

from __future__ import annotations

from agent.diagnosis.diagnose import diagnose_cluster
from agent.diagnosis.report import render_table
from agent.policy import PolicySet
from agent.settings import DiagnosisSettings
from tests.support.objects import job_pod, node, zone_only
from tests.support.snapshots import load


def _findings():  # type: ignore[no-untyped-def]
    items = [node("a1", "zone-a", gpus=8), node("b1", "zone-b", gpus=8), zone_only("zone-a"), zone_only("zone-b")]
    items.append(
        job_pod("PyTorchJob", "split", "master", 0, node_name="b1", extra={"zone": "zone-b"})
    )
    items += [
        job_pod("PyTorchJob", "split", "worker", i, node_name="a1", extra={"zone": "zone-a"})
        for i in range(6)
    ]
    items.append(
        job_pod("PyTorchJob", "fine", "master", 0, node_name="a1", extra={"zone": "zone-a"})
    )
    snap = load(items)
    return diagnose_cluster(
        snap.state, PolicySet(snap.policies), settings=DiagnosisSettings()
    ).findings


def test_table_rows_flows_and_notes() -> None:
    text = render_table(_findings(), colour=False, shown=5)
    lines = text.splitlines()
    assert lines[0].split() == ["JOB", "VERDICT", "ZONES", "COORDINATOR", "TARGET"]
    assert lines[1].split() == [
        "PyTorchJob",
        "ml/fine",
        "healthy",
        "zone-a:1",
        "fine-master-0@zone-a",
        "-",
    ]
    assert lines[2].split()[:3] == ["PyTorchJob", "ml/split", "zone_split_blocked"]
    assert lines[2].endswith("zone-a")
    denied = [line for line in lines if line.strip().startswith("denied ")]
    assert len(denied) == 5
    assert (
        "split-worker-0 -> split-master-0 TCP/23456 at ingress (default_deny) by CiliumNetworkPolicy/ml/zone-b-only"
        in denied[0]
    )
    assert "... and 13 more denied pod pair(s)" in text  # 18 denied pairs, 5 shown
    assert "\x1b[" not in text


def test_colour_marks_verdicts_only_when_asked() -> None:
    text = render_table(_findings(), colour=True)
    assert "\x1b[32mhealthy" in text
    assert "\x1b[31;1mzone_split_blocked" in text


def test_empty() -> None:
    assert render_table([]) == "no training jobs with live pods found\n"


def test_a_mislabelled_job_its_caveats_and_colour() -> None:
    auth = {"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
            "metadata": {"name": "mtls", "namespace": "ml"},
            "spec": {"endpointSelector": {"matchLabels": {"zone": "zone-b"}},
                     "ingress": [{"fromEndpoints": [{}], "authentication": {"mode": "required"}}]}}
    items = [node("a1", "zone-a", gpus=8), node("b1", "zone-b", gpus=8), zone_only("zone-a"), auth]
    items.append(job_pod("PyTorchJob", "lab", "master", 0, node_name="a1", extra={"zone": "zone-b"}))
    items += [job_pod("PyTorchJob", "lab", "worker", i, node_name="a1", extra={"zone": "zone-a"})
              for i in range(2)]  # fmt: skip
    items.append(job_pod("PyTorchJob", "other", "master", 0, node_name="b1", extra={"zone": "zone-b"}))
    snap = load(items)
    findings = diagnose_cluster(snap.state, PolicySet(snap.policies),
                                settings=DiagnosisSettings(pod_zone_label="zone")).findings  # fmt: skip
    text = render_table(findings, colour=False)
    row = next(line for line in text.splitlines() if "ml/lab" in line)
    assert row.split()[2:3] == ["zone_label_mismatch"] and row.endswith("zone-a")
    assert "note: pod lab-master-0: zone-mirroring label zone=zone-b" in text
    assert "caveat: CiliumNetworkPolicy/ml/mtls uses authentication.mode: required" in text
    assert "\x1b[33;1mzone_label_mismatch" in render_table(findings, colour=True)
