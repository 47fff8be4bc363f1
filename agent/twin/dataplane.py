"""The twin's network dataplane: may pod A reach pod B on a port, and over which link.

Used by `training_runtime` (required flows of each training job) and the exporter. Connectivity is
decided by the network policies stored in the twin (CiliumNetworkPolicy, CiliumClusterwide-
NetworkPolicy, NetworkPolicy) through a `FlowCheck` built by a `PolicyCompiler`; the default
compiler reuses zonemedic's own pure policy evaluator (`agent.policy`, which follows Cilium's policy
semantics: deny beats allow, default deny once a direction is selected), so the twin and the agent
agree on verdicts by construction. The zone model (intra/inter-zone RTT and bandwidth) comes from
the scenario. Policies and namespaces are watched: a change marks the compiled check stale and tells
listeners (no polling). It does not carry bytes; the training runtime accounts for traffic and
drops.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agent.twin.resources import lookup
from agent.twin.store import Store
from agent.twin.training import Link, ZoneModel
from agent.twin.watch import WatchEvent

log = logging.getLogger(__name__)

NODES = lookup("nodes")
NAMESPACES = lookup("namespaces")
CONFIGMAPS = lookup("configmaps")
CILIUM_CONFIG = ("kube-system", "cilium-config")
POLICY_RESOURCES = (
    lookup("networkpolicies", group="networking.k8s.io"),
    lookup("ciliumnetworkpolicies", group="cilium.io"),
    lookup("ciliumclusterwidenetworkpolicies", group="cilium.io"),
)
ZONE_LABEL = "topology.kubernetes.io/zone"


class DropReason(StrEnum):
    """Hubble's drop reasons for policy drops."""

    POLICY_DENIED = "POLICY_DENIED"  # no allow rule while the direction is enforced
    POLICY_DENY = "POLICY_DENY"  # an explicit deny rule
    # an L7 rule on the port: Cilium's proxy takes the connection and fails the non-L7 stream
    # (Hubble shows an L7 flow, not a policy drop)
    L7_PROXY = "L7_PROXY"


@dataclass(frozen=True)
class PodEndpoint:
    """What policy evaluation needs to know about a pod."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    service_account: str = "default"
    # (container port name, protocol: TCP, UDP, SCTP) -> number
    named_ports: Mapping[tuple[str, str], int] = field(default_factory=dict)


class DropHop(StrEnum):
    """Where a denied flow is dropped: egress at its source, or ingress at its destination."""

    EGRESS = "egress"
    INGRESS = "ingress"


@dataclass(frozen=True)
class FlowResult:
    allowed: bool
    drop_reason: DropReason | None = None
    policies: tuple[str, ...] = ()
    hop: DropHop | None = None  # set when denied


ALLOWED = FlowResult(True)
FlowCheck = Callable[[PodEndpoint, PodEndpoint, int, str], FlowResult]
# (policy objects, namespace name -> labels, cilium-config data or None) -> FlowCheck
PolicyCompiler = Callable[
    [Sequence[Mapping[str, Any]], Mapping[str, Mapping[str, str]], Mapping[str, str] | None],
    FlowCheck,
]


def allow_all(_src: PodEndpoint, _dst: PodEndpoint, _port: int, _protocol: str) -> FlowResult:
    return ALLOWED


def endpoint_of(pod: Mapping[str, Any]) -> PodEndpoint:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    named = {
        (str(p["name"]), str(p.get("protocol") or "TCP").upper()): int(p["containerPort"])
        for c in spec.get("containers") or []
        for p in c.get("ports") or []
        if p.get("name") and p.get("containerPort")
    }
    return PodEndpoint(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name", "")),
        labels=dict(meta.get("labels") or {}),
        service_account=str(spec.get("serviceAccountName") or "default"),
        named_ports=named,
    )


class Dataplane:
    def __init__(
        self,
        store: Store,
        *,
        zones: ZoneModel,
        compiler: PolicyCompiler,
    ) -> None:
        self._store = store
        self._zones = zones
        self._compiler = compiler
        self._lock = threading.Lock()
        self._check: FlowCheck | None = None
        self._node_zone: dict[str, str] = {}
        self._listeners: list[Callable[[], None]] = []
        self._unsubscribe: list[Any] = []

    def start(self) -> None:
        for rt in POLICY_RESOURCES:
            self._unsubscribe.append(self._store.subscribe(rt, self._on_policy))
        self._unsubscribe.append(self._store.subscribe(NAMESPACES, self._on_policy))
        self._unsubscribe.append(self._store.subscribe(CONFIGMAPS, self._on_configmap))
        self._unsubscribe.append(self._store.subscribe(NODES, self._on_node, since="0"))

    def stop(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` (on a watch thread) whenever policies, namespaces or nodes change."""
        self._listeners.append(listener)

    def _notify(self) -> None:
        for listener in self._listeners:
            listener()

    def _on_policy(self, _event: WatchEvent) -> None:
        with self._lock:
            self._check = None
        self._notify()

    def _on_configmap(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        if (meta.get("namespace"), meta.get("name")) == CILIUM_CONFIG:
            self._on_policy(event)

    def _on_node(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        with self._lock:
            if event.type == "DELETED":
                self._node_zone.pop(str(meta.get("name")), None)
            else:
                self._node_zone[str(meta.get("name"))] = str(
                    (meta.get("labels") or {}).get(ZONE_LABEL, "")
                )
        self._notify()

    def _compiled(self) -> FlowCheck:
        with self._lock:
            if self._check is not None:
                return self._check
        policies: list[Mapping[str, Any]] = []
        for rt in POLICY_RESOURCES:
            policies.extend(self._store.list(rt)[0])
        namespaces = {
            str(ns["metadata"]["name"]): dict(ns["metadata"].get("labels") or {})
            for ns in self._store.list(NAMESPACES)[0]
        }
        configs = self._store.list(CONFIGMAPS, namespace=CILIUM_CONFIG[0])[0]
        data = next(
            (dict(c.get("data") or {}) for c in configs
             if (c.get("metadata") or {}).get("name") == CILIUM_CONFIG[1]),
            None,
        )  # fmt: skip
        check = self._compiler(policies, namespaces, data)
        with self._lock:
            self._check = check
        return check

    def check(
        self, src: Mapping[str, Any], dst: Mapping[str, Any], port: int, protocol: str = "TCP"
    ) -> FlowResult:
        """May pod `src` open a connection to pod `dst` on `port`?"""
        return self._compiled()(endpoint_of(src), endpoint_of(dst), port, protocol)

    def zone_of(self, pod: Mapping[str, Any]) -> str:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        with self._lock:
            return self._node_zone.get(node, "")

    def link(self, src: Mapping[str, Any], dst: Mapping[str, Any]) -> Link:
        return self._zones.link(self.zone_of(src), self.zone_of(dst))

    @property
    def zones(self) -> ZoneModel:
        return self._zones
