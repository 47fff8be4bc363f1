"""One port entry of a policy rule: `{port, endPort, protocol}`, as Cilium or Kubernetes reads it.

Who calls it: `agent.policy.cilium_policy` (the `ports` of a `toPorts` rule) and
`agent.policy.kubernetes_policy` (a NetworkPolicy rule's `ports`). The protocols Cilium's
validation accepts: TCP, UDP, SCTP, ANY (the default), ICMP, ICMPv6 and the extended IP protocols
VRRP, IGMP, GRE, IPIP, IPv6, ESP, AH, which take no port or port 0; Kubernetes: TCP (the default),
UDP, SCTP. A port is a number (as text: ASCII digits only) or an IANA service name, lower-cased as
Cilium does; `endPort` needs a numeric port. Errors are `PolicyError` naming the policy and the
field. What it does not do: read L7 rules or anything else of a port rule (the Cilium reader does).
"""

from __future__ import annotations

import re
from typing import Any

from agent.model.network import Protocol
from agent.parsing.numbers import NumberError, parse_int
from agent.policy.context import ManifestContext
from agent.policy.rule import PortMatch

_PORT_FIELDS = frozenset({"port", "endPort", "protocol"})

# IANA service name, as Kubernetes container port names: at most 15 of [a-z0-9-], a letter.
_PORT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,13}[A-Za-z0-9])?")
_L4_PROTOCOLS = frozenset({"TCP", "UDP", "SCTP", "ANY"})
_ICMP_PROTOCOLS = frozenset({"ICMP", "ICMPV6"})

# IP protocols without transport ports: Cilium accepts them with no port or port 0
_EXTENDED_PROTOCOLS = frozenset({"VRRP", "IGMP", "GRE", "IPIP", "IPV6", "ESP", "AH"})
_OTHER_PROTOCOLS = _ICMP_PROTOCOLS | _EXTENDED_PROTOCOLS


def _port_number(text: str, path: str, ctx: ManifestContext) -> int:
    """A port written as text ("80"): ASCII digits only (the caller checks the port range)."""
    try:
        return parse_int(text, field=path, minimum=0)
    except NumberError as exc:
        raise ctx.error(path, str(exc).removeprefix(f"{path}: ")) from None


def parse_port(raw: Any, *, cilium: bool, path: str, ctx: ManifestContext) -> PortMatch:
    """One port entry: `{port, endPort, protocol}` (Cilium: protocol default ANY; k8s: TCP)."""
    raw = ctx.object(raw, _PORT_FIELDS, path=path)
    proto_raw = raw.get("protocol")
    if proto_raw is None or proto_raw == "":
        protocol = Protocol.ANY.value if cilium else Protocol.TCP.value
    elif isinstance(proto_raw, str) and proto_raw.upper() in (_L4_PROTOCOLS | _OTHER_PROTOCOLS):
        protocol = proto_raw.upper()
        if not cilium and protocol not in ("TCP", "UDP", "SCTP"):
            raise ctx.error(f"{path}.protocol", f"unknown protocol {proto_raw!r}")
    else:
        raise ctx.error(f"{path}.protocol", f"unknown protocol {proto_raw!r}")

    port_raw = raw.get("port")
    end_raw = raw.get("endPort")
    number: int | None = None
    name: str | None = None
    if port_raw is None or port_raw == "":
        if cilium and protocol in _L4_PROTOCOLS | _ICMP_PROTOCOLS:  # as upstream validation
            raise ctx.error(f"{path}.port", 'missing (use "0" for every port)')
        number = None
    elif isinstance(port_raw, bool):
        raise ctx.error(f"{path}.port", f"expected a port number or name, got {port_raw!r}")
    elif isinstance(port_raw, int):
        number = port_raw
    elif isinstance(port_raw, str):
        if port_raw.isascii() and port_raw.isdigit():
            number = _port_number(port_raw, f"{path}.port", ctx)
        elif _PORT_NAME.fullmatch(port_raw) and any(c.isalpha() for c in port_raw):
            # Cilium lower-cases port names on both sides (policy and container ports).
            name = port_raw.lower()
        else:
            raise ctx.error(f"{path}.port", f"invalid port name {port_raw!r}")
    else:
        raise ctx.error(f"{path}.port", f"expected a port number or name, got {port_raw!r}")
    if number is not None and not 0 <= number <= 65535:
        raise ctx.error(f"{path}.port", f"port {number} out of range 0-65535")
    if protocol in _EXTENDED_PROTOCOLS and (name is not None or number):
        raise ctx.error(f"{path}.port", f"{protocol} has no ports: the port must be empty or 0")

    end: int | None = None
    if end_raw is not None:
        if isinstance(end_raw, bool) or not isinstance(end_raw, int | str):
            raise ctx.error(f"{path}.endPort", f"expected a port number, got {end_raw!r}")
        if isinstance(end_raw, str):
            end_raw = _port_number(end_raw, f"{path}.endPort", ctx)
        end = end_raw
        if name is not None:
            raise ctx.error(f"{path}.endPort", "not allowed with a named port")
        if not number:
            raise ctx.error(f"{path}.endPort", "needs a numeric port")
        if not number <= end <= 65535:
            raise ctx.error(f"{path}.endPort", f"{end} must be between port {number} and 65535")

    if name is not None:
        return PortMatch(protocol=protocol, name=name)
    if not number:  # absent or 0: every port
        return PortMatch(protocol=protocol)
    return PortMatch(first=number, last=end if end is not None else number, protocol=protocol)
