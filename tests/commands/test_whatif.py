"""`zonemedic whatif` on the example dump: deleting or applying a policy prints exactly the jobs and
required flows whose verdicts change; a change that opens nothing changes nothing; bad input is one
line, exit 2."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml

from agent.cli import main

ROOT = Path(__file__).resolve().parents[2]
DUMP = str(ROOT / "examples" / "split-blocked.yaml")
CONFIG = str(ROOT / "examples" / "split-blocked.config.yaml")


def whatif(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["whatif", "--snapshot", DUMP, "--config", CONFIG, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _allow_all_in_ml(path: Path, *, namespace: str = "ml") -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
        "metadata": {"name": "allow-ml", "namespace": namespace},
        "spec": {"endpointSelector": {}, "ingress": [{"fromEndpoints": [{}]}]},
    }))  # fmt: skip
    return path


def test_deleting_a_zone_policy_opens_the_flows_into_its_zone(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = whatif(capsys, "--delete", "CiliumNetworkPolicy/ml/zone-b-only", "--json")
    assert code == 0, err
    result = orjson.loads(out)
    assert result["jobs"] == []  # the workers' side (zone-a-only) still blocks the master's flows
    opened = {(f["from"], f["to"], f["port"]) for f in result["flows"]}
    assert opened == {(f"ml/resnet-worker-{i}", "ml/resnet-master-0", port)
                      for i in range(3) for port in ("23456/TCP", "1024-65535/TCP")}
    assert all(f["before"] == {"allowed": False, "hop": "ingress", "reason": "default_deny",
                               "policies": ["CiliumNetworkPolicy/ml/zone-b-only"]}
               and f["after"] == {"allowed": True} for f in result["flows"])


def test_applying_an_allow_policy_unblocks_the_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = whatif(capsys, "--apply", str(_allow_all_in_ml(tmp_path / "allow.yaml")))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("what if: 2 job(s), 18 pod-pair flow(s) checked; 1 job verdict(s)")
    assert "  job PyTorchJob/ml/resnet: zone_split_blocked -> zone_split_degraded" in lines


def test_a_change_elsewhere_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = whatif(capsys, "--apply", str(_allow_all_in_ml(tmp_path / "a.yaml", namespace="web")),
                          "--json")
    result = orjson.loads(out)
    assert (code, result["jobs"], result["flows"], result["flows_checked"]) == (0, [], [], 18)


def test_moving_the_job_into_one_zone_heals_it_and_opens_its_flows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = whatif(capsys, "--move", "ml/resnet", "--zone", "zone-a", "--json")
    assert code == 0, err
    result = orjson.loads(out)
    assert result["jobs"] == [{"job": "PyTorchJob/ml/resnet", "before": "zone_split_blocked",
                               "after": "healthy"}]
    assert result["flows"] and all(f["after"] == {"allowed": True} for f in result["flows"])
    assert {f["job"] for f in result["flows"]} == {"PyTorchJob/ml/resnet"}


@pytest.mark.parametrize(("args", "message"), [
    (["--move", "ml/resnet", "--zone", "zone-q"], "--zone: no node in zone 'zone-q' (zones: zone-a, zone-b)"),
    (["--move", "ml/nope", "--zone", "zone-a"], "--move: no training job ml/nope with live pods"),
    (["--move", "ml/resnet"], "whatif: --move NS/NAME and --zone Z go together"),
    (["--delete", "CiliumNetworkPolicy/ml/nope"], "--delete: no CiliumNetworkPolicy/ml/nope in the snapshot"),
    (["--delete", "Deployment/ml/x"], "--delete: cannot delete a 'Deployment' (kinds: NetworkPolicy, "
     "CiliumNetworkPolicy, CiliumClusterwideNetworkPolicy, Pod)"),
    ([], "whatif: give a change: --apply FILE, --delete KIND/NS/NAME or --move NS/NAME --zone Z"),
    (["--apply", "/nonexistent.yaml"], "/nonexistent.yaml: cannot read snapshot: No such file or directory"),
])
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert whatif(capsys, *args) == (2, "", f"zonemedic: error: {message}\n")


def test_live_through_the_kubeconfig(twin: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Against the twin: deleting the master's zone policy opens the workers' flows to it."""
    code = main(["whatif", "--kubeconfig", str(twin["kubeconfig"]), "--config", str(twin["config"]),
                 "--delete", "CiliumNetworkPolicy/ml/zone-boundary-us-east-1b", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    result = orjson.loads(out.out)
    assert all(f["after"] == {"allowed": True} for f in result["flows"])
    opened = {(f["from"], f["to"], f["port"]) for f in result["flows"]}
    assert opened == {(f"ml/llm-finetune-worker-{i}", "ml/llm-finetune-master-0", port)
                      for i in range(4) for port in ("23456/TCP", "1024-65535/TCP")}


def test_the_policy_fix_admits_the_jobs_flows_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = whatif(capsys, "--policy-fix", "ml/resnet", "--json")
    assert code == 0, err
    body = orjson.loads(out)
    assert body["only_this_job"] is True
    spec = body["policy_fix"]["manifest"]["spec"]
    assert spec["endpointSelector"] == {"matchLabels": {"training.kubeflow.org/job-name": "resnet"}}
    assert spec["enableDefaultDeny"] == {"ingress": False, "egress": False}
    assert body["policy_fix"]["diff"].startswith("--- /dev/null\n+++ zonemedic-allow-resnet.yaml\n")
    assert "does not apply policies" in body["apply"]
    radius = body["blast_radius"]
    assert radius["jobs"] == [{"job": "PyTorchJob/ml/resnet", "before": "zone_split_blocked",
                               "after": "zone_split_degraded"}]
    assert {f["job"] for f in radius["flows"]} == {"PyTorchJob/ml/resnet"}
    # applied as a file, the same change: the job is no longer blocked
    fix = tmp_path / "fix.yaml"
    fix.write_text(body["policy_fix"]["yaml"])
    _, applied, _ = whatif(capsys, "--apply", str(fix), "--json")
    assert orjson.loads(applied) == radius


def test_a_deny_rule_cannot_be_opened_by_an_allow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deny = tmp_path / "deny.yaml"
    deny.write_text(yaml.safe_dump({
        "apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
        "metadata": {"name": "no-workers", "namespace": "ml"},
        "spec": {"endpointSelector": {"matchLabels": {"training.kubeflow.org/job-role": "master"}},
                 "ingressDeny": [{"fromEndpoints": [{"matchLabels": {
                     "training.kubeflow.org/replica-type": "worker"}}]}]},
    }))  # fmt: skip
    code = main(["whatif", "--snapshot", DUMP, "--snapshot", str(deny), "--config", CONFIG,
                 "--policy-fix", "ml/resnet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "is denied by CiliumNetworkPolicy/ml/no-workers (deny_rule at ingress): an allow " \
        "policy cannot open it" in err
