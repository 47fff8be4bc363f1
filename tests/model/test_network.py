"""Network vocabulary: port ranges, hashable endpoints, verdict defaults."""

from __future__ import annotations

import pytest

from agent.model.network import DenyReason, Endpoint, FlowVerdict, Hop, PortRange, Protocol


@pytest.mark.parametrize(
    ("ports", "text"),
    [
        (PortRange(23456, 23456), "23456"),
        (PortRange(1024, 65535), "1024-65535"),
        (PortRange.single(22), "22"),
        (PortRange.single(53, Protocol.UDP), "53"),
    ],
)
def test_port_range_str(ports: PortRange, text: str) -> None:
    assert str(ports) == text


def test_single_defaults_to_tcp() -> None:
    assert PortRange.single(22) == PortRange(22, 22, Protocol.TCP)
    assert PortRange.single(22, Protocol.UDP).protocol is Protocol.UDP


@pytest.mark.parametrize(("first", "last"), [(10, 9), (-1, 5), (1, 65536)])
def test_invalid_port_range(first: int, last: int) -> None:
    with pytest.raises(ValueError, match="invalid port range"):
        PortRange(first, last)


def test_enum_values() -> None:
    assert [p.value for p in Protocol] == ["TCP", "UDP", "SCTP", "ANY"]
    assert (Hop.EGRESS.value, Hop.INGRESS.value) == ("egress", "ingress")
    assert (DenyReason.DEFAULT_DENY.value, DenyReason.DENY_RULE.value) == ("default_deny", "deny_rule")


def test_endpoint_is_hashable_and_compares_by_value() -> None:
    a = Endpoint("ml", {"app": "x"}, {"team": "t"}, "sa", {"http": 80})
    b = Endpoint("ml", {"app": "x"}, {"team": "t"}, "sa", {"http": 80})
    c = Endpoint("ml", {"app": "y"})
    assert a == b
    assert hash(a) == hash(b)
    assert a != c
    assert len({a, b, c}) == 2
    assert a.labels == {"app": "x"}
    assert a.named_ports["http"] == 80


def test_endpoint_copies_its_mappings() -> None:
    labels = {"app": "x"}
    endpoint = Endpoint("ml", labels)
    labels["app"] = "changed"
    assert endpoint.labels["app"] == "x"
    assert endpoint.namespace_labels == {}
    assert endpoint.service_account == "default"


def test_verdict_defaults() -> None:
    assert FlowVerdict(allowed=True) == FlowVerdict(True, None, None, ())
