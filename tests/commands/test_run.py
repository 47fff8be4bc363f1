"""`zonemedic run` as real processes against the twin: start-up errors, graceful SIGTERM, and two
replicas on one PostgreSQL (one leader; kill it, the other takes over; no duplicated incident)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from agent.rig.process import AgentProcess
from agent.runtime.webhook_credentials import OPEN_WARNING
from agent.twin import cluster as twin_cluster
from agent.twin import kubeconfig
from tests.support import postgres
from tests.support.waiting import wait
from tests.twin import twin_fixtures as fixtures

REPO = Path(__file__).resolve().parents[2]
LEASE = "/apis/coordination.k8s.io/v1/namespaces/default/leases/zonemedic-leader"


def write_config(tmp_path: Path, kube: Path, database: str, **extra: Any) -> Path:
    config: dict[str, Any] = {
        "cluster_name": "twin",
        "data_dir": str(tmp_path),
        "log_level": "info",
        "kubernetes": {"kubeconfig": str(kube)},
        "database": {"url": database},
        "http": {"host": "127.0.0.1", "port": 0},
        "leader_election": {
            "namespace": "default",
            "lease_duration": "3s",
            "renew_deadline": "2s",
            "retry_period": "500ms",
        },
        "playbooks_dir": str(REPO / "playbooks"),
    }
    config.update(extra)
    path = tmp_path / f"config-{len(list(tmp_path.glob('config-*')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    cluster = twin_cluster.TwinCluster(fixtures.fast("seed-blocked")).start()
    try:
        api = cluster.serve_api()
        yield cluster, kubeconfig.write(tmp_path / "kubeconfig", api.url)
    finally:
        cluster.stop()


def _incidents(agent: AgentProcess) -> list[dict[str, Any]]:
    return list(agent.get("/api/incidents", job="ml/llm-finetune").json()["incidents"])


def test_graceful_sigterm_releases_the_lease(twin: tuple[Any, Path], tmp_path: Path) -> None:
    cluster, kube = twin
    config = write_config(tmp_path, kube, f"sqlite:///{tmp_path / 'zm.db'}")
    agent = AgentProcess(config)
    try:
        agent.wait_url()
        wait(lambda: agent.get("/readyz").status_code == 200, timeout=30, what="readiness",
             interval=0.1)
        wait(lambda: [i for i in _incidents(agent) if i["verdict"] == "zone_split_blocked"],
             timeout=30, what="the incident", interval=0.1)
        assert agent.leader()
        lease = cluster.store.get(twin_cluster.lookup("leases"), "zonemedic-leader", namespace="default")
        assert lease["spec"]["holderIdentity"]
        agent.proc.send_signal(signal.SIGTERM)
        assert agent.proc.wait(20) == 0
        lease = cluster.store.get(twin_cluster.lookup("leases"), "zonemedic-leader", namespace="default")
        assert lease["spec"]["holderIdentity"] == ""
        messages = [line.get("message") for line in agent.lines]
        assert "stopping" in messages and "stopped" in messages
        assert all("level" in line and "time" in line for line in agent.lines)
        # no alertmanager credentials configured: start-up says the webhook is open
        warned = agent.logged(OPEN_WARNING)
        assert warned is not None and warned["level"] == "warning"
    finally:
        agent.stop()


def test_the_webhook_takes_only_the_configured_credentials(twin: tuple[Any, Path],
                                                           tmp_path: Path) -> None:
    _cluster, kube = twin
    (tmp_path / "am-token").write_text("s3cret\n")
    config = write_config(tmp_path, kube, f"sqlite:///{tmp_path / 'zm.db'}",
                          alertmanager={"bearer_token_file": str(tmp_path / "am-token")})
    agent = AgentProcess(config)
    try:
        agent.wait_url()
        wait(lambda: agent.get("/readyz").status_code == 200, timeout=30, what="readiness",
             interval=0.1)
        hook = orjson.dumps({"version": "4", "status": "firing", "alerts": [{"labels": {
            "alertname": "TrainingJobSplitAcrossZones", "namespace": "ml",
            "training_job": "llm-finetune"}, "startsAt": "2026-11-30T12:00:00Z"}]})
        refused = httpx.post(agent.url + "/alertmanager", content=hook, timeout=5)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == 'Bearer realm="zonemedic"'
        taken = httpx.post(agent.url + "/alertmanager", content=hook, timeout=5,
                           headers={"Authorization": "Bearer s3cret"})
        assert taken.status_code == 200 and taken.json()["accepted"] == 1, taken.text
        assert agent.logged(OPEN_WARNING) is None
    finally:
        agent.stop()


@pytest.mark.postgres
def test_two_replicas_one_leader_takeover_and_no_duplicate(twin: tuple[Any, Path], tmp_path: Path) -> None:
    _cluster, kube = twin
    with postgres.throwaway_database("zonemedic_agent") as url:
        a = AgentProcess(write_config(tmp_path, kube, url))
        b = AgentProcess(write_config(tmp_path, kube, url))
        try:
            a.wait_url()
            b.wait_url()
            wait(lambda: a.leader() or b.leader(), timeout=30, what="a leader", interval=0.1)
            leader, follower = (a, b) if a.leader() else (b, a)
            started = wait(lambda: leader.logged("started leading"), timeout=10,
                           what="the leader's log", interval=0.1)
            # the other replica saw the lease held by the leader: it follows, it does not lead
            wait(lambda: follower.logged("following", holder=started["identity"]), timeout=30,
                 what="a follower", interval=0.1)
            assert (leader.leader(), follower.leader()) == (True, False)
            wait(lambda: _incidents(follower), timeout=30,
                 what="the incident (read by the follower)", interval=0.1)
            leader.proc.kill()  # a crash: no release
            killed = time.monotonic()
            leader.proc.wait(10)
            wait(follower.leader, timeout=10, what="the takeover", interval=0.1)
            took = time.monotonic() - killed
            assert took <= 3.0 + 2 * 0.5 + 1.0, took  # lease duration + retry periods + scrape slack
            incidents = _incidents(follower)
            open_split = [i for i in incidents if i["verdict"] == "zone_split_blocked" and i["closed_at"] is None]
            assert len(open_split) == 1, incidents
            assert open_split[0]["detections"] >= 1
        finally:
            a.stop()
            b.stop()


def test_bad_playbook_stops_start_up_naming_file_and_line(twin: tuple[Any, Path], tmp_path: Path) -> None:
    _, kube = twin
    books = tmp_path / "books"
    books.mkdir()
    (books / "bad.yaml").write_text("name: b\ntriggers:\n  - type: zone_splitt\nactions: [{type: notify}]\n")
    config = write_config(tmp_path, kube, f"sqlite:///{tmp_path / 'zm.db'}", playbooks_dir=str(books))
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--config", str(config)], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert f"{books / 'bad.yaml'}:3: triggers[0].type" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_config_key_stops_start_up(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("leader_election: {lease_duraton: 15s}\n")
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--config", str(config)], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "leader_election.lease_duraton: unknown key" in proc.stderr


def test_run_without_a_config_outside_the_repository_uses_the_shipped_playbooks(
    twin: tuple[Any, Path], tmp_path: Path
) -> None:
    _, kube = twin
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    agent = AgentProcess(None, cwd=elsewhere, overrides={
        "ZONEMEDIC_KUBERNETES__KUBECONFIG": str(kube),
        "ZONEMEDIC_DATA_DIR": str(tmp_path / "data"),
        "ZONEMEDIC_HTTP__HOST": "127.0.0.1",
        "ZONEMEDIC_HTTP__PORT": "0",
        "ZONEMEDIC_LEADER_ELECTION__NAMESPACE": "default",
    })
    try:
        agent.wait_url()
        wait(lambda: [i for i in _incidents(agent) if i["verdict"] == "zone_split_blocked"],
             timeout=30, what="the incident", interval=0.1)
        assert not list(elsewhere.iterdir())  # nothing looked up or written relative to the cwd
    finally:
        agent.stop()
