"""The pods' streaming subresources against the twin: `kubectl logs` written from the training
model (connection attempts, the crash, training progress, `-p`, `-f`, `--tail`, `--since`,
`--timestamps`), and `exec`, `attach`, `port-forward`, `top` answered as a real server answers for
what it cannot do, saying the twin does not serve it. Real kubectl as a subprocess; the pure log
renderer table-driven."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.twin import kubeconfig
from agent.twin.apierror import ApiError
from agent.twin.apiquery import Query
from agent.twin.apiserver import ApiServer
from agent.twin.cluster import TwinCluster
from agent.twin.podlogs import (
    LogLine,
    LogOptions,
    container_of,
    current_lines,
    previous_lines,
    render,
    select,
)
from agent.twin.resources import lookup
from agent.twin.store import Store
from agent.twin.training import JobPhase
from agent.twin.training_runtime import PodActivity
from tests.support import objects
from tests.support.waiting import wait
from tests.twin import twin_fixtures as fixtures

KUBECTL = shutil.which("kubectl")
PODS = lookup("pods")
T0 = 1_800_000_000.0  # wall seconds
START = "2027-01-15T08:00:00Z"  # T0


def _pod_in(state: dict[str, Any], *, last: dict[str, Any] | None = None,
            containers: tuple[str, ...] = ("pytorch",), node: str = "gpu-a-0") -> dict[str, Any]:
    """Running pod `w-0` whose first container is in `state` (and was in `last` before)."""
    status = {"name": containers[0], "state": state, "restartCount": 1 if last else 0,
              "lastState": {"terminated": last} if last else {}}
    return objects.pod("w-0", uid="u", node_name=node, kind=False, phase="Running",
                       status={"containerStatuses": [status]},
                       containers=[{"name": c} for c in containers])


def _activity(**changes: Any) -> PodActivity:
    base = PodActivity(job="llm", phase=JobPhase.BLOCKED, ranks=4, participant=True,
                       dials=(("llm-master-0", 23456),), refused=(), attempts=2, crashed=None,
                       exits=True, connect_attempts=3, retry_seconds=5.0, step_seconds=None,
                       utilization=0.0, steps=0.0, target=None, speed=1.0)
    return replace(base, **changes)


def _texts(lines: list[LogLine]) -> list[str]:
    return [line.text for line in lines]


def test_a_blocked_rank_logs_its_connection_attempts() -> None:
    lines = current_lines(_pod_in({"running": {"startedAt": START}}), "pytorch", _activity(),
                          now=T0 + 12)
    assert _texts(lines)[1:] == [
        "rendezvous: connecting to llm-master-0:23456",
        "rendezvous: connect() to llm-master-0:23456 timed out (attempt 1 of 3)",
        "rendezvous: connect() to llm-master-0:23456 timed out (attempt 2 of 3)",
    ]
    assert lines[0].text.startswith("[twin] container pytorch of pod w-0 started: its workload is "
                                    "simulated (job llm)")
    assert [line.at - T0 for line in lines] == [0, 0, 5, 10]
    waiting = current_lines(_pod_in({"running": {"startedAt": START}}), "pytorch",
                            _activity(exits=False, attempts=1), now=T0 + 6)
    assert _texts(waiting)[-1] == ("rendezvous: connect() to llm-master-0:23456 timed out "
                                   "(attempt 1), retrying in 5s")


def test_a_crashed_run_is_the_log_while_the_container_waits_to_restart() -> None:
    crash = "RuntimeError: connect() to llm-master-0:23456 timed out after 3 attempts"
    last = {"exitCode": 1, "reason": "Error", "message": crash, "startedAt": START,
            "finishedAt": "2027-01-15T08:00:15Z"}
    pod = _pod_in({"waiting": {"reason": "CrashLoopBackOff"}}, last=last)
    activity = _activity(dials=(), attempts=0, crashed=("llm-master-0", 23456, 3))
    lines = current_lines(pod, "pytorch", activity, now=T0 + 20)
    assert lines == previous_lines(pod, "pytorch", activity)
    assert _texts(lines)[1:] == [
        "rendezvous: connecting to llm-master-0:23456",
        *(f"rendezvous: connect() to llm-master-0:23456 timed out (attempt {i} of 3)"
          for i in (1, 2, 3)),
        crash,
    ]
    assert [line.at - T0 for line in lines] == [0, 0, 5, 10, 15, 15]


def test_a_training_rank_logs_its_progress() -> None:
    activity = _activity(phase=JobPhase.TRAINING, dials=(), attempts=0, step_seconds=1.25,
                         utilization=0.85, steps=100.4, target=500)
    lines = current_lines(_pod_in({"running": {"startedAt": START}}), "pytorch", activity,
                          now=T0 + 130)
    texts = _texts(lines)
    assert texts[1] == "rendezvous complete: 4 ranks"
    assert texts[2:] == [f"step {s}/500  step_time 1.25s  gpu_util 85%" for s in range(8, 101, 8)]
    assert lines[-1].at == pytest.approx(T0 + 130 - 0.4 * 1.25)
    later = current_lines(_pod_in({"running": {"startedAt": START}}), "pytorch",
                          replace(activity, steps=200.4), now=T0 + 255)
    assert set(texts[2:]) <= set(_texts(later))  # the same lines at every look (for -f)


@pytest.mark.parametrize(
    ("pod", "container", "previous", "message"),
    [
        (_pod_in({"waiting": {"reason": "ContainerCreating"}}), None, False,
         'container "pytorch" in pod "w-0" is waiting to start: ContainerCreating'),
        (_pod_in({"running": {"startedAt": START}}), None, True,
         'previous terminated container "pytorch" in pod "w-0" not found'),
        (_pod_in({"running": {}}, containers=("a", "b")), None, False,
         "a container name must be specified for pod w-0, choose one of: [a b]"),
        (_pod_in({"running": {}}), "nope", False, "container nope is not valid for pod w-0"),
    ],
)
def test_log_errors_are_a_real_servers(pod: dict[str, Any], container: str | None,
                                       previous: bool, message: str) -> None:
    with pytest.raises(ApiError) as raised:
        name = container_of(pod, container)
        (previous_lines(pod, name, None) if previous
         else current_lines(pod, name, None, now=T0))
    assert (raised.value.code, raised.value.message) == (400, message)


def test_options_select_and_render() -> None:
    lines = [LogLine(T0 + i, f"line {i}") for i in range(10)]
    options = LogOptions.from_query(Query({"tailLines": ["3"], "timestamps": ["true"]}))
    assert render(select(lines, options, now=T0 + 10), options) == (
        b"2027-01-15T08:00:07.000000000Z line 7\n2027-01-15T08:00:08.000000000Z line 8\n"
        b"2027-01-15T08:00:09.000000000Z line 9\n")
    since = LogOptions.from_query(Query({"sinceSeconds": ["2"], "limitBytes": ["10"]}))
    assert render(select(lines, since, now=T0 + 10), since) == b"line 8\nlin"
    with pytest.raises(ApiError) as raised:
        LogOptions.from_query(Query({"tailLines": ["-1"]}))
    assert raised.value.code == 422 and "tailLines" in raised.value.message


# --------------------------------------------------------------------------------------------
# real kubectl against a running twin


@pytest.fixture(scope="module")
def blocked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TwinCluster, Path]]:
    cluster = TwinCluster(fixtures.fast("seed-blocked")).start()
    try:
        api = cluster.serve_api()
        yield cluster, kubeconfig.write(tmp_path_factory.mktemp("streams") / "kc", api.url)
    finally:
        cluster.stop()


def kubectl(config: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(config.parent)}
    return subprocess.run([KUBECTL, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, check=False)


def _crashed(cluster: TwinCluster, name: str) -> bool:
    """The pod's container has terminated once (False while the operator has not created it)."""
    try:
        pod = cluster.store.get(PODS, name, namespace="ml")
    except ApiError as exc:
        if exc.code == 404:
            return False
        raise
    return any(cs.get("lastState", {}).get("terminated")
               for cs in pod["status"].get("containerStatuses") or [])


def test_kubectl_logs_of_a_blocked_job(blocked: tuple[TwinCluster, Path]) -> None:
    cluster, config = blocked
    wait(lambda: _crashed(cluster, "llm-finetune-worker-0"), timeout=30, what="a crashed worker")
    done = kubectl(config, "logs", "-n", "ml", "llm-finetune-worker-0", "--previous")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("[twin] container pytorch of pod llm-finetune-worker-0 started")
    assert "rendezvous: connect() to llm-finetune-master-0:23456 timed out (attempt 2 of 2)" in lines
    assert lines[-1] == ("RuntimeError: connect() to llm-finetune-master-0:23456 timed out after "
                         "2 attempts (network policy drop)")
    tail = kubectl(config, "logs", "-n", "ml", "llm-finetune-worker-0", "-p", "--tail=1",
                   "--timestamps")
    assert tail.returncode == 0 and len(tail.stdout.splitlines()) == 1
    assert tail.stdout.split(" ", 1)[1] == lines[-1] + "\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["exec", "-n", "ml", "llm-finetune-master-0", "--", "ls"], "does not serve exec"),
        (["attach", "-n", "ml", "llm-finetune-master-0"], "does not serve attach"),
        (["port-forward", "-n", "ml", "llm-finetune-master-0", "0:23456"],
         "does not serve port-forward"),
    ],
)
def test_exec_attach_and_port_forward_say_the_twin_does_not_serve_them(
    blocked: tuple[TwinCluster, Path], argv: list[str], message: str,
) -> None:
    _, config = blocked
    done = kubectl(config, *argv)
    assert done.returncode == 1
    assert "error dialing backend: the twin " + message in done.stderr
    assert "could not find the requested resource" not in done.stderr
    assert "does not allow this method" not in done.stderr


def test_a_follow_ends_when_the_client_goes_away(blocked: tuple[TwinCluster, Path]) -> None:
    cluster, _ = blocked
    api = cluster.api
    assert api is not None
    node = cluster.store.list(lookup("nodes"))[0][0]["metadata"]["name"]
    cluster.store.create(PODS, {"metadata": {"name": "quiet", "namespace": "ml"},
                                "spec": {"nodeName": node,
                                         "containers": [{"name": "main", "image": "img"}]}})
    wait(lambda: cluster.store.get(PODS, "quiet", namespace="ml")["status"].get("phase")
         == "Running", timeout=10, what="the pod running")
    url = f"{api.url}/api/v1/namespaces/ml/pods/quiet/log?follow=true"
    with httpx.Client(timeout=10) as client, client.stream("GET", url) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/plain"
        lines = response.iter_lines()  # kept: a dropped iterator closes the response
        first = next(lines)
        assert first.startswith("[twin] container main of pod quiet started") and \
            "(no training workload)" in first
        wait(lambda: api.log_streams == 1, timeout=10, what="the stream open on the server")
        time.sleep(1.5)  # nothing new to send: it follows on
        assert api.log_streams == 1
    # the client closed its connection: noticed without a failed write
    wait(lambda: api.log_streams == 0, timeout=10, what="the server's stream to end")


def test_kubectl_top_says_the_metrics_api_is_not_available(blocked: tuple[TwinCluster, Path]) -> None:
    _, config = blocked
    for argv in (["pods", "-A"], ["nodes"]):
        done = kubectl(config, "top", *argv)
        assert (done.returncode, done.stderr.strip()) == (1, "error: Metrics API not available")


def test_kubectl_logs_follow_streams_training_progress(tmp_path: Path) -> None:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    with fixtures.running(fixtures.fast("healthy"), speed=20) as cluster:
        api = cluster.serve_api()
        config = kubeconfig.write(tmp_path / "kc", api.url)
        fixtures.wait(cluster, fixtures.all_running(cluster, 5), timeout=30)
        env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(tmp_path)}
        proc = subprocess.Popen([KUBECTL, "logs", "-f", "-n", "ml", "llm-finetune-worker-0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert proc.stdout is not None
            seen: list[str] = []
            deadline = time.monotonic() + 30
            while len([s for s in seen if s.startswith("step ")]) < 3 and time.monotonic() < deadline:
                seen.append(proc.stdout.readline().rstrip("\n"))
            steps = [int(s.split()[1].split("/")[0]) for s in seen if s.startswith("step ")]
            assert len(steps) >= 3 and steps == sorted(steps) and len(set(steps)) == len(steps)
            assert "rendezvous complete: 5 ranks" in seen
            assert proc.poll() is None  # still following
        finally:
            proc.kill()
            proc.communicate(timeout=10)  # reaps it and closes its pipes


def test_a_bare_api_server_answers_logs_as_one_that_cannot_reach_the_kubelet() -> None:
    store = Store()
    with ApiServer(store) as server:
        base = f"{server.url}/api/v1/namespaces/default/pods"
        store.create(PODS, _pod_in({"running": {"startedAt": START}}) | {
            "metadata": {"name": "w-0", "namespace": "default"}})
        pending = _pod_in({}, node="")
        pending["metadata"] = {"name": "pending", "namespace": "default"}
        store.create(PODS, pending)
        logs = httpx.get(f"{base}/w-0/log", timeout=5)
        assert logs.status_code == 500
        assert logs.json()["reason"] == "InternalError"
        assert logs.json()["message"].startswith("error dialing backend: the twin does not serve "
                                                 "container logs: the kubelet of node gpu-a-0 ")
        empty = httpx.get(f"{base}/pending/log", timeout=5)
        assert (empty.status_code, empty.text) == (200, "")
        missing = httpx.get(f"{base}/nope/log", timeout=5)
        assert (missing.status_code, missing.json()["message"]) == (404, 'pods "nope" not found')
        not_scheduled = httpx.post(f"{base}/pending/exec?command=ls", timeout=5)
        assert (not_scheduled.status_code, not_scheduled.json()["message"]) == (
            400, "pod pending does not have a host assigned")
        resources = httpx.get(f"{server.url}/api/v1", timeout=5).json()["resources"]
        verbs = {r["name"]: r["verbs"] for r in resources}
        assert verbs["pods/log"] == ["get"] and verbs["pods/exec"] == ["create", "get"]
