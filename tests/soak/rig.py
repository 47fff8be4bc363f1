"""The soak's running parts: the twin (its API served over TLS with deploy/'s RBAC, the agents
use the ServiceAccount's token), a private PostgreSQL (restartable), a real Prometheus scraping
the twin's exporter (restartable), the fake Slack, and the agent replicas as `zonemedic run`
processes (SIGKILL-able), each with its config file, playbooks and Slack secret files.

`running_rig(tmp_path)` starts them all and stops them all. `Rig.replicas` holds the live ones;
`Rig.replace_leader()` SIGKILLs the leader and starts a fresh replica in its place.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import yaml

from agent.fakes.slack import FakeSlack
from agent.twin.access import Access, read_manifests
from agent.twin.cluster import TwinCluster
from agent.twin.groups import TrainingGroup
from tests.remediation.harness import quick
from tests.soak.workload import AUTO, PROTECTED
from tests.support.agent_process import AgentProcess
from tests.support.pgcluster import PrivateCluster, private_cluster
from tests.support.prometheus import PrometheusServer, running_prometheus

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "base"
CHANNEL = "C0FAKE"
APPROVERS = ("U1", "U2")
NOT_APPROVER = "U9"
USERS = {"U1": "alice", "U2": "bob", NOT_APPROVER: "mallory"}
PLAYBOOK = f"""\
name: zone-split
description: soak - propose co-location of split jobs
triggers:
  - type: zone_split
conditions:
  min_gpus: 1
  verdicts: [zone_split_blocked, zone_split_degraded]
actions:
  - type: notify
    channel: "{CHANNEL}"
  - type: propose_colocation
    approval:
      approvers: []
      expiry: 4h
      auto_namespaces: [{AUTO}]
"""


def agent_config(tmp_path: Path, *, kubeconfig: Path, database: str, prometheus: str,
                 slack: FakeSlack, groups: Sequence[TrainingGroup] = ()) -> Path:
    books = tmp_path / "playbooks"
    books.mkdir(exist_ok=True)
    (books / "zone-split.yaml").write_text(PLAYBOOK)
    (tmp_path / "bot-token").write_text(slack.bot_token)
    (tmp_path / "signing-secret").write_text(slack.signing_secret)
    config: dict[str, Any] = {
        "cluster_name": "soak",
        "data_dir": str(tmp_path),
        "log_level": "info",
        "kubernetes": {"kubeconfig": str(kubeconfig)},
        "database": {"url": database, "connect_timeout": "2s", "write_retry": "10s",
                     "start_timeout": "60s"},
        "http": {"host": "127.0.0.1", "port": 0},
        "leader_election": {"namespace": "zonemedic", "lease_duration": "3s",
                            "renew_deadline": "2s", "retry_period": "500ms"},
        "playbooks_dir": str(books),
        "prometheus": {"url": prometheus, "timeout": "2s", "retries": 0,
                       "drop_duration": "20s", "baseline_offset": "5m"},
        "diagnosis": {"protected_namespaces": ["kube-system", PROTECTED],
                      "groups": [g.as_config() for g in groups]},
        "detection": {"metrics_interval": "2s"},
        "slack": {"enabled": True, "api_url": slack.base_url, "channel": CHANNEL,
                  "bot_token_file": str(tmp_path / "bot-token"),
                  "signing_secret_file": str(tmp_path / "signing-secret"),
                  "approvers": {"users": list(APPROVERS), "usergroups": []},
                  "deliver_every": "300ms"},
        "remediation": {"enabled": True, "max_per_hour": 1000, "pickup_interval": "500ms",
                        "retry_after": "2s", "suspend_timeout": "15s", "schedule_timeout": "8s",
                        "verify_window": "20s", "poll_interval": "200ms"},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class Rig:
    cluster: TwinCluster
    access: Access
    pg: PrivateCluster
    prometheus: PrometheusServer
    slack: FakeSlack
    config: Path
    replicas: list[AgentProcess] = field(default_factory=list)
    retired: list[AgentProcess] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start_replica(self) -> AgentProcess:
        replica = AgentProcess(self.config)
        replica.wait_url(timeout=90)
        with self.lock:
            self.replicas.append(replica)
        return replica

    def live(self) -> list[AgentProcess]:
        with self.lock:
            return [r for r in self.replicas if r.proc.poll() is None]

    def leader(self) -> AgentProcess | None:
        for replica in self.live():
            if replica.leader():
                return replica
        return None

    def replace_leader(self) -> bool:
        """SIGKILL the leader (no release, no flush) and start a replica in its place."""
        leader = self.leader()
        if leader is None:
            return False
        leader.proc.kill()
        leader.proc.wait(10)
        with self.lock:
            self.replicas.remove(leader)
            self.retired.append(leader)
        self.start_replica()
        return True

    def metrics(self, replica: AgentProcess) -> str:
        return httpx.get(replica.url + "/metrics", timeout=5).text

    def stop(self) -> None:
        for replica in [*self.replicas, *self.retired]:
            replica.stop()


@contextlib.contextmanager
def running_rig(tmp_path: Path, *, replicas: int = 2,
                groups: Sequence[TrainingGroup] = ()) -> Iterator[Rig]:
    """The rig; `groups`: generic groups declared to the twin (its training runtime runs them)
    and to the agents (`diagnosis.groups`)."""
    documents = read_manifests([DEPLOY / "serviceaccount.yaml", DEPLOY / "rbac.yaml"],
                               namespace="zonemedic")
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(
            TwinCluster(replace(quick("seed-blocked"), groups=list(groups))))
        access = cluster.serve_api_as(documents)
        kubeconfig = access.kubeconfig(tmp_path / "agent.kubeconfig")
        pg = stack.enter_context(private_cluster())
        target = cluster.metrics.url.removeprefix("http://")
        prometheus = stack.enter_context(
            running_prometheus(tmp_path, scrape_targets=[target], scrape_interval="1s"))
        slack = stack.enter_context(FakeSlack(users=USERS))
        config = agent_config(tmp_path, kubeconfig=kubeconfig, database=pg.url,
                              prometheus=prometheus.url, slack=slack, groups=groups)
        rig = Rig(cluster, access, pg, prometheus, slack, config)
        stack.callback(rig.stop)
        for _ in range(replicas):
            rig.start_replica()
        deadline = time.monotonic() + 60
        while rig.leader() is None:
            if time.monotonic() > deadline:
                raise AssertionError("no replica became leader")
            time.sleep(0.2)
        yield rig
