"""Builders of the admission tests: a three-zone cluster as the watch cache's parsed view, the
webhook served over real HTTPS, and the PyTorchJob the tests create.

The cluster (`base_items`, `make_view`): zones a, b and c, one 8-GPU node each (tainted
`nvidia.com/gpu`), c's node holding no GPU; namespace `ml`; a CiliumNetworkPolicy that denies
ingress to pods labelled `zone: b` (so a job whose template says `zone: b` is allowed only once
relabelled, and zone b never is). The zone-mirroring label is `zone` (`diagnosis.pod_zone_label`).
`serve`: the webhook over a view on a real HTTPS server (a certificate the agent's own code made,
its CA trusted by the client `Served.post`). `pytorch`: a PyTorchJob of a CPU master and GPU workers.
`register_webhook`: on the twin, the opt-in label, the Service routed to the agent and the
configuration; `free_port`: the agent's admission port.
Used by tests/admission (its conftest's fixtures and its tests).
"""


from __future__ import annotations

import http.client
import json
import random
import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from agent.admission.certificates import ServingContext, make_certificate, write_pair
from agent.admission.decision import View
from agent.admission.manifest import webhook_configuration
from agent.admission.server import AdmissionServer
from agent.admission.webhook import Webhook
from agent.settings import ADMISSION_PATH, DiagnosisSettings, GroupSpec, Settings
from agent.snapshot.collection import parse_objects
from agent.store.repository import IncidentStore
from agent.topology.facts import cluster_facts
from tests.support import objects as o

GROUP = GroupSpec(name="lab", selector={"app": "lab"}, coordinator={"role": "coordinator"},
                  workers={"role": "worker"}, ports=[29500])  # fmt: skip
SETTINGS = DiagnosisSettings(pod_zone_label="zone", groups=[GROUP])
# the same group placed pod by pod: a coordinator and two 2-GPU workers
POD_GROUP = GroupSpec(name="lab", selector={"app": "lab"}, coordinator={"role": "coordinator"},
                      workers={"role": "worker"}, ports=[29500], admit_pods=True, size=3, gpus=4)  # fmt: skip
POD_SETTINGS = DiagnosisSettings(pod_zone_label="zone", groups=[POD_GROUP])
DENY_B = o.cnp("deny-zone-b", {"endpointSelector": {"matchLabels": {"zone": "b"}},
                               "ingressDeny": [{"fromEndpoints": [{}]}]})  # fmt: skip


def base_items() -> list[dict[str, Any]]:
    return [o.node("a1", "a", gpus=8), o.node("b1", "b", gpus=8), o.node("c1", "c", gpus=0),
            o.namespace("ml"), o.namespace("kube-system"), DENY_B]  # fmt: skip


def make_view(items: Sequence[dict[str, Any]], settings: DiagnosisSettings = SETTINGS) -> View:
    snapshot = parse_objects(list(items), source="test")
    facts = cluster_facts(snapshot.state.nodes, snapshot.state.pods)
    return View(snapshot.state, snapshot.policy_set(settings), facts)



@dataclass
class Served:
    """A webhook served over HTTPS on a free loopback port, and what it was built with."""

    server: AdmissionServer
    webhook: Webhook
    serving: ServingContext
    ca_file: Path
    counts: dict[str, int]

    def post(self, review: Mapping[str, Any], *, path: str = ADMISSION_PATH) -> tuple[int, dict[str, Any]]:
        """POST `review` as kube-apiserver does (JSON over HTTPS, the CA verified)."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        conn = http.client.HTTPSConnection("127.0.0.1", self.server.port, context=context, timeout=10)
        try:
            conn.request("POST", path, body=json.dumps(review),
                         headers={"Content-Type": "application/json"})  # fmt: skip
            answer = conn.getresponse()
            return answer.status, json.loads(answer.read())
        finally:
            conn.close()


def serve(tmp_path: Path, *, store: IncidentStore | None, view: View,
          settings: Settings | None = None) -> Served:  # fmt: skip
    chosen = settings or Settings(diagnosis=SETTINGS)
    certificate = make_certificate(["127.0.0.1", "localhost"], now=datetime.now(UTC))
    cert, key = write_pair(certificate, tmp_path / "tls")
    ca_file = tmp_path / "ca.crt"
    ca_file.write_text(certificate.ca_pem)
    serving = ServingContext(cert, key)
    counts: dict[str, int] = {}

    def count(outcome: str) -> None:
        counts[outcome] = counts.get(outcome, 0) + 1

    webhook = Webhook(chosen, view=lambda: view, ready=lambda: True, store=store, count=count,
                      observe=lambda _s: None, now=lambda: datetime.now(UTC))  # fmt: skip
    server = AdmissionServer(webhook.handle, host="127.0.0.1", port=0, context=serving.context)
    server.start()
    return Served(server, webhook, serving, ca_file, counts)

def pytorch(name: str = "llm", *, workers: int = 2, gpus: int = 4, zone_label: str | None = "b",
            labels: dict[str, str] | None = None, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    tlabels = {"zone": zone_label} if zone_label else {}
    extra = dict(spec or {})
    master = {"containers": [o.container(cpu="1", ports=[("pytorchjob-port", 23456)])], **extra}
    worker = {"containers": [o.container(gpus=gpus, cpu="2", memory="8Gi")], **extra}
    replicas = {"Master": o.replica(1, master, labels=tlabels)}
    if workers:
        replicas["Worker"] = o.replica(workers, worker, labels=tlabels)
    return o.training_job("PyTorchJob", name, replicas=replicas, labels=labels, status=False)


def lab_pod(name: str, role: str, *, gpus: int = 0, labels: dict[str, str] | None = None,
            **fields: Any) -> dict[str, Any]:
    """A bare Pod of group `lab` as a client sends it (no status), its template label `zone: b`."""
    found = o.pod(name, labels={"app": "lab", "role": role, "zone": "b", **(labels or {})},
                  gpus=gpus, ports=[(None, 29500)], phase=None, **fields)  # fmt: skip
    return found


def register_webhook(api_client: Any, *, namespace: str, port: int, settings: Settings) -> None:
    """On the twin: `namespace` opted in, the namespaces `zonemedic` and `other`, the Service
    zonemedic/zonemedic routed to the agent's admission `port` on loopback (`clusterIP:
    127.0.0.1`), and the configuration `zonemedic admission manifest` prints for `settings`."""
    core = client.CoreV1Api(api_client)
    core.patch_namespace(namespace, {"metadata": {"labels": {"zonemedic.io/admission": "enabled"}}})
    for name in ("zonemedic", "other"):
        core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_service("zonemedic", {
        "metadata": {"name": "zonemedic"},
        "spec": {"clusterIP": "127.0.0.1",
                 "ports": [{"name": "admission", "port": 443, "targetPort": port}]}})  # fmt: skip
    client.AdmissionregistrationV1Api(api_client).create_mutating_webhook_configuration(
        webhook_configuration(settings))


def free_port() -> int:
    """A loopback port free now (the agent's admission port in the twin tests), bound later by the
    agent: drawn below the kernel's ephemeral range (32768-60999 by default), so an outgoing
    connection or another test's `bind(0)` cannot take it in between."""
    for _ in range(200):
        port = random.randrange(20000, 32768)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port in 20000-32767")
