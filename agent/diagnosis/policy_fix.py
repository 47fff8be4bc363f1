"""The policy-side fix: the smallest allow policy that admits exactly a job's denied flows.

Called by the `whatif --policy-fix` command (for the case co-location cannot help: no zone has room
for the gang, or the policies block the job inside the target zone too). From the job's required
flows (`agent.topology.flows`) that the evaluator denies by default (`PolicySet.check`), it builds
one CiliumNetworkPolicy in the job's namespace: its endpointSelector and every peer selector are
the job's own job-name label (the workload table's, `agent.model.workload`), its rules one per
denied direction and port range, and `enableDefaultDeny: {ingress: false, egress: false}`, so it
only adds allows and never puts a pod in default deny. A flow denied by a deny rule cannot be opened
by an allow (deny beats allow), nor one through Cilium's L7 proxy, nor any flow under a plain
Kubernetes dataplane (Cilium policies are not enforced there; a NetworkPolicy fix is not built
yet): `PolicyFixError` says which. The caller proves the fix with the what-if
(`agent.diagnosis.whatif.blast_radius`). zonemedic never applies it: network policy belongs to the
security team. Pure: no I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from agent.errors import PolicyFixError
from agent.model.cluster import ClusterState, Pod
from agent.model.job import Job
from agent.model.network import DenyReason, Endpoint, Hop, PortRange, Protocol
from agent.model.workload import JobKind, workload
from agent.policy import PolicySet
from agent.topology.flows import required_flows


@dataclass(frozen=True)
class PolicyFix:
    """The proposed policy manifest, its YAML and its diff against nothing (a new object)."""

    manifest: Mapping[str, Any]

    @property
    def yaml(self) -> str:
        return yaml.safe_dump(dict(self.manifest), sort_keys=False)

    def diff(self) -> str:
        name = self.manifest["metadata"]["name"]
        lines = difflib.unified_diff([], self.yaml.splitlines(keepends=True),
                                     fromfile="/dev/null", tofile=f"{name}.yaml")  # fmt: skip
        return "".join(lines)


def _endpoint(pod: Pod, state: ClusterState) -> Endpoint:
    ns = state.namespaces.get(pod.namespace)
    return Endpoint(pod.namespace, pod.labels, ns.labels if ns else {}, pod.service_account,
                    pod.named_ports())  # fmt: skip


def _port_entry(ports: PortRange) -> dict[str, Any]:
    entry: dict[str, Any] = {"port": str(ports.first)}
    if ports.last != ports.first:
        entry["endPort"] = ports.last
    if ports.protocol is not Protocol.ANY:
        entry["protocol"] = ports.protocol.value
    return entry


def propose_fix(job: Job, state: ClusterState, policies: PolicySet) -> PolicyFix | None:
    """The fix for `job`'s denied required flows; None when none is denied."""
    if job.ref.kind is JobKind.GROUP:
        raise PolicyFixError(f"{job.ref}: a generic group has no job-name label to select "
                               "its pods by")  # fmt: skip
    key = workload(job.ref.kind).labels.job_name
    values = {p.labels.get(key) for p in job.pods}
    if len(values) != 1 or None in values:
        raise PolicyFixError(f"{job.ref}: its pods do not all carry {key}")
    if not policies.dataplane.cilium:
        raise PolicyFixError(f"{job.ref}: the dataplane is plain Kubernetes; a NetworkPolicy "
                               "fix is not built yet")  # fmt: skip
    label = {key: values.pop()}
    denied: dict[Hop, list[PortRange]] = {Hop.INGRESS: [], Hop.EGRESS: []}
    for rule in required_flows(job):
        for src in rule.sources:
            for dst in rule.destinations:
                if src is dst:
                    continue
                verdict = policies.check(_endpoint(src, state), _endpoint(dst, state), rule.ports)
                if verdict.allowed:
                    continue
                # every denying hop must open: the trace names them all
                trace = policies.trace(_endpoint(src, state), _endpoint(dst, state), rule.ports)
                for hop in trace.denials():
                    why = hop.verdict
                    if why is None:
                        continue
                    if why.reason is not DenyReason.DEFAULT_DENY:
                        reason = why.reason.value if why.reason else "denied"
                        raise PolicyFixError(
                            f"{job.ref}: {src.name} -> {dst.name} port {rule.ports} is denied by "
                            f"{', '.join(why.policies)} ({reason} at {hop.hop.value}): an allow "
                            "policy cannot open it"
                        )
                    if rule.ports not in denied[hop.hop]:
                        denied[hop.hop].append(rule.ports)
    if not denied[Hop.INGRESS] and not denied[Hop.EGRESS]:
        return None
    spec: dict[str, Any] = {
        "endpointSelector": {"matchLabels": dict(label)},
        "enableDefaultDeny": {"ingress": False, "egress": False},
    }
    if denied[Hop.INGRESS]:
        spec["ingress"] = [{"fromEndpoints": [{"matchLabels": dict(label)}],
                            "toPorts": [{"ports": [_port_entry(p)]}]}
                           for p in denied[Hop.INGRESS]]  # fmt: skip
    if denied[Hop.EGRESS]:
        spec["egress"] = [{"toEndpoints": [{"matchLabels": dict(label)}],
                           "toPorts": [{"ports": [_port_entry(p)]}]}
                          for p in denied[Hop.EGRESS]]  # fmt: skip
    manifest = {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"name": f"zonemedic-allow-{job.ref.name}"[:253],
                     "namespace": job.ref.namespace},
        "spec": spec,
    }  # fmt: skip
    return PolicyFix(manifest)
