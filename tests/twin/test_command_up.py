"""`zonemedic twin up` as a subprocess: prints its addresses; kubectl sees each pod's node."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

KUBECTL = shutil.which("kubectl")


def test_twin_up_serves_api_and_metrics_and_kubectl_shows_nodes(tmp_path: Path) -> None:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "twin", "up", "--scenario", "seed-degraded",
         "--kubeconfig", str(kubeconfig), "--speed", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(4)]
        text = "".join(lines)
        api = re.search(r"twin API serving at (http://127\.0\.0\.1:\d+)", text)
        metrics = re.search(r"twin metrics at (http://127\.0\.0\.1:\d+/metrics)", text)
        assert api and metrics, text
        assert f"kubeconfig written to {kubeconfig}" in text
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        deadline = time.monotonic() + 20
        out = ""
        while time.monotonic() < deadline:
            out = subprocess.run([KUBECTL, "get", "pods", "-n", "ml", "-o", "wide"], env=env,
                                 capture_output=True, text=True, timeout=20, check=True).stdout  # fmt: skip
            if out.count("Running") == 5:
                break
            time.sleep(0.2)
        rows = [line.split() for line in out.splitlines()[1:]]
        assert len(rows) == 5, out
        header = out.splitlines()[0].split()
        node_col = header.index("NODE")
        nodes = {row[0]: row[node_col] for row in rows}
        assert nodes["llm-finetune-master-0"].startswith("cpu-b-")
        assert all(nodes[f"llm-finetune-worker-{i}"].startswith("gpu-a-") for i in range(4))
        with urllib.request.urlopen(metrics.group(1), timeout=10) as resp:
            body = resp.read().decode()
        assert "DCGM_FI_DEV_GPU_UTIL{" in body and "kube_pod_info{" in body
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "twin stopping" in err


def test_twin_up_refuses_bad_input(tmp_path: Path) -> None:
    for argv, needle in (
        (["--scenario", "no-such"], "unknown scenario 'no-such'"),
        (["--scenario", "seed-degraded", "--speed", "0"], "--speed 0.0: must be a positive number"),
        (["--scenario", "generated:nodes=x"], "nodes must be an integer"),
    ):
        done = subprocess.run([sys.executable, "-m", "agent.cli", "twin", "up", *argv],
                              capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
        assert done.returncode == 2
        assert needle in done.stderr
        assert "Traceback" not in done.stderr


def test_twin_up_help_lists_every_packaged_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli import main
    from agent.twin.scenario_registry import scenario_names

    with pytest.raises(SystemExit):
        main(["twin", "up", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    names = scenario_names()
    assert "lab" in names and "seed-blocked" in names
    listed = help_text.split("a packaged scenario (", 1)[1].split(")", 1)[0]
    assert listed.replace("- ", "-").split(", ") == names  # argparse may break a line at a hyphen
