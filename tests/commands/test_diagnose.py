"""`zonemedic diagnose` end to end: JSON and table output, warnings, colour, and bad input (exit 2)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.cli import main
from agent.twin import kubeconfig
from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from tests.support.objects import as_list, job_pod, node, pod, zone_only
from tests.twin.twin_fixtures import fast

ROOT = Path(__file__).resolve().parents[2]

ZONES = {"a1": "zone-a", "b1": "zone-b"}


def _cluster() -> list[dict[str, Any]]:
    items = [node("a1", "zone-a", gpus=8), node("b1", "zone-b", gpus=8), zone_only("zone-a"), zone_only("zone-b")]
    items.append(
        job_pod(
            "PyTorchJob",
            "split",
            "master",
            0,
            node_name="b1",
            extra={"zone": "zone-b"},
            ports=[("pytorchjob-port", 23456)],
            coordinator=True,
        )
    )
    items += [
        job_pod("PyTorchJob", "split", "worker", i, node_name="a1", extra={"zone": "zone-a"})
        for i in range(2)
    ]
    items.append(job_pod("TFJob", "fine", "chief", 0, node_name="a1", extra={"zone": "zone-a"}))
    items.append(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "ml"}}
    )
    items.append(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "t", "namespace": "ml"}}
    )
    return items


def _write(tmp_path: Path, name: str, content: Any) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(yaml.safe_dump(content))
    return path


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = _write(tmp_path, "c.json", as_list(_cluster()))
    assert main(["diagnose", "--snapshot", str(snap), "--output", "json"]) == 0
    out, err = capsys.readouterr()
    body = json.loads(out)
    assert list(body) == ["findings"]
    by_name = {f["job"]["name"]: f for f in body["findings"]}
    assert by_name["fine"]["verdict"] == "healthy"
    split = by_name["split"]
    assert split["job"] == {"kind": "PyTorchJob", "namespace": "ml", "name": "split"}
    assert (split["verdict"], split["remediable"], split["target_zone"]) == (
        "zone_split_blocked",
        True,
        "zone-a",
    )
    assert split["zones"] == {"zone-a": 2, "zone-b": 1}
    assert split["coordinator"] == {"pod": "split-master-0", "zone": "zone-b"}
    assert split["impact"]["gpus_outside_target"] == 1
    assert set(split["denied_flows"][0]) == {
        "from_pod",
        "to_pod",
        "port",
        "protocol",
        "hop",
        "reason",
        "policies",
    }
    assert err == "zonemedic: warning: skipped 2 object(s) of unsupported kind v1 Service\n"


def test_several_snapshots_and_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = _cluster()
    first = _write(tmp_path, "nodes.yaml", "\n---\n".join(yaml.safe_dump(i) for i in items[:4]))
    second = _write(tmp_path, "pods.json", as_list(items[4:]))
    config = _write(tmp_path, "c.yaml", {"pod_zone_label": "", "protected_namespaces": ["ml"]})
    assert (
        main(
            [
                "diagnose",
                "--snapshot",
                str(first),
                "--snapshot",
                str(second),
                "--config",
                str(config),
                "--output",
                "json",
            ]
        )
        == 0
    )
    split = next(
        f for f in json.loads(capsys.readouterr().out)["findings"] if f["job"]["name"] == "split"
    )
    # no mirror label: moving pods cannot fix it; namespace protected anyway
    assert (split["verdict"], split["remediable"], split["target_zone"]) == (
        "policy_blocked",
        False,
        None,
    )


def test_table_output_without_tty_has_no_colour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = _write(tmp_path, "c.json", as_list(_cluster()))
    assert main(["diagnose", "--snapshot", str(snap)]) == 0
    out = capsys.readouterr().out
    assert "zone_split_blocked" in out and "denied split-worker-0 -> split-master-0" in out
    assert "\x1b[" not in out


def test_names_from_the_dump_are_printable_in_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dump is outside input: a zone or node name holding escape sequences or a newline is
    shown escaped, on its own row, never obeyed by the terminal."""
    items = _cluster()
    for item in items:
        if item["kind"] == "Node" and item["metadata"]["name"] == "b1":
            item["metadata"]["labels"]["topology.kubernetes.io/zone"] = "zone-b\x1b[2J\nforged"
        if item["kind"] == "Pod" and item["spec"].get("nodeName") == "b1":
            item["metadata"]["labels"]["zone"] = "zone-b\x1b[2J\nforged"
    snap = _write(tmp_path, "c.json", as_list(items))
    assert main(["diagnose", "--snapshot", str(snap)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and not any(line.startswith("forged") for line in out.splitlines())
    assert "zone-b\\x1b[2J\\nforged" in out


def _zonemedic() -> list[str]:
    script = Path(sys.executable).parent / "zonemedic"
    return [str(script)] if script.exists() else [sys.executable, "-m", "agent.cli"]


@pytest.mark.parametrize(("no_color", "coloured"), [(False, True), (True, False)])
def test_colour_on_a_tty_unless_no_color(tmp_path: Path, no_color: bool, coloured: bool) -> None:
    import pty

    snap = _write(tmp_path, "c.json", as_list(_cluster()))
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    if no_color:
        env["NO_COLOR"] = "1"
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*_zonemedic(), "diagnose", "--snapshot", str(snap)],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    text = b"".join(chunks).decode()
    assert "zone_split_blocked" in text
    assert ("\x1b[" in text) is coloured


def _gpus(value: object) -> str:
    item = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
            "status": {"allocatable": {"nvidia.com/gpu": value}}}
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [item]})


# Items that are objects, each holding ten aliases of the one before: streamed item by item, the
# expansion is refused as soon as it passes the cap, before the later items are built.
ALIAS_BOMB = (
    "kind: List\nitems:\n"
    "- {apiVersion: v1, kind: ConfigMap, metadata: {name: c0}, data: {v: &a0 [x, x, x, x, x, x, x, x, x, x]}}\n"
    + "".join(
        f"- {{apiVersion: v1, kind: ConfigMap, metadata: {{name: c{i}}}, "
        f"data: {{v: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]}}}}\n"
        for i in range(1, 9)
    )
)

BAD_POD = pod("p", node_name="a1")
BAD_POD["metadata"]["labels"] = {"app": 7}


@pytest.mark.parametrize(
    ("snapshot", "config", "message"),
    [
        (None, None, r"missing\.yaml: cannot read snapshot"),
        ("kind: List\nitems:\n- {kind: Pod\n", None, r"bad\.yaml: line \d+: invalid YAML"),
        (
            as_list([node("a1", "z", gpus=8), BAD_POD]),
            None,
            r"bad\.yaml: item 1 \(Pod ml/p\): metadata\.labels\.app: expected a string value",
        ),
        (
            as_list([{"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "ml"}}]),
            None,
            r"bad\.yaml: item 0 \(Pod\): metadata\.name: required",
        ),
        (
            as_list(
                [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {"name": "n"},
                        "status": {"allocatable": {"nvidia.com/gpu": "lots"}},
                    }
                ]
            ),
            None,
            r"item 0 \(Node n\): status\.allocatable\.nvidia\.com/gpu: expected a whole number",
        ),
        (
            as_list([pod("p") | {"spec": {"containers": [{"ports": [{"containerPort": "x"}]}]}}]),
            None,
            r"item 0 \(Pod ml/p\): spec\.containers\[0\]\.ports\[0\]\.containerPort",
        ),
        (as_list([]), "pod_zone_labels: zone\n", r"pod_zone_labels: unknown key"),
        (
            as_list([]),
            "protected_namespaces: kube-system\n",
            r"protected_namespaces: expected a list",
        ),
        (
            as_list([]),
            "groups:\n- selector: {app: x}\n  coordinator: {r: c}\n  workers: {r: w}\n",
            r"groups\[0\]\.name: required key is missing",
        ),
        (
            as_list([]),
            "groups:\n- {name: g, selector: [app], coordinator: {}, workers: {}}\n",
            r"groups\[0\]\.selector: expected a mapping",
        ),
        (as_list([]), "groups: [\n", r"c\.yaml:? line \d+:? invalid YAML"),
        # hostile input: alias bombs under a list, recursive anchors, deep nesting, bad numbers
        (ALIAS_BOMB, None, r"bad\.yaml: line \d+: aliases expand to more than 100000 nodes"),
        ("kind: List\nitems: &a [*a]\n", None, r"bad\.yaml: line 2: alias \*a refers to a node that contains it"),
        ("kind: List\nitems:\n- &p {kind: Pod, spec: *p}\n", None, r"bad\.yaml: line 3: alias \*p refers"),
        ("kind: List\nitems: " + "[" * 990 + "]" * 990, None, r"bad\.yaml: line 2: nested deeper than 100 levels"),
        ("kind: List\nitems:\n" + "".join("  " * i + "-\n" for i in range(1, 200)), None, r"bad\.yaml: line \d+: nested deeper than 100 levels"),
        (("[" * 900 + "]" * 900).encode(), None, r"bad\.yaml: item 0: lists nested deeper than 16 levels"),
        (b"[" * 1100 + b"]" * 1100, None, r"bad\.yaml: line 1: (nested deeper than 100 levels|invalid YAML)"),
        (b'{"kind": "List", "items": ' + b"[" * 500 + b"]" * 500 + b"}", None,
         r"bad\.yaml: item 0: lists nested deeper than 16 levels"),
        (_gpus(-1), None, r"nvidia\.com/gpu: must be from 0 to 1000000, got -1"),
        (_gpus("-1"), None, r"nvidia\.com/gpu: expected a whole number from 0 to 1000000, got '-1'"),
        (_gpus("²"), None, r"nvidia\.com/gpu: expected a whole number from 0 to 1000000, got '²'"),
        (_gpus("٨"), None, r"nvidia\.com/gpu: expected a whole number from 0 to 1000000, got '٨'"),
        (_gpus(2**64), None, r"nvidia\.com/gpu: expected a whole number from 0 to 1000000"),  # orjson: a float
        ("kind: List\nitems: [{apiVersion: v1, kind: Node, metadata: {name: n}, status: {allocatable: {nvidia.com/gpu: 99999999999999999999999}}}]\n",
         None, r"nvidia\.com/gpu: must be from 0 to 1000000"),
        (as_list([]), "price_per_gb: -0.01\n", r"price_per_gb: must be at least 0"),
        (as_list([]), "price_per_gb: .nan\n", r"price_per_gb: expected a number"),
        (as_list([]), "bytes_per_step: 1" + "0" * 30 + "\n", r"bytes_per_step: must be at most"),
        (as_list([]), "- a\n- b\n", r"expected a mapping at the top level"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    snapshot: Any,
    config: str | None,
    message: str,
) -> None:
    args = ["diagnose", "--snapshot"]
    args.append(
        str(_write(tmp_path, "bad.yaml", snapshot))
        if snapshot is not None
        else str(tmp_path / "missing.yaml")
    )
    if config is not None:
        args += ["--config", str(_write(tmp_path, "c.yaml", config))]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("zonemedic: error: ")
    assert "Traceback" not in err
    assert re.search(message, err), err


def test_bad_input_through_the_real_process(tmp_path: Path) -> None:
    bad = _write(
        tmp_path,
        "bad.yaml",
        "kind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: [x]}}\n",
    )
    proc = subprocess.run(
        [*_zonemedic(), "diagnose", "--snapshot", str(bad)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("zonemedic: error:")
    assert "metadata.name: expected a string" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_the_readme_example(capsys: pytest.CaptureFixture[str]) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    args = [
        "diagnose",
        "--snapshot",
        str(examples / "split-blocked.yaml"),
        "--config",
        str(examples / "split-blocked.config.yaml"),
    ]
    assert main([*args, "--output", "json"]) == 0
    findings = {f["job"]["name"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert findings["resnet"]["verdict"] == "zone_split_blocked"
    assert findings["resnet"]["target_zone"] == "zone-a"
    assert findings["resnet"]["impact"]["cross_zone_bytes_per_step"] == 250_000_000
    assert findings["bert"]["verdict"] == "healthy"
    assert main(args) == 0
    assert "~0.25 GB cross-zone per step ($0.005/step)" in capsys.readouterr().out


def test_load_snapshot_restores_the_garbage_collector(tmp_path: Path) -> None:
    import gc

    from agent.commands.diagnose import load_snapshot
    from agent.errors import SnapshotError

    good = _write(tmp_path, "c.json", as_list(_cluster()))
    bad = _write(tmp_path, "bad.yaml", "kind: List\nitems: [3]\n")
    assert gc.isenabled()
    try:
        assert len(load_snapshot([good]).state.pods) == 4
        assert gc.isenabled()
        with pytest.raises(SnapshotError, match="item 0"):
            load_snapshot([bad])
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_an_endless_input_is_refused_after_the_limit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--snapshot", "/dev/zero", "--max-input-size", "1M"]) == 2
    _, err = capsys.readouterr()
    assert err == (
        "zonemedic: error: /dev/zero: the snapshot input is larger than 1048576 bytes "
        "(raise --max-input-size)\n"
    )


def test_the_input_limit_counts_every_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _write(tmp_path, "a.json", as_list(_cluster()))
    second = _write(tmp_path, "b.json", as_list(_cluster()))
    size = first.stat().st_size
    limit = str(size + size // 2)  # room for one file, not two
    assert main(["diagnose", "--snapshot", str(first), "--max-input-size", limit, "--output", "json"]) == 0
    capsys.readouterr()
    args = ["diagnose", "--snapshot", str(first), "--snapshot", str(second), "--max-input-size", limit]
    assert main(args) == 2
    _, err = capsys.readouterr()
    assert err.startswith(f"zonemedic: error: {second}: the snapshot input is larger than")


@pytest.mark.parametrize("size", ["0", "lots", "١M", "-5", "2T"])
def test_a_bad_input_limit_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], size: str
) -> None:
    snapshot = _write(tmp_path, "a.json", as_list(_cluster()))
    assert main(["diagnose", "--snapshot", str(snapshot), "--max-input-size", size]) == 2
    _, err = capsys.readouterr()
    assert err.startswith("zonemedic: error: --max-input-size: ") and err.count("\n") == 1


# --------------------------------------------------------------------------------------------
# what people type first: a positional FILE, the agent's `diagnosis:` section, an undeclared group


def _group_cluster() -> list[dict[str, Any]]:
    """A coordinator Deployment's pod in zone-b and batch Job workers in zone-a, requesting no
    GPUs (the seed lab's workload): not a Kubeflow job, found only once declared."""
    items = [node("a1", "zone-a", gpus=8), node("b1", "zone-b", gpus=8)]
    items.append(pod("lab-head", node_name="b1", labels={"app": "lab", "role": "head"},
                     owner=("apps/v1", "ReplicaSet", "lab-head-5d8")))
    items += [pod(f"lab-worker-{i}", node_name="a1", labels={"app": "lab", "role": "worker"},
                  owner=("batch/v1", "Job", "lab-workers")) for i in range(2)]
    return items


GROUP = "groups: [{name: lab, namespace: ml, selector: {app: lab}, coordinator: {role: head}, " \
    "workers: {role: worker}}]\n"


def test_a_positional_file_is_the_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = _write(tmp_path, "c.json", as_list(_cluster()))
    assert main(["diagnose", "--snapshot", str(snap), "--output", "json"]) == 0
    flagged = capsys.readouterr().out
    assert main(["diagnose", str(snap), "--json"]) == 0
    assert capsys.readouterr().out == flagged
    nodes, pods = as_list(_cluster()[:4]), as_list(_cluster()[4:])
    a, b = _write(tmp_path, "nodes.json", nodes), _write(tmp_path, "pods.json", pods)
    assert main(["diagnose", str(a), "--snapshot", str(b), "--json"]) == 0  # both ways at once
    assert json.loads(capsys.readouterr().out) == json.loads(flagged)


def test_no_file_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("zonemedic: error: diagnose: give a snapshot file: zonemedic diagnose "
                          "FILE") and err.count("\n") == 1


def test_the_config_may_be_the_agents_diagnosis_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = _write(tmp_path, "c.yaml", as_list(_group_cluster()))
    bare = _write(tmp_path, "bare.yaml", GROUP)
    wrapped = _write(tmp_path, "agent.yaml", "cluster_name: lab\ndiagnosis:\n  " + GROUP)
    outputs = []
    for config in (bare, wrapped):
        assert main(["diagnose", str(snap), "--config", str(config), "--json"]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1]
    assert [(f["job"]["kind"], f["job"]["name"]) for f in outputs[0]["findings"]] == [("Group", "lab")]
    mixed = _write(tmp_path, "mixed.yaml", "pod_zone_label: zone\ndiagnosis:\n  " + GROUP)
    assert main(["diagnose", str(snap), "--config", str(mixed)]) == 2
    err = capsys.readouterr().err
    assert err == (f"zonemedic: error: {mixed}: diagnosis keys both at the top level "
                   "(pod_zone_label) and under diagnosis:; write them in one place\n")
    bad_agent_key = _write(tmp_path, "typo.yaml", "http: {port: 70000}\ndiagnosis:\n  " + GROUP)
    assert main(["diagnose", str(snap), "--config", str(bad_agent_key)]) == 2
    assert "http.port: must be at most 65535" in capsys.readouterr().err


def test_no_training_job_found_says_that_groups_must_be_declared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = _write(tmp_path, "c.yaml", as_list(_group_cluster()))
    assert main(["diagnose", str(snap)]) == 0
    out, err = capsys.readouterr()
    assert out == "no training jobs with live pods found\n"
    assert err.startswith("zonemedic: note: Kubeflow jobs are found by their pods' labels; a "
                          "coordinator/worker group")
    assert "must be declared in diagnosis.groups of the --config file" in err
    other = _write(tmp_path, "other.yaml", GROUP.replace("app: lab", "app: elsewhere"))
    assert main(["diagnose", str(snap), "--config", str(other), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"findings": []}
    assert err == ("zonemedic: note: no live pods match the declared group(s) lab "
                   "(diagnosis.groups: check their namespace and selector labels against the "
                   "pods)\n")


TRAINER_DUMP = ("nodes,pods,trainjobs,trainingruntimes,clustertrainingruntimes,jobsets,"
                "networkpolicies,ciliumnetworkpolicies")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize(
    ("scenario", "running", "job", "verdict", "coordinator"),
    [
        ("trainjob", 4, {"kind": "TrainJob", "namespace": "ml", "name": "llm-pretrain"},
         "zone_split_degraded", "llm-pretrain-node-0-0-"),
        ("trainjob-mpi", 5, {"kind": "TrainJob", "namespace": "ml", "name": "mpi-pretrain"},
         "zone_split_blocked", "mpi-pretrain-launcher-0-0-"),
        ("jobset", 4, {"kind": "JobSet", "namespace": "ml", "name": "pytorch-ddp"},
         "zone_split_degraded", "pytorch-ddp-workers-0-0-"),
    ],
)
def test_a_kubectl_dump_of_a_trainer_cluster(
    tmp_path: Path, scenario: str, running: int, job: dict[str, str], verdict: str, coordinator: str,
) -> None:
    """The README's dump command through real kubectl against the twin, then the real process."""
    assert f"kubectl get {TRAINER_DUMP} -A -o yaml" in (ROOT / "README.md").read_text()
    with TwinCluster(fast(scenario)) as cluster:
        path = kubeconfig.write(tmp_path / "kubeconfig", cluster.serve_api().url)

        def bound() -> bool:
            found = cluster.store.list(lookup("pods"), namespace="ml")[0]
            return sum(1 for p in found if p["spec"].get("nodeName")
                       and p["status"].get("phase") == "Running") >= running

        assert cluster.wait_until(bound, timeout=30)
        env = {**os.environ, "KUBECONFIG": str(path), "KUBECACHEDIR": str(tmp_path / "cache")}
        dump = subprocess.run(["kubectl", "get", TRAINER_DUMP, "-A", "-o", "yaml"], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
    assert dump.returncode == 0, dump.stderr
    snapshot = _write(tmp_path, "cluster.yaml", dump.stdout)
    script = Path(sys.executable).parent / "zonemedic"
    done = subprocess.run([str(script), "diagnose", str(snapshot), "--output", "json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "unsupported kind" not in done.stderr  # the runtimes are known
    (finding,) = json.loads(done.stdout)["findings"]
    assert finding["job"] == job and finding["verdict"] == verdict
    assert finding["coordinator"]["pod"].startswith(coordinator)
    assert finding["remediable"] is True and finding["target_zone"] == "us-east-1a"
