"""Render an explanation (`agent.policy.explanation.Explanation.to_dict()`) and reachability
matrices for people: the `explain` command's text output and the Slack `/zonemedic explain` reply.

The first line is the flow and its verdict; then one line per hop (per protocol when the query
spans several): enforced or not and by which policies (with why: `enableDefaultDeny`,
`policyTypes`), the verdict with Hubble's drop reason, and the rules that matched (policy, rule
path, peer and ports); then the identity each side was judged by (the zone-mirroring label, the
labels the dataplane's filter leaves out). Every line is printable (`agent.parsing.printable`).
What it does not do: decide anything or send anything. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.parsing.printable import printable
from agent.policy.explanation import Matrix

_VERDICT_TEXT = {
    "allowed": "allowed",
    "deny_rule": "denied by a deny rule",
    "default_deny": "denied by default: no allow rule matches",
    "l7_proxy": "dropped by Cilium's L7 proxy (an L7 rule on the port)",
}


def _hop_lines(hop: Mapping[str, Any], *, protocols: int) -> list[str]:
    proto = f" {hop['protocol']}" if protocols > 1 else ""
    head = f"{hop['hop']}{proto} at {hop['endpoint']}: "
    if not hop["selected_by"]:
        head += "no policy selects it: not enforced"
    elif not hop["enforced"]:
        head += "not enforced (" + "; ".join(
            f"{b['policy']} {b['section']}: {b['why']}" for b in hop["selected_by"]) + ")"
    else:
        head += "enforced by " + "; ".join(
            f"{b['policy']} {b['section']} ({b['why']})"
            for b in hop["selected_by"] if b["enforces"])
    verdict = _VERDICT_TEXT[hop["verdict"]]
    if hop["hubble"]:
        verdict += f" (Hubble {hop['hubble']})"
    lines = [head, f"  -> {verdict}"]
    if hop["verdict"] == "default_deny":
        lines.append("     made default deny by: " + ", ".join(hop["policies"]))
    for rule in hop["rules"]:
        lines.append(f"     {rule['effect']} rule {rule['policy']} {rule['path']}: "
                     f"peer {rule['peer']}; ports {rule['ports']}")
    return lines


def _identity_lines(side: str, ident: Mapping[str, Any]) -> list[str]:
    pod = ident["pod"] or "(a pod to be)"
    lines = [f"{side} {ident['namespace']}/{pod} judged by: service account "
             f"{ident['service_account']}; namespace labels "
             + (", ".join(f"{k}={v}" for k, v in ident["namespace_labels"].items()) or "none")]
    if ident["zone_label"]:
        lines.append("  zone label: " + ", ".join(f"{k}={v}" for k, v in ident["zone_label"].items()))
    pod_labels = {k: v for k, v in ident["labels"].items() if not k.startswith("io.")}
    lines.append("  identity labels: " + (", ".join(f"{k}={v}" for k, v in pod_labels.items())
                                          or "none"))
    for item in ident["excluded_labels"]:
        lines.append(f"  left out of the identity: {item['key']}={item['value']} ({item['why']})")
    return lines


def render_explanation(answer: Mapping[str, Any]) -> str:
    """The explanation as lines for a terminal or a chat message."""
    verdict = "ALLOWED" if answer["allowed"] else "DENIED at " + " and ".join(answer["denied_at"])
    lines = [f"{answer['from']} -> {answer['to']} port {answer['port']}: {verdict}"]
    protocols = len({h["protocol"] for h in answer["hops"]})
    for hop in answer["hops"]:
        lines.extend(_hop_lines(hop, protocols=protocols))
    lines.extend(_identity_lines("from", answer["identities"]["from"]))
    lines.extend(_identity_lines("to", answer["identities"]["to"]))
    for caveat in answer["caveats"]:
        lines.append(f"caveat: {caveat['policy']}: {caveat['feature']} {caveat['detail']}".rstrip())
    for item in answer["uncertain"]:
        lines.append(f"uncertain: a policy that cannot be read may select it: {item}")
    lines.append(f"dataplane: {answer['dataplane']}")
    return "\n".join(printable(line) for line in lines) + "\n"


def render_matrices(tables: Sequence[Matrix]) -> str:
    """One reachability table per port, each under a `port P/PROTO` line (the pod names are
    validated names, so the table's tabs and newlines are its own)."""
    blocks = [f"port {t.to_dict()['port']}\n{t.pretty()}" for t in tables]
    return "\n\n".join(blocks) + "\n"
