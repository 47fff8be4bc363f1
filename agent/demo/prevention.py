"""`zonemedic demo --scenario prevent`: a job that would split starts co-located at its first try.

Who calls it: `agent.demo.command` for the `prevent` scenario. What it does, on 127.0.0.1 in one
temporary directory, through the one agent rig (`agent.rig.rig.AgentRig`): the cluster twin with
seed-blocked's nodes and zone-boundary policies (GPU nodes in one zone, CPU nodes in the other)
and its namespace `ml` opted in (`zonemedic.io/admission=enabled`); the agent with its admission
webhook on a free port (its own certificate, its CA patched into the MutatingWebhookConfiguration
that `zonemedic admission manifest` prints, registered with the twin, which calls it as
kube-apiserver does, through a Service routed to that port). Then seed-blocked's PyTorchJob (a CPU
master, four GPU workers: without the webhook the scheduler puts the master in the CPU zone and
the policies block it) is created; the story shows the webhook's warning as the client gets it,
the pods landing in one zone, the agent's diagnosis (healthy), that no incident was opened, and
the decision `zonemedic admissions` lists. Leaving it stops everything and removes the directory.

What it does not do: click, remediate, or decide anything itself (the agent's webhook decides).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from agent.admission.manifest import webhook_configuration
from agent.errors import ZonemedicError
from agent.model.verdict import Verdict
from agent.model.workload import PYTORCH
from agent.rig.rig import AgentRig
from agent.twin.resources import lookup
from agent.twin.scenario import ZONE_LABEL, Scenario, load_scenario

T = TypeVar("T")
NAMESPACE = "ml"
JOB = "llm-finetune"


class PreventionError(ZonemedicError):
    """A step of the prevention story did not happen within its deadline."""


@dataclass
class PreventionSummary:
    """What the story saw: the webhook's warning, where the pods landed, the verdict, the
    incidents opened, the recorded decision."""

    job: str
    warning: str = ""
    zones: dict[str, int] = field(default_factory=dict)
    verdict: str = ""
    incidents: int = 0
    outcome: str = ""
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": "prevent", "job": self.job, "warning": self.warning,
                "zones": self.zones, "verdict": self.verdict, "incidents": self.incidents,
                "admission": self.outcome, "duration_s": round(self.duration_s, 1)}  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, check: Callable[[], T | None], *, timeout: float) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise PreventionError(f"the demo waited {timeout:.0f}s for {what}")
        time.sleep(0.1)


def scenario() -> tuple[Scenario, dict[str, Any]]:
    """seed-blocked without its PyTorchJob (created later, through the webhook), its namespace
    opted in; and that job."""
    base = load_scenario("seed-blocked")
    job = next(o for o in base.objects if o.get("kind") == PYTORCH.kind.value)
    namespaces = []
    for namespace in base.namespaces:
        meta = dict(namespace.get("metadata") or {})
        if meta.get("name") == NAMESPACE:
            meta["labels"] = {**(meta.get("labels") or {}), "zonemedic.io/admission": "enabled"}
        namespaces.append({**namespace, "metadata": meta})
    model = replace(base.model, pod_start_seconds=1.0, pod_stop_seconds=0.2)
    return replace(base, model=model, namespaces=namespaces,
                   objects=[o for o in base.objects if o is not job]), job


def tell(*, console: Any) -> PreventionSummary:
    """The prevention story told on `console` (a rich Console)."""
    started = time.monotonic()
    summary = PreventionSummary(job=f"{PYTORCH.kind.value} {NAMESPACE}/{JOB}")
    directory = Path(tempfile.mkdtemp(prefix="zonemedic-demo-prevent-"))
    try:
        with AgentRig(directory) as rig:
            world, job = scenario()
            cluster = rig.start_twin(world)
            port = _free_port()
            config = rig.agent_config(cluster_name="demo", log_level="warning",
                                      playbooks_dir=Path(__file__).resolve().parents[2] / "playbooks",
                                      sections={"admission": {"enabled": True, "host": "127.0.0.1",
                                                              "port": port}})  # fmt: skip
            settings = rig.settings(config)
            cluster.store.create(lookup("namespaces"), {"metadata": {"name": "zonemedic"}})
            cluster.store.create(lookup("services"), {
                "metadata": {"name": "zonemedic", "namespace": "zonemedic"},
                "spec": {"clusterIP": "127.0.0.1",
                         "ports": [{"name": "admission", "port": 443, "targetPort": port}]}})  # fmt: skip
            cluster.store.create(lookup("mutatingwebhookconfigurations"),
                                 webhook_configuration(settings))
            console.print("✔ the webhook registered (zonemedic admission manifest); "
                          f"namespace {NAMESPACE} opted in")
            running = rig.start_agent(settings, sync_timeout=30.0)
            admission = running.agent.composition.admission
            if admission is None:
                raise PreventionError("the agent was built without its admission webhook")
            _wait("the webhook to decide over a synced view", admission.ready, timeout=30)
            console.print("✔ the agent serves its admission webhook over HTTPS (its own "
                          "certificate, the CA patched into its configuration)")
            warnings: list[str] = []
            cluster.store.create(lookup(PYTORCH.plural, group=PYTORCH.group), job,
                                 namespace=NAMESPACE, warnings=warnings)  # fmt: skip
            summary.warning = warnings[0] if warnings else ""
            console.print(f"✔ {summary.job} created: Warning: {summary.warning or '(none)'}")
            summary.zones = _wait("the job's 5 pods running", lambda: _zones(cluster), timeout=60)
            shown = ", ".join(f"{z} ×{n}" for z, n in sorted(summary.zones.items()))
            console.print(f"✔ pods placed at the first try: {shown}")
            # healthy once every pod carries the zone label the twin stamps at start
            finding = _wait("the agent to diagnose the job healthy", lambda: next(
                (f for f in running.agent.pipeline.diagnose()
                 if f.job.name == JOB and f.verdict is Verdict.HEALTHY), None), timeout=30)  # fmt: skip
            summary.verdict = finding.verdict.value
            summary.incidents = len(running.store.list_incidents().incidents)
            console.print(f"✔ the agent diagnoses it {summary.verdict}; incidents opened: "
                          f"{summary.incidents}")
            if admission.webhook.records is not None:
                admission.webhook.records.flush()
            records = running.store.list_admissions()
            summary.outcome = records[0].outcome.value if records else ""
            console.print(f"✔ zonemedic admissions: {summary.outcome or '(nothing recorded)'}")
            if summary.verdict != Verdict.HEALTHY.value or summary.incidents:
                raise PreventionError(f"the job was not kept in one zone: {summary.verdict}, "
                                      f"{summary.incidents} incident(s)")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    summary.duration_s = time.monotonic() - started
    return summary


def _zones(cluster: Any) -> dict[str, int] | None:
    nodes = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(ZONE_LABEL)
             for n in cluster.store.list(lookup("nodes"))[0]}  # fmt: skip
    pods = [p for p in cluster.store.list(lookup("pods"), namespace=NAMESPACE)[0]
            if (p["metadata"].get("labels") or {}).get(PYTORCH.labels.job_name) == JOB
            and (p.get("status") or {}).get("phase") == "Running"]  # fmt: skip
    if len(pods) < 5:
        return None
    out: dict[str, int] = {}
    for pod in pods:
        zone = str(nodes.get(pod["spec"].get("nodeName")))
        out[zone] = out.get(zone, 0) + 1
    return out
