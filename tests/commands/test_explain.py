"""`zonemedic explain` against the twin through the real kubernetes client, and on a kubectl dump
of the same cluster: the same answer both ways, the diagnosis evaluator's verdict, and one clear
line (exit 2) for every kind of bad input."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from agent.cli import main
from agent.commands.diagnose import load_snapshot
from agent.model.network import PortRange
from agent.policy.explanation import PodIndex, endpoint_of
from agent.settings import DiagnosisSettings
from agent.twin import kubeconfig

ZONE_KEY = "netpol.example.com/zone"
WORKER, MASTER = "ml/llm-finetune-worker-0", "ml/llm-finetune-master-0"


def explain(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["explain", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def live(twin: dict[str, Path]) -> list[str]:
    return ["--kubeconfig", str(twin["kubeconfig"]), "--config", str(twin["config"])]


def dumped(twin: dict[str, Path]) -> list[str]:
    return ["--snapshot", str(twin["dump"]), "--config", str(twin["config"])]


def test_live_and_dump_give_the_same_answer(
    twin: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    flow = ["--from", WORKER, "--to", MASTER, "--port", "23456/TCP", "--json"]
    code, out, err = explain(capsys, *live(twin), *flow)
    assert code == 0, err
    answer = orjson.loads(out)
    assert answer["allowed"] is False
    assert answer["denied_at"] == ["ingress"]
    egress, ingress = answer["hops"]
    assert (egress["hop"], egress["enforced"], egress["verdict"]) == ("egress", False, "allowed")
    assert egress["selected_by"][0]["why"] == "has no egress rules: it does not enforce egress"
    assert ingress == {
        "hop": "ingress", "protocol": "TCP", "endpoint": MASTER, "enforced": True,
        "selected_by": [{
            "policy": "CiliumNetworkPolicy/ml/zone-boundary-us-east-1b",
            "kind": "CiliumNetworkPolicy", "section": "spec", "enforces": True,
            "why": "has ingress rules (enableDefaultDeny unset): ingress is default deny",
        }],
        "enforcing": ["CiliumNetworkPolicy/ml/zone-boundary-us-east-1b"],
        "verdict": "default_deny", "hubble": "POLICY_DENIED",
        "policies": ["CiliumNetworkPolicy/ml/zone-boundary-us-east-1b"], "rules": [],
    }  # fmt: skip
    source = answer["identities"]["from"]
    assert source["zone_label"] == {ZONE_KEY: "us-east-1a"}
    assert source["namespace_labels"]["team"] == "research"
    assert source["labels"]["io.cilium.k8s.namespace.labels.team"] == "research"

    code, out, err = explain(capsys, *dumped(twin), *flow)
    assert code == 0, err
    from_dump = orjson.loads(out)
    assert {k: v for k, v in from_dump.items() if k != "dataplane"} == {
        k: v for k, v in answer.items() if k != "dataplane"
    }


def test_the_verdict_is_the_diagnosis_evaluators(twin: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = load_snapshot([twin["dump"]])
    policies = snapshot.policy_set(DiagnosisSettings(pod_zone_label=ZONE_KEY))


    index = PodIndex(snapshot.state)
    pods = [p for p in snapshot.state.pods if p.namespace == "ml"]
    for src in pods:
        for dst in pods:
            code, out, _ = explain(capsys, *dumped(twin), "--from", f"ml/{src.name}",
                                   "--to", f"ml/{dst.name}", "--port", "23456", "--json")
            assert code == 0
            check = policies.check(endpoint_of(src, index.state), endpoint_of(dst, index.state),
                                   PortRange.single(23456))
            assert orjson.loads(out)["allowed"] is check.allowed, (src.name, dst.name)


def test_a_pod_that_does_not_exist_yet(twin: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = explain(capsys, *dumped(twin), "--from", "ml", "--from-labels",
                             f"app=llm-finetune,{ZONE_KEY}=us-east-1b", "--to", MASTER,
                             "--port", "23456")
    assert code == 0, err
    assert out.splitlines()[0] == (
        f"ml/{{app=llm-finetune,{ZONE_KEY}=us-east-1b}} -> {MASTER} port 23456/TCP: ALLOWED")
    assert "allow rule CiliumNetworkPolicy/ml/zone-boundary-us-east-1b spec.ingress[0]: peer " \
        "{io.kubernetes.pod.namespace=ml, netpol.example.com/zone=us-east-1b}; ports all ports" in out


def test_matrix_is_the_e2e_truth_table(twin: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = explain(capsys, *live(twin), "--matrix", "--pods", f"{MASTER},{WORKER}",
                             "--port", "23456", "--port", "29500/UDP")
    assert code == 0, err
    table = f"-\t{MASTER}\t{WORKER}\n{MASTER}\t.\tX\n{WORKER}\tX\t."
    assert out == f"port 23456/TCP\n{table}\n\nport 29500/UDP\n{table}\n"
    code, out, _ = explain(capsys, *live(twin), "--matrix", "--namespace", "ml", "--port", "1", "--json")
    (only,) = orjson.loads(out)["matrix"]
    assert len(only["pods"]) == 5 and len(only["allowed"]) == 5


BAD: dict[str, tuple[list[str], str]] = {
    "unknown pod": (["--from", "ml/nope", "--to", MASTER, "--port", "1"],
                    "no pod ml/nope in the snapshot"),
    "unknown namespace of a pod to be": (
        ["--from", "other", "--from-labels", "a=b", "--to", MASTER, "--port", "1"],
        "no namespace other in the snapshot"),
    "bad port": (["--from", WORKER, "--to", MASTER, "--port", "70000"],
                 "port: '70000' is not a port (or range) within 1-65535"),
    "port not a number": (["--from", WORKER, "--to", MASTER, "--port", "http"],
                          "port: expected PORT[/PROTO] or FIRST-LAST[/PROTO], got 'http'"),
    "bad protocol": (["--from", WORKER, "--to", MASTER, "--port", "80/icmp"],
                     "port: unknown protocol 'icmp' (TCP, UDP, SCTP or ANY)"),
    "malformed labels": (["--from", "ml", "--from-labels", "app", "--to", MASTER, "--port", "1"],
                         "from-labels: expected KEY=VALUE, got 'app'"),
    "bad label value": (["--from", "ml", "--from-labels", "app=-x", "--to", MASTER, "--port", "1"],
                        "from-labels: '-x' is not a valid label value (key app)"),
    "no slash": (["--from", "llm", "--to", MASTER, "--port", "1"],
                 "from: expected NAMESPACE/POD, got 'llm'"),
    "no port": (["--from", WORKER, "--to", MASTER],
                "port: give exactly one --port PORT[/PROTO] (several with --matrix)"),
    "matrix without pods": (["--matrix", "--port", "1"],
                            "matrix: give --pods NS/POD,... or --namespace NS"),
}


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_input_is_one_line_and_exit_2(
    case: tuple[list[str], str], twin: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args, message = case
    code, out, err = explain(capsys, *dumped(twin), *args, "--json")
    assert (code, out, err) == (2, "", f"zonemedic: error: {message}\n")


def test_an_unreadable_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("items: [\n")
    code, out, err = explain(capsys, "--snapshot", str(bad), "--from", WORKER, "--to", MASTER,
                             "--port", "1")
    assert code == 2 and out == ""
    assert err.startswith(f"zonemedic: error: {bad}") and err.count("\n") == 1


def test_an_unreachable_cluster_is_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kube = kubeconfig.write(tmp_path / "kubeconfig", "http://127.0.0.1:9")
    code, _, err = explain(capsys, "--kubeconfig", str(kube), "--from", WORKER, "--to", MASTER,
                           "--port", "1")
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err


