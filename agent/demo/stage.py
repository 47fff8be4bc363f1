"""The demo's stage: every part of the story started on 127.0.0.1 in one temporary directory.

Who calls it: `agent.demo.story` (the narrated run of `zonemedic demo`). `Stage` is a context
manager; entering it creates the directory and starts in it, through the one agent rig
(`agent.rig.rig.AgentRig`), in order: the fake Slack (one demo approver), the cluster twin with
the scenario's nodes, namespaces and policies but without its workloads (so the agent watches the
pods being placed), a real Prometheus scraping the twin's exporter every second (when the binary
is installed; else the story runs without metrics), and the agent itself: its configuration
(the rig's settings builder) written to `config.yaml` in that directory and read by
`load_settings` as `zonemedic run` reads it, its SQLite store migrated, its parts built by the
composition root `agent.runtime.root` (the same wiring as `run`: remediation executor, approval
expiry, Slack), started through `agent.runtime.app.Agent`. `apply_workloads` then creates the scenario's training
jobs, Deployments and batch Jobs. Leaving it stops everything in reverse order and removes the
directory, whatever happened (an error, Ctrl-C).

With `gitops` (`--scenario lab --gitops`) the twin runs the scenario `gitops` (the lab's
coordinator Deployment an Argo CD application's, created by the simulated sync as
`argocd-controller`, not held back), the lab's namespace opts in to automatic co-location, and
the sync runs only when the story says (`sync`).

The timings are the demo's, not production's: pods start in about a second, the agent's
intervals are short, remediation polls every 100 ms.

What it does not do: narrate, decide, or click (the story does); write anything outside its
directory.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent.chatops.slack import EVENTS_PATH
from agent.errors import InputError
from agent.fakes.slack import FakeSlack
from agent.model.workload import BATCH_JOB, DEPLOYMENT, WORKLOADS, workload_named
from agent.playbook.loader import load_playbooks, playbooks_directory
from agent.rig.config import AgentConfig, SlackConfig
from agent.rig.prometheus import PrometheusServer, find_binary
from agent.rig.rig import AgentRig
from agent.runtime.app import Agent
from agent.settings import Settings
from agent.store.repository import IncidentStore
from agent.twin.cluster import TwinCluster
from agent.twin.gitops_sync import INSTANCE_LABEL
from agent.twin.groups import TrainingGroup
from agent.twin.resources import by_kind, lookup
from agent.twin.scenario import ZONE_LABEL, Scenario, load_scenario

SCENARIOS = ("seed-degraded", "seed-blocked", "lab", "trainjob", "trainjob-mpi", "kueue")
WORKLOAD_KINDS = frozenset({*(w.kind.value for w in WORKLOADS), DEPLOYMENT.kind, BATCH_JOB.kind})
CHANNEL = "#ml-infra"
APPROVER = "U0DEMO"
APPROVER_NAME = "dana"
PODS = lookup("pods")
NODES = lookup("nodes")

# The demo's playbook: the shipped zone-split playbook, approvals by the demo approver.
PLAYBOOK = f"""\
name: zone-split
description: Pods of one training job are split across availability zones.
triggers:
  - type: zone_split
conditions:
  min_gpus: 1
  verdicts: [zone_split_blocked, zone_split_degraded]
actions:
  - type: propose_colocation
    channel: "{CHANNEL}"
    approval:
      approvers: [{APPROVER}]
      expiry: 10m
"""
# With `--gitops` (the lab deployed from Git, scenario `gitops`): the lab's namespace opts in to
# automatic co-location, and a finding of a zone label the sync put back is proposed the same way.
GITOPS_SCENARIO = "gitops"
GITOPS_PLAYBOOKS = {
    "zone-split.yaml": PLAYBOOK + "      auto_namespaces: [{namespace}]\n",
    "zone-label-mismatch.yaml": PLAYBOOK.replace("name: zone-split", "name: zone-label-mismatch")
    .replace("Pods of one training job are split across availability zones.",
             "A pod's zone-mirroring label disagrees with its node's zone.")
    .replace("type: zone_split\n", "type: zone_label_mismatch\n")
    .replace("  min_gpus: 1\n", "")
    .replace("[zone_split_blocked, zone_split_degraded]", "[zone_label_mismatch]")
    + "      auto_namespaces: [{namespace}]\n",
}
# the demo runs the sync itself once the fix is in (Argo CD's next sync, now): never before
GITOPS_INTERVAL_SECONDS = 86400.0
MIRROR_LABEL = "zone"  # the lab's zone-mirroring pod label (its policies select on it)


@dataclass(frozen=True)
class Target:
    """The training job (or generic group) the story follows."""

    kind: str  # a Kubeflow kind, or "group"
    namespace: str
    name: str
    pod_labels: Mapping[str, str]  # the labels every pod of it carries

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def story_target(scenario: Scenario) -> Target:
    """The scenario's first training job (a Kubeflow job, a TrainJob: its pods carry its kind's
    job-name label), else its first generic group."""
    for obj in scenario.objects:
        found = workload_named(str(obj.get("kind")))
        if found is not None:
            meta = obj["metadata"]
            return Target(str(obj["kind"]), str(meta.get("namespace", "default")),
                          str(meta["name"]), {found.labels.job_name: str(meta["name"])})
    for group in scenario.groups:
        return Target("group", group.namespace, group.name, dict(group.selector))
    raise InputError(f"scenario {scenario.name}: no training job or group to follow")


def demo_scenario(name: str, *, gitops: bool = False) -> Scenario:
    """The packaged scenario with the demo's fast timings; `gitops` (only with `lab`): the lab
    deployed from Git (`gitops`), its sync run by the demo."""
    if name not in SCENARIOS:
        raise InputError(f"--scenario {name}: expected one of {', '.join(SCENARIOS)}")
    if gitops and name != "lab":
        raise InputError(f"--gitops: only with --scenario lab (the lab deployed from Git), "
                         f"not {name}")
    base = load_scenario(GITOPS_SCENARIO if gitops else name)
    if base.gitops is not None:
        base = replace(base, gitops=replace(base.gitops,
                                            interval_seconds=GITOPS_INTERVAL_SECONDS))
    model = replace(
        base.model,
        pod_start_seconds=1.0,
        pod_stop_seconds=0.2,
        crash_backoff_seconds=0.3,
        crash_backoff_max_seconds=0.6,
        training=replace(base.model.training, connect_attempts=2, connect_retry_seconds=0.1),
    )
    return replace(base, model=model)


def group_settings(group: TrainingGroup) -> dict[str, Any]:
    """A twin group as the agent's `diagnosis.groups` entry."""
    return {"name": group.name, "namespace": group.namespace, "selector": dict(group.selector),
            "coordinator": dict(group.coordinator), "workers": dict(group.workers),
            "ports": list(group.ports)}


def agent_config(rig: AgentRig, *, slack: SlackConfig, groups: list[dict[str, Any]]) -> AgentConfig:
    """The agent's configuration for the demo (what `zonemedic run --config` reads): one replica
    (always the leader), the demo's playbook, the fast remediation timings, and, with Prometheus,
    Beyla's cross-zone bytes over the last 30 s (the twin exports its counters)."""
    sections: dict[str, dict[str, Any]] = {
        "diagnosis": {"groups": groups},
        "remediation": {
            "suspend_timeout": "20s", "schedule_timeout": "15s", "verify_window": "40s",
            "poll_interval": "100ms", "pickup_interval": "250ms", "retry_after": "2s",
        },
    }
    if rig.prometheus is not None:
        sections["egress"] = {"source": "beyla", "window": "30s"}
    return rig.agent_config(cluster_name="demo", log_level="warning", playbooks_dir=rig.directory / "playbooks",
                            slack=slack, sections=sections)


class Stage:
    """The running parts of the demo (see the module docstring)."""

    def __init__(self, scenario_name: str, *, metrics: bool = True,
                 prometheus_binary: Path | None = None, gitops: bool = False) -> None:
        self.scenario = demo_scenario(scenario_name, gitops=gitops)
        self.gitops = gitops
        self.target = story_target(self.scenario)
        self.want_metrics = metrics
        self.prometheus_binary = prometheus_binary
        self.directory = Path()
        self.slack = FakeSlack()
        self.cluster: TwinCluster | None = None
        self.prometheus: PrometheusServer | None = None
        self.settings: Settings | None = None
        self.store: IncidentStore | None = None
        self.agent: Agent | None = None
        self.binds: dict[str, float] = {}  # pod name -> when it was first seen bound
        self.metrics_note = ""
        self._workloads: list[dict[str, Any]] = []  # created by `apply_workloads`
        self._stack = ExitStack()

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> Stage:
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stack.close()

    def _start(self) -> None:
        stack = self._stack
        self.directory = Path(tempfile.mkdtemp(prefix="zonemedic-demo-"))
        stack.callback(shutil.rmtree, self.directory, True)
        rig = stack.enter_context(AgentRig(self.directory))
        # the fake Slack: one workspace, one approver
        self.slack = rig.start_slack(signing_secret=secrets.token_hex(16),
                                     bot_token="xoxb-demo-" + secrets.token_hex(8),
                                     users={APPROVER: APPROVER_NAME})
        # the twin, without the workloads: the agent is watching when the pods are placed
        # (a GitOps application's objects are the twin's: its first sync creates them)
        held = [o for o in self.scenario.objects if o.get("kind") in WORKLOAD_KINDS
                and INSTANCE_LABEL not in ((o.get("metadata") or {}).get("labels") or {})]
        scenario = replace(self.scenario,
                           objects=[o for o in self.scenario.objects if o not in held])
        self._workloads = held
        self.cluster = rig.start_twin(
            scenario, before_start=lambda cluster: cluster.store.subscribe(PODS, self._on_pod))
        # Prometheus, when installed
        self._start_prometheus(rig)
        # the agent, configured by a file as `zonemedic run --config` is
        (self.directory / "playbooks").mkdir()
        books = ({name: text.format(namespace=self.target.namespace)
                  for name, text in GITOPS_PLAYBOOKS.items()}
                 if self.gitops else {"zone-split.yaml": PLAYBOOK})  # fmt: skip
        for name, text in books.items():
            (self.directory / "playbooks" / name).write_text(text)
        slack = rig.slack_config(channel=CHANNEL, approvers=[APPROVER])
        config = agent_config(rig, slack=slack,
                              groups=[group_settings(g) for g in self.scenario.groups])
        self.settings = settings = rig.settings(config)
        playbooks = load_playbooks(playbooks_directory(settings.playbooks_dir))
        running = rig.start_agent(settings, playbooks=playbooks, sync_timeout=30.0)
        self.store, self.agent = running.store, running.agent

    def _start_prometheus(self, rig: AgentRig) -> None:
        if not self.want_metrics:
            self.metrics_note = "metrics off (--no-metrics): no utilization figures, no chart"
            return
        binary = self.prometheus_binary or find_binary()
        if binary is None or not binary.exists():
            self.metrics_note = ("Prometheus is not installed (Debian package `prometheus`): "
                                 "the demo runs without metrics, no utilization figures, no chart")
            return
        self.prometheus = rig.start_prometheus(binary=binary, server=PrometheusServer,
                                               retention="1d")

    def _on_pod(self, event: Any) -> None:
        obj = event.object
        if (obj.get("spec") or {}).get("nodeName"):
            self.binds.setdefault(str(obj["metadata"]["name"]), time.time())

    def sync(self) -> int:
        """Run the GitOps application's sync now (Argo CD's next one); the syncs done before."""
        assert self.cluster is not None and self.cluster.gitops is not None
        done = self.cluster.gitops.syncs
        self.cluster.gitops.sync_now()
        return done

    def syncs(self) -> int:
        assert self.cluster is not None and self.cluster.gitops is not None
        return self.cluster.gitops.syncs

    def synced_zones(self) -> list[tuple[str, str | None, str | None]]:
        """Each object the sync applies, as the twin holds it now: `Kind ns/name`, its pod
        template's zone label, and its template's zone nodeSelector (a pin)."""
        assert self.cluster is not None and self.cluster.gitops is not None
        out = []
        for manifest in self.cluster.gitops.manifests:
            meta = manifest["metadata"]
            rt = by_kind(str(manifest["apiVersion"]), str(manifest["kind"]))
            live = self.cluster.store.get(rt, str(meta["name"]), namespace=meta.get("namespace"))
            template = (live.get("spec") or {}).get("template") or {}
            labels = (template.get("metadata") or {}).get("labels") or {}
            pin = ((template.get("spec") or {}).get("nodeSelector") or {}).get(ZONE_LABEL)
            out.append((f"{manifest['kind']} {meta.get('namespace')}/{meta['name']}",
                        labels.get(MIRROR_LABEL), pin))
        return out

    def apply_workloads(self) -> None:
        assert self.cluster is not None
        for obj in self._workloads:
            self.cluster.apply(obj)

    # -- what the story reads --------------------------------------------------------------------

    @property
    def events_url(self) -> str:
        assert self.agent is not None
        return self.agent.url + EVENTS_PATH

    def target_pods(self) -> list[dict[str, Any]]:
        """The live pods of the target's gang (not being deleted, not finished, not of a replica
        outside the gang: a TrainJob's dataset initializer), from the twin's store."""
        assert self.cluster is not None
        selector = ",".join(f"{k}={v}" for k, v in self.target.pod_labels.items())
        pods = self.cluster.store.list(PODS, namespace=self.target.namespace,
                                       label_selector=selector)[0]
        kind = workload_named(self.target.kind)
        outside = kind.templates.outside if kind is not None else frozenset()
        replica = kind.labels.replica_type if kind is not None else ""
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                and (p["metadata"].get("labels") or {}).get(replica) not in outside]

    def expected_pods(self) -> int | None:
        """The pods of the target's gang once all are up, as its kind counts them (a TrainJob on
        its JobSet, an MPI launcher that starts after the nodes included); None when unknown (a
        generic group, an object not created yet)."""
        assert self.cluster is not None
        kind = workload_named(self.target.kind)
        if kind is None:
            return None
        holder = workload_named(kind.materialised.value) if kind.materialised is not None else kind
        assert holder is not None
        found = self.cluster.store.list(lookup(holder.plural, group=holder.group),
                                        namespace=self.target.namespace)[0]
        obj = next((o for o in found if o["metadata"].get("name") == self.target.name), None)
        return kind.templates.expected_pods(obj) if obj is not None else None

    def zone_of_node(self, node: str) -> str | None:
        assert self.cluster is not None
        obj = self.cluster.store.get(NODES, node)
        zone = (obj["metadata"].get("labels") or {}).get(ZONE_LABEL)
        return str(zone) if zone else None
