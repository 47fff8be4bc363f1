"""The soak's running parts: the twin (its API served over TLS with deploy/'s RBAC, the agents
use the ServiceAccount's token), a private PostgreSQL (restartable), a real Prometheus scraping
the twin's exporter (restartable), the fake Slack, and the agent replicas as `zonemedic run`
processes (SIGKILL-able), each with its config file, playbooks and Slack secret files; all but
PostgreSQL started by the one agent rig (`agent.rig.rig.AgentRig`) and its settings builder.

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

import httpx

from agent.fakes.slack import FakeSlack
from agent.rig.config import PROMETHEUS_OPTIONS, SHORT_LEASE
from agent.rig.process import AgentProcess
from agent.rig.rig import AgentRig
from agent.twin.access import Access, read_manifests
from agent.twin.cluster import TwinCluster
from agent.twin.groups import TrainingGroup
from tests.remediation.harness import quick
from tests.soak.workload import AUTO, PROTECTED
from tests.support.pgcluster import PrivateCluster, private_cluster
from tests.support.prometheus import PROMETHEUS, PrometheusServer

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


def agent_config(rig: AgentRig, *, database: str, groups: Sequence[TrainingGroup] = ()) -> Path:
    books = rig.directory / "playbooks"
    books.mkdir(exist_ok=True)
    (books / "zone-split.yaml").write_text(PLAYBOOK)
    slack = rig.slack_config(channel=CHANNEL, approvers=APPROVERS, usergroups=[],
                             deliver_every="300ms")
    return rig.config_file(rig.agent_config(
        cluster_name="soak", log_level="info", playbooks_dir=books, database=database,
        database_options={"connect_timeout": "2s", "write_retry": "10s", "start_timeout": "60s"},
        leader_election={"namespace": "zonemedic", **SHORT_LEASE},
        prometheus_options={**PROMETHEUS_OPTIONS, "timeout": "2s"}, slack=slack,
        sections={
            "diagnosis": {"protected_namespaces": ["kube-system", PROTECTED],
                          "groups": [g.as_config() for g in groups]},
            "detection": {"metrics_interval": "2s"},
            "remediation": {"enabled": True, "max_per_hour": 1000, "pickup_interval": "500ms",
                            "retry_after": "2s", "suspend_timeout": "15s", "schedule_timeout": "8s",
                            "verify_window": "20s", "poll_interval": "200ms"},
        }))


@dataclass
class Rig:
    cluster: TwinCluster
    access: Access
    pg: PrivateCluster
    prometheus: PrometheusServer
    slack: FakeSlack
    config: Path
    agents: AgentRig | None = None  # what starts the replicas
    replicas: list[AgentProcess] = field(default_factory=list)
    retired: list[AgentProcess] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start_replica(self) -> AgentProcess:
        assert self.agents is not None
        replica = self.agents.start_process(self.config, timeout=90)
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
        pg = stack.enter_context(private_cluster())
        agents = stack.enter_context(AgentRig(tmp_path))
        cluster = agents.start_twin(replace(quick("seed-blocked"), groups=list(groups)),
                                    rbac=documents)
        assert agents.access is not None
        prometheus = agents.start_prometheus(binary=Path(PROMETHEUS), server=PrometheusServer)
        slack = agents.start_slack(users=USERS)
        config = agent_config(agents, database=pg.url, groups=groups)
        rig = Rig(cluster, agents.access, pg, prometheus, slack, config, agents)
        stack.callback(rig.stop)
        for _ in range(replicas):
            rig.start_replica()
        deadline = time.monotonic() + 60
        while rig.leader() is None:
            if time.monotonic() > deadline:
                raise AssertionError("no replica became leader")
            time.sleep(0.2)
        yield rig
