"""`zonemedic whatif` on the example dump: deleting or applying a policy prints exactly the jobs and
required flows whose verdicts change; a change that opens nothing changes nothing; bad input is one
line, exit 2."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    required = {(f["from"], f["to"], f["port"]) for f in result["flows"] if f["flow"] == "required"}
    assert required == {(f"ml/resnet-worker-{i}", "ml/resnet-master-0", port)
                        for i in range(3) for port in ("23456/TCP", "1024-65535/TCP")}
    assert all(f["before"] == {"allowed": False, "hop": "ingress", "reason": "default_deny",
                               "policies": ["CiliumNetworkPolicy/ml/zone-b-only"]}
               and f["after"] == {"allowed": True} for f in result["flows"])
    # beyond the jobs' required flows: every pod to the port the master declares, the other
    # job's pods too (they are no required flow of anyone's)
    declared = {(f["from"], f["to"], f["port"], f["job"]) for f in result["flows"]
                if f["flow"] == "declared_port"}
    assert declared == {("ml/bert-master-0", "ml/resnet-master-0", "23456/TCP", None),
                        ("ml/bert-worker-0", "ml/resnet-master-0", "23456/TCP", None)} | {
        (f"ml/resnet-worker-{i}", "ml/resnet-master-0", "23456/TCP", "PyTorchJob/ml/resnet")
        for i in range(3)}
    assert result["declared_port_flows_changed"] == 5 and result["flows_listed_complete"]


def test_applying_an_allow_policy_unblocks_the_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = whatif(capsys, "--apply", str(_allow_all_in_ml(tmp_path / "allow.yaml")))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("what if: 2 job(s), 18 required pod-pair flow(s) checked; 1 job "
                               "verdict(s)")
    assert "  job PyTorchJob/ml/resnet: zone_split_blocked -> zone_split_degraded" in lines


def test_a_change_elsewhere_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = whatif(capsys, "--apply", str(_allow_all_in_ml(tmp_path / "a.yaml", namespace="web")),
                          "--json")
    result = orjson.loads(out)
    # the policy selects no pod of the dump: nothing is touched, nothing is compared
    assert (code, result["jobs"], result["flows"], result["touched_pods"]) == (0, [], [], 0)


def test_moving_the_job_into_one_zone_heals_it_and_opens_its_flows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = whatif(capsys, "--move", "ml/resnet", "--zone", "zone-a", "--json")
    assert code == 0, err
    result = orjson.loads(out)
    assert result["jobs"] == [{"job": "PyTorchJob/ml/resnet", "before": "zone_split_blocked",
                               "after": "healthy"}]
    required = [f for f in result["flows"] if f["flow"] == "required"]
    assert required and all(f["after"] == {"allowed": True} for f in required)
    assert {f["job"] for f in required} == {"PyTorchJob/ml/resnet"}
    # the move has a cost beyond the job: the web pod (zone-b) loses the master's port
    lost = [(f["from"], f["to"], f["port"]) for f in result["flows"] if not f["after"]["allowed"]]
    assert lost == [("ml/nginx-7c5b4-abcde", "ml/resnet-master-0", "23456/TCP")]


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
    opened = {(f["from"], f["to"], f["port"]) for f in result["flows"] if f["flow"] == "required"}
    assert opened == {(f"ml/llm-finetune-worker-{i}", "ml/llm-finetune-master-0", port)
                      for i in range(4) for port in ("23456/TCP", "1024-65535/TCP")}


def test_the_policy_fix_admits_the_jobs_flows_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = whatif(capsys, "--policy-fix", "ml/resnet", "--json")
    assert code == 0, err
    body = orjson.loads(out)
    assert body["only_this_job"] is True and body["policy_fix"]["exact"] is True
    fix = body["policy_fix"]
    assert fix["kind"] == "CiliumNetworkPolicy" and len(fix["manifests"]) == 1
    specs = fix["manifest"]["specs"]
    job = {"training.kubeflow.org/job-name": "resnet"}
    # ingress only (both zone policies leave egress open), at the master from the workers on the
    # master's port, and at every pod from every pod on the collective range
    assert specs == [
        {"endpointSelector": {"matchLabels": {**job, "training.kubeflow.org/job-role": "master"}},
         "enableDefaultDeny": {"ingress": False, "egress": False},
         "ingress": [{"fromEndpoints": [{"matchLabels": {
             **job, "training.kubeflow.org/replica-type": "worker"}}],
             "toPorts": [{"ports": [{"port": "23456", "protocol": "TCP"}]}]}]},
        {"endpointSelector": {"matchLabels": job},
         "enableDefaultDeny": {"ingress": False, "egress": False},
         "ingress": [{"fromEndpoints": [{"matchLabels": job}],
                      "toPorts": [{"ports": [{"port": "1024", "endPort": 65535,
                                              "protocol": "TCP"}]}]}]},
    ]
    assert fix["diff"].startswith("--- /dev/null\n+++ zonemedic-allow-resnet.yaml\n")
    assert body["apply"].startswith("kubectl apply -f zonemedic-allow-resnet.yaml (zonemedic does "
                                    "not apply network policies: network policy belongs to the "
                                    "security team")
    radius = body["blast_radius"]
    assert radius["jobs"] == [{"job": "PyTorchJob/ml/resnet", "before": "zone_split_blocked",
                               "after": "zone_split_degraded"}]
    assert {f["job"] for f in radius["flows"]} == {"PyTorchJob/ml/resnet"}
    assert fix["proof"]["required_flows_changed"] == fix["proof"]["denied_required_flows"] == 9
    assert fix["proof"]["touched_outside_job"] == [] and fix["proof"]["other_flows_changed"] == 0
    # applied as a file, the same change: the job is no longer blocked
    path = tmp_path / "fix.yaml"
    path.write_text(fix["yaml"])
    _, applied, _ = whatif(capsys, "--apply", str(path), "--json")
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


def _edited_dump(tmp_path: Path, edit: Callable[[dict[str, Any]], Any], *, drop: tuple[str, ...] = ()) -> str:
    """The example dump with `edit(resnet PyTorchJob's Worker template)` applied, and the
    objects named in `drop` left out."""
    dump = yaml.safe_load(Path(DUMP).read_text())
    dump["items"] = [i for i in dump["items"] if i["metadata"]["name"] not in drop]
    job = next(i for i in dump["items"] if i["kind"] == "PyTorchJob" and i["metadata"]["name"] == "resnet")
    edit(job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump(dump))
    return str(path)


def test_the_move_is_the_planners_patches_toleration_included(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without their toleration the workers fit on no node of zone-b (its one node is a tainted
    GPU node); the planner's patch adds it (read from the node's taint), and the rehearsed pods
    land there with it."""
    dump = _edited_dump(tmp_path, lambda t: t["spec"].pop("tolerations"),
                        drop=("cpu-b1", "nginx-7c5b4-abcde"))
    code = main(["whatif", "--snapshot", dump, "--config", CONFIG, "--move", "ml/resnet",
                 "--zone", "zone-b", "--json"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    result = orjson.loads(out.out)
    move = result["move"]
    assert move["zone"] == "zone-b" and move["job"] == "PyTorchJob/ml/resnet"
    assert "+++ PyTorchJob ml/resnet Worker (planned)" in move["diff"]
    assert "+  tolerations:" in move["diff"] and "-    zone: zone-a\n+    zone: zone-b" in move["diff"]
    assert set(move["placement"].values()) == {"gpu-b1"}
    assert result["jobs"] == [{"job": "PyTorchJob/ml/resnet", "before": "zone_split_blocked",
                               "after": "healthy"}]


def test_a_move_the_planner_refuses_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spread = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
              "whenUnsatisfiable": "DoNotSchedule",
              "labelSelector": {"matchLabels": {"training.kubeflow.org/job-name": "resnet"}}}
    dump = _edited_dump(tmp_path, lambda t: t["spec"].update(topologySpreadConstraints=[spread]))
    code = main(["whatif", "--snapshot", dump, "--config", CONFIG, "--move", "ml/resnet",
                 "--zone", "zone-a"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("zonemedic: error: --move: the planner's fix would not run: Worker: its "
                          "topologySpreadConstraint on topology.kubernetes.io/zone")


def test_a_live_move_plans_from_the_objects_the_preview_reads(
    twin: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Against the twin: the job moved to us-east-1a with the planner's patches (read-only: the
    job, its pods, the nodes) heals it, and the twin's job is untouched."""
    code = main(["whatif", "--kubeconfig", str(twin["kubeconfig"]), "--config", str(twin["config"]),
                 "--move", "ml/llm-finetune", "--zone", "us-east-1a", "--json"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    result = orjson.loads(out.out)
    assert result["jobs"] == [{"job": "PyTorchJob/ml/llm-finetune", "before": "zone_split_blocked",
                               "after": "healthy"}]
    assert "topology.kubernetes.io/zone: us-east-1a" in result["move"]["diff"]
    assert all(node.startswith("gpu-a-") for node in result["move"]["placement"].values())
