"""The twin's metrics endpoint: DCGM, kube-state-metrics, cAdvisor network, Hubble and Beyla.

Started by `cluster.TwinCluster` on 127.0.0.1 (port 0 unless given); a real Prometheus scrapes
`/metrics` in the text exposition format. Values are computed at scrape time from the store, the
kubelet's GPU allocations and the training runtime, so nothing ticks while nobody scrapes. Metric
and label names follow the real exporters (NVIDIA dcgm-exporter, kube-state-metrics, cAdvisor,
Hubble):
- `DCGM_FI_DEV_GPU_UTIL` (0-100), `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0-1) per GPU of every GPU node,
  labels gpu, UUID, device, modelName, Hostname, and namespace/pod/container when a pod holds it;
- `kube_pod_info`, `kube_node_labels`, `kube_pod_labels` (every label, allowlist `*`),
  `kube_pod_status_phase`, `kube_pod_container_status_restarts_total`;
- `container_network_transmit_bytes_total{namespace,pod,interface}`;
- `hubble_drop_total{reason,protocol,source_namespace,source_pod,destination_namespace,destination_pod}`;
- Grafana Beyla's network counters, from the training runtime's traffic model (each participant
  sends its all-reduce bytes to its ring neighbour): `beyla_network_flow_bytes_total` per pair of
  pods with the Kubernetes attributes Beyla reports (`k8s_{src,dst}_{namespace,name,type,owner_name,
  owner_type}`, `k8s_cluster_name`) and `src_zone`/`dst_zone` added (as Beyla's inter-zone docs
  configure it), and `beyla_network_inter_zone_bytes_total{k8s_cluster_name,src_zone,dst_zone}`
  with its default attributes. An owner is named as Beyla names it: the pod's `apps/v1` owner
  (a ReplicaSet as its Deployment, the name without its hash suffix), else its other owner (a
  PyTorchJob, a batch Job), else the pod itself (type `Pod`).
It does not serve anything but /metrics (and /healthz).
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from agent.twin.clock import TwinClock
from agent.twin.kubelet import Kubelet
from agent.twin.resources import lookup
from agent.twin.scenario import DEFAULT_GPU_MODEL, GPU_MODEL_ANNOTATION
from agent.twin.store import Store
from agent.twin.training import jitter
from agent.twin.training_runtime import TrainingRuntime

log = logging.getLogger(__name__)

PODS = lookup("pods")
NODES = lookup("nodes")
GPU = "nvidia.com/gpu"

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
CLUSTER_NAME = "twin"  # Beyla's k8s_cluster_name
_FLOW_ENDS = ("namespace", "name", "type", "owner_name", "owner_type")
_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")


def label_name(key: str) -> str:
    """kube-state-metrics' label sanitising: `topology.kubernetes.io/zone` -> `label_topology_kubernetes_io_zone`."""
    return "label_" + _LABEL_CHARS.sub("_", key)


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}/{index}.twin')}"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = obj.get("metadata") or {}
    return found


class TwinCollector(Collector):
    def __init__(
        self,
        store: Store,
        *,
        kubelet: Kubelet,
        runtime: TrainingRuntime,
        clock: TwinClock,
        jitter_amplitude: float,
    ) -> None:
        self._store = store
        self._kubelet = kubelet
        self._runtime = runtime
        self._clock = clock
        self._jitter = jitter_amplitude

    def collect(self) -> Iterable[Metric]:
        nodes = self._store.list_refs(NODES)[0]  # stored objects are immutable: no copies
        pods = self._store.list_refs(PODS)[0]
        at = self._clock.now()  # one instant for every traffic counter of this scrape
        yield from self._dcgm(nodes)
        yield from self._kube_state(nodes, pods)
        yield from self._network(pods, at=at)
        yield from self._beyla(pods, at=at)

    # --- DCGM -----------------------------------------------------------------------------------

    def _dcgm(self, nodes: list[dict[str, Any]]) -> Iterable[Metric]:
        keys = ["gpu", "UUID", "device", "modelName", "Hostname", "namespace", "pod", "container"]
        util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=keys)
        active = GaugeMetricFamily(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "Ratio of time the graphics engine is active.",
            labels=keys,
        )
        holders = self._kubelet.gpu_holders()
        bucket = int(self._clock.now())
        for node in nodes:
            count = int(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0) or 0)
            if not count:
                continue
            name = str(_meta(node).get("name"))
            model = str(
                (_meta(node).get("annotations") or {}).get(GPU_MODEL_ANNOTATION, DEFAULT_GPU_MODEL)
            )
            held = holders.get(name, {})
            for index in range(count):
                uid = gpu_uuid(name, index)
                holder = held.get(index)
                value = 0.0
                labels = [str(index), uid, f"nvidia{index}", model, name, "", "", ""]
                if holder is not None:
                    labels[5:] = [holder.namespace, holder.pod, holder.container]
                    value = self._runtime.pod_utilization(holder.namespace, holder.pod)
                    if value > 0:
                        value += jitter(uid, bucket, amplitude=self._jitter)
                value = min(1.0, max(0.0, value))
                util.add_metric(labels, round(value * 100, 1))
                active.add_metric(labels, round(value, 4))
        yield util
        yield active

    # --- kube-state-metrics ---------------------------------------------------------------------

    def _kube_state(
        self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
    ) -> Iterable[Metric]:
        node_labels: list[tuple[dict[str, str], float]] = []
        for node in nodes:
            labels = {"node": str(_meta(node).get("name"))}
            for key, value in sorted((_meta(node).get("labels") or {}).items()):
                labels[label_name(key)] = str(value)
            node_labels.append((labels, 1.0))
        yield from _families(
            "kube_node_labels", "Kubernetes labels converted to Prometheus labels.", node_labels
        )

        info_keys = ["namespace", "pod", "uid", "host_ip", "pod_ip", "node", "created_by_kind",
                     "created_by_name", "priority_class", "host_network"]  # fmt: skip
        info = GaugeMetricFamily("kube_pod_info", "Information about pod.", labels=info_keys)
        phase_family = GaugeMetricFamily(
            "kube_pod_status_phase",
            "The pods current phase.",
            labels=["namespace", "pod", "uid", "phase"],
        )
        restarts = CounterMetricFamily(
            "kube_pod_container_status_restarts",
            "The number of container restarts per container.",
            labels=["namespace", "pod", "uid", "container"],
        )
        pod_labels: list[tuple[dict[str, str], float]] = []
        for pod in pods:
            meta = _meta(pod)
            spec = pod.get("spec") or {}
            status = pod.get("status") or {}
            ns, name, uid = str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid"))
            owner: Mapping[str, Any] = next(
                (r for r in meta.get("ownerReferences") or [] if r.get("controller")), {}
            )
            info.add_metric(
                [ns, name, uid, str(status.get("hostIP", "")), str(status.get("podIP", "")),
                 str(spec.get("nodeName", "")), str(owner.get("kind", "<none>")),
                 str(owner.get("name", "<none>")), str(spec.get("priorityClassName", "")),
                 "true" if spec.get("hostNetwork") else "false"],
                1.0,
            )  # fmt: skip
            phase = str(status.get("phase", "Unknown"))
            for p in PHASES:
                phase_family.add_metric([ns, name, uid, p], 1.0 if p == phase else 0.0)
            for cs in status.get("containerStatuses") or []:
                restarts.add_metric(
                    [ns, name, uid, str(cs.get("name"))], float(cs.get("restartCount", 0))
                )
            labels = {"namespace": ns, "pod": name, "uid": uid}
            for key, value in sorted((meta.get("labels") or {}).items()):
                labels[label_name(key)] = str(value)
            pod_labels.append((labels, 1.0))
        yield info
        yield from _families(
            "kube_pod_labels", "Kubernetes labels converted to Prometheus labels.", pod_labels
        )
        yield phase_family
        yield restarts

    # --- network --------------------------------------------------------------------------------

    def _network(self, pods: list[dict[str, Any]], *, at: float) -> Iterable[Metric]:
        live = {(str(_meta(p).get("namespace")), str(_meta(p).get("name"))) for p in pods}
        tx = CounterMetricFamily(
            "container_network_transmit_bytes",
            "Cumulative count of bytes transmitted",
            labels=["namespace", "pod", "interface"],
        )
        for (ns, name), total in sorted(self._runtime.transmit_bytes(at=at).items()):
            if (ns, name) in live:
                tx.add_metric([ns, name, "eth0"], float(int(total)))
        yield tx
        drops = CounterMetricFamily(
            "hubble_drop",
            "Number of drops",
            labels=[
                "reason",
                "protocol",
                "source_namespace",
                "source_pod",
                "destination_namespace",
                "destination_pod",
            ],
        )
        for key, count in sorted(self._runtime.drops().items(), key=lambda kv: str(kv[0])):
            drops.add_metric(
                [
                    key.reason,
                    "TCP",
                    key.source_namespace,
                    key.source_pod,
                    key.destination_namespace,
                    key.destination_pod,
                ],
                float(count),
            )
        yield drops


    # --- Beyla ----------------------------------------------------------------------------------

    def _beyla(self, pods: list[dict[str, Any]], *, at: float) -> Iterable[Metric]:
        keys = ["k8s_cluster_name", *(f"k8s_src_{e}" for e in _FLOW_ENDS),
                *(f"k8s_dst_{e}" for e in _FLOW_ENDS), "src_zone", "dst_zone"]  # fmt: skip
        flow = CounterMetricFamily(
            "beyla_network_flow_bytes",
            "bytes submitted from a source network endpoint to a destination network endpoint",
            labels=keys,
        )
        owners = {(str(_meta(p).get("namespace")), str(_meta(p).get("name"))): beyla_owner(p)
                  for p in pods}  # fmt: skip
        pairs = sorted(self._runtime.pair_bytes(at=at).items())
        for (ns, src, dst), (sent, src_zone, dst_zone) in pairs:
            a, b = owners.get((ns, src)), owners.get((ns, dst))
            if a is None or b is None:
                continue
            flow.add_metric([CLUSTER_NAME, ns, src, "Pod", *a, ns, dst, "Pod", *b, src_zone,
                             dst_zone], float(int(sent)))  # fmt: skip
        yield flow
        inter = CounterMetricFamily(
            "beyla_network_inter_zone_bytes",
            "bytes submitted between different cloud availability zones",
            labels=["k8s_cluster_name", "src_zone", "dst_zone"],
        )
        for (src_zone, dst_zone), sent in sorted(self._runtime.zone_bytes(at=at).items()):
            inter.add_metric([CLUSTER_NAME, src_zone, dst_zone], float(int(sent)))
        yield inter


def beyla_owner(pod: Mapping[str, Any]) -> tuple[str, str]:
    """(owner name, owner type) as Beyla reports a pod's owner (see the module)."""
    refs = [r for r in _meta(pod).get("ownerReferences") or [] if isinstance(r, Mapping)]
    chosen = next((r for r in refs if r.get("apiVersion") == "apps/v1"), refs[-1] if refs else None)
    if chosen is None:
        return str(_meta(pod).get("name", "")), "Pod"
    name, kind = str(chosen.get("name", "")), str(chosen.get("kind", ""))
    if kind == "ReplicaSet" and "-" in name:
        return name.rsplit("-", 1)[0], "Deployment"
    return name, kind


def _families(name: str, doc: str, rows: list[tuple[dict[str, str], float]]) -> Iterable[Metric]:
    """One family whose series carry different label sets (as kube-state-metrics' *_labels do)."""
    family = Metric(name, doc, "gauge")
    for labels, value in rows:
        family.add_sample(name, labels, value)
    yield family


class MetricsServer:
    """Serves the collector on http://127.0.0.1:<port>/metrics from a daemon thread."""

    def __init__(self, collector: Collector, *, host: str = "127.0.0.1", port: int = 0) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/healthz":
                    body, ctype = b"ok", "text/plain"
                elif self.path.split("?")[0] == "/metrics":
                    body, ctype = (
                        generate_latest(registry),
                        "text/plain; version=0.0.4; charset=utf-8",
                    )
                else:
                    self.send_error(404)
                    return
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    # the scraper gave up (a restarted Prometheus, a timed-out scrape): its loss
                    log.debug("metrics: the scraper closed the connection before the answer")

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("metrics: " + format, *args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.25},
            name="twin-metrics",
            daemon=True,
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for a serve loop that never ran otherwise
            self._server.shutdown()
        self._server.server_close()
