"""`zonemedic twin apiserver`: serves until interrupted, writes a kubeconfig, refuses bad flags."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.cli import main

RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: ml}
rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: ml}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects: [{kind: User, name: alice}, {kind: ServiceAccount, name: agent}]
"""


def _kubectl(kubeconfig: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECACHEDIR": str(cache),
           "HOME": str(cache)}
    return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True,
                          timeout=30, check=False)


def test_apiserver_command_serves_with_tokens_and_rbac(tmp_path: Path) -> None:
    rbac = tmp_path / "rbac.yaml"
    rbac.write_text(RBAC)
    kubeconfig = tmp_path / "admin.kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "twin", "apiserver", "--kubeconfig", str(kubeconfig),
         "--token", "adm", "--identity", "alice-t=alice,team", "--service-account",
         "sa-t=ml/agent", "--rbac", str(rbac)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("twin apiserver serving at https://127.0.0.1:")
        assert "RBAC objects loaded: 2" in proc.stdout.readline()
        url = first.split()[-1]
        assert _kubectl(kubeconfig, tmp_path, "get", "ns", "ml", "-o", "name").stdout.strip() \
            == "namespace/ml"
        alice = tmp_path / "alice.kubeconfig"
        alice.write_text(kubeconfig.read_text().replace("token: adm", "token: alice-t"))
        assert url in alice.read_text()
        assert _kubectl(alice, tmp_path, "auth", "can-i", "list", "pods", "-n",
                        "ml").stdout.strip() == "yes"
        denied = _kubectl(alice, tmp_path, "get", "pods", "-n", "default")
        assert denied.returncode == 1 and "Forbidden" in denied.stderr
        agent = tmp_path / "agent.kubeconfig"
        agent.write_text(kubeconfig.read_text().replace("token: adm", "token: sa-t"))
        assert _kubectl(agent, tmp_path, "auth", "can-i", "get", "pods", "-n",
                        "ml").stdout.strip() == "yes"
        whoami = _kubectl(agent, tmp_path, "auth", "can-i", "get", "pods", "-n", "default")
        assert whoami.stdout.strip() == "no"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
            assert proc.stdout is not None and proc.stderr is not None
            proc.stdout.close()
            proc.stderr.close()
    assert code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--identity", "no-equals-sign"], "expected TOKEN=USER"),
        (["--identity", "t=,group"], "user name is empty"),
        (["--service-account", "t=just-a-name"], "expected TOKEN=NAMESPACE/NAME"),
        (["--rbac", "/nonexistent/rbac.yaml"], "cannot read RBAC file"),
        (["--port", "70000"], "must be between 0 and 65535"),
    ],
)
def test_bad_flags_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        args: list[str], message: str) -> None:
    started = time.monotonic()
    code = main(["twin", "apiserver", "--kubeconfig", str(tmp_path / "kc"), *args])
    assert code == 2 and time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "kc").exists()
