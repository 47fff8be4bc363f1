"""Compiles the twin's stored network policies into the dataplane's `FlowCheck`.

Called by `dataplane.Dataplane` (through `cluster.TwinCluster`) whenever policies, namespaces or
the `cilium-config` ConfigMap change. It reuses zonemedic's own pure policy code: the objects are
read by `agent.policy.reading` (the agent's own lenient reader), the dataplane is resolved by
`agent.policy.dataplane` (the twin serves the cilium.io API, so it is Cilium, with the label
filter of its `kube-system/cilium-config` `labels` key, if any) and flows are judged by
`agent.policy.PolicySet`: the twin grows no second evaluator, so the twin's dataplane and the
agent's diagnosis agree by construction. A policy that cannot be read is left out and logged, as
Cilium rejects an invalid policy and keeps enforcing the others. Verdicts map to Hubble drop
reasons: no allow rule under default deny is POLICY_DENIED, an explicit deny rule is POLICY_DENY;
a flow an L7 rule sends through the proxy is L7_PROXY.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from agent.model.network import DenyReason, Endpoint, PortRange, Protocol
from agent.policy import PolicySet
from agent.policy.dataplane import DataplaneEvidence, resolve_dataplane
from agent.policy.reading import read_policies
from agent.twin.dataplane import (
    ALLOWED,
    DropHop,
    DropReason,
    FlowCheck,
    FlowResult,
    PodEndpoint,
)

log = logging.getLogger(__name__)

TWIN_CILIUM = ("API group cilium.io/v2 (the twin)",)
_DROPS = {
    DenyReason.DENY_RULE: DropReason.POLICY_DENY,
    DenyReason.DEFAULT_DENY: DropReason.POLICY_DENIED,
    DenyReason.L7_PROXY: DropReason.L7_PROXY,
}


def _protocol(name: str) -> Protocol:
    try:
        return Protocol(name.upper())
    except ValueError:
        return Protocol.TCP


def _endpoint(pod: PodEndpoint, namespaces: Mapping[str, Mapping[str, str]]) -> Endpoint:
    return Endpoint(
        namespace=pod.namespace,
        labels=pod.labels,
        namespace_labels=namespaces.get(pod.namespace, {}),
        service_account=pod.service_account,
        named_ports={
            (name, _protocol(proto)): port for (name, proto), port in pod.named_ports.items()
        },
    )


def compile_policies(
    policies: Sequence[Mapping[str, Any]],
    namespaces: Mapping[str, Mapping[str, str]],
    cilium_config: Mapping[str, str] | None = None,
) -> FlowCheck:
    reading = read_policies(policies)
    for warning in reading.warnings():
        log.warning("twin dataplane: %s", warning)
    dataplane = resolve_dataplane(
        DataplaneEvidence(cilium=TWIN_CILIUM, cilium_config=cilium_config)
    )
    for warning in dataplane.warnings:
        log.warning("twin dataplane: %s", warning)
    policy_set = PolicySet(reading.policies, dataplane=dataplane)
    namespace_labels = {name: dict(labels) for name, labels in namespaces.items()}

    def check(src: PodEndpoint, dst: PodEndpoint, port: int, protocol: str) -> FlowResult:
        verdict = policy_set.check(
            _endpoint(src, namespace_labels),
            _endpoint(dst, namespace_labels),
            PortRange.single(port, _protocol(protocol)),
        )
        if verdict.allowed:
            return ALLOWED
        reason = _DROPS[verdict.reason] if verdict.reason is not None else DropReason.POLICY_DENIED
        hop = DropHop(verdict.hop.value) if verdict.hop is not None else DropHop.INGRESS
        return FlowResult(False, reason, verdict.policies, hop)

    return check
