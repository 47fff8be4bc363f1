"""ManifestContext: every problem it raises names the policy and the field path (table-driven)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agent.errors import PolicyError
from agent.policy.context import ManifestContext

CTX = ManifestContext("NetworkPolicy/ml/a")
KNOWN = frozenset({"podSelector", "ingress"})


@pytest.mark.parametrize(
    ("read", "message"),
    [
        (lambda: CTX.object(["x"], KNOWN, path="spec"),
         "NetworkPolicy/ml/a: spec: expected an object, got list"),
        (lambda: CTX.object({"podSelector": {}, "egres": []}, KNOWN, path="spec"),
         "NetworkPolicy/ml/a: spec.egres: unknown field"),
        (lambda: CTX.check_fields({"b": 1, "a": 2}, KNOWN, path="spec"),
         "NetworkPolicy/ml/a: spec.a: unknown field"),
        (lambda: CTX.optional_list({"ingress": {}}, "ingress", path="spec"),
         "NetworkPolicy/ml/a: spec.ingress: expected a list, got dict"),
    ],
)
def test_problems_name_the_policy_and_the_field(read: Callable[[], Any], message: str) -> None:
    with pytest.raises(PolicyError) as info:
        read()
    assert str(info.value) == message


def test_what_is_well_formed_is_returned_as_it_is() -> None:
    raw = {"podSelector": {}, "ingress": [{}]}
    assert CTX.object(raw, KNOWN, path="spec") is raw
    assert CTX.optional_list(raw, "ingress", path="spec") == [{}]
    assert CTX.optional_list({"ingress": None}, "ingress", path="spec") is None
    assert CTX.optional_list({}, "ingress", path="spec") is None
    assert str(CTX.error("spec.x", "bad")) == "NetworkPolicy/ml/a: spec.x: bad"
