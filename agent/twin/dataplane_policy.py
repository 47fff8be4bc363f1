"""Compiles the twin's stored network policies into the dataplane's `FlowCheck`.

Called by `dataplane.Dataplane` (through `cluster.TwinCluster`) whenever policies or namespaces
change. It reuses zonemedic's own pure policy evaluator (`agent.policy.PolicySet`, with Cilium's
and Kubernetes NetworkPolicy's semantics): the twin grows no second evaluator, so
the twin's dataplane and the agent's diagnosis agree by construction. A policy the evaluator cannot
parse is left out and logged, as Cilium rejects an invalid policy and keeps enforcing the others.
Verdicts map to Hubble drop reasons: no allow rule under default deny is POLICY_DENIED, an explicit
deny rule is POLICY_DENY.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from agent.errors import PolicyError
from agent.model.network import DenyReason, Endpoint, PortRange, Protocol
from agent.policy import Policy, PolicySet, parse_policy
from agent.twin.dataplane import (
    ALLOWED,
    DropHop,
    DropReason,
    FlowCheck,
    FlowResult,
    PodEndpoint,
)

log = logging.getLogger(__name__)


def _endpoint(pod: PodEndpoint, namespaces: Mapping[str, Mapping[str, str]]) -> Endpoint:
    return Endpoint(
        namespace=pod.namespace,
        labels=pod.labels,
        namespace_labels=namespaces.get(pod.namespace, {}),
        service_account=pod.service_account,
        named_ports=pod.named_ports,
    )


def compile_policies(
    policies: Sequence[Mapping[str, Any]], namespaces: Mapping[str, Mapping[str, str]]
) -> FlowCheck:
    parsed: list[Policy] = []
    for obj in policies:
        try:
            parsed.append(parse_policy(obj))
        except PolicyError as exc:
            meta = obj.get("metadata") or {}
            log.warning(
                "twin dataplane: ignoring %s %s/%s: %s",
                obj.get("kind"), meta.get("namespace", ""), meta.get("name"), exc,
            )  # fmt: skip
    policy_set = PolicySet(parsed)
    namespace_labels = {name: dict(labels) for name, labels in namespaces.items()}

    def check(src: PodEndpoint, dst: PodEndpoint, port: int, protocol: str) -> FlowResult:
        try:
            proto = Protocol(protocol.upper())
        except ValueError:
            proto = Protocol.TCP
        verdict = policy_set.check(
            _endpoint(src, namespace_labels),
            _endpoint(dst, namespace_labels),
            PortRange.single(port, proto),
        )
        if verdict.allowed:
            return ALLOWED
        reason = (
            DropReason.POLICY_DENY
            if verdict.reason is DenyReason.DENY_RULE
            else DropReason.POLICY_DENIED
        )
        hop = DropHop(verdict.hop.value) if verdict.hop is not None else DropHop.INGRESS
        return FlowResult(False, reason, verdict.policies, hop)

    return check
