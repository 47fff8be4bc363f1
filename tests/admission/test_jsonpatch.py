"""The JSON patch between two documents: applied, it turns the first into the second, whether
the second shares parts with the first (as the decision's planned object does) or is a copy;
the operations are the same either way."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from agent.admission.jsonpatch import apply, diff

KEYS = ("a", "b", "spec", "x/y", "t~1")


def document(rng: random.Random, depth: int = 0) -> Any:
    if depth >= 3 or rng.random() < 0.3:
        return rng.choice((0, 1, 1.0, "v", True, None, [1, 2], [{"k": 1}]))
    return {rng.choice(KEYS): document(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def changed(rng: random.Random, doc: Any, depth: int = 0) -> Any:
    """`doc` with random changes: new maps along the changed paths, the rest shared."""
    if not isinstance(doc, dict) or depth >= 3 or rng.random() < 0.2:
        return document(rng, depth) if rng.random() < 0.5 else doc
    out = dict(doc)
    for key in list(out):
        roll = rng.random()
        if roll < 0.15:
            del out[key]
        elif roll < 0.5:
            out[key] = changed(rng, out[key], depth + 1)
    if rng.random() < 0.3:
        out[rng.choice(KEYS)] = document(rng, depth + 1)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_a_sharing_document_is_patched_as_its_copy(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        before = document(rng)
        after = changed(rng, before)
        shared = diff(before, after)
        assert shared == diff(copy.deepcopy(before), copy.deepcopy(after))
        assert apply(before, shared) == after


def test_keys_are_escaped_and_the_root_replaced() -> None:
    assert diff({"a/b": {"c~d": 1}}, {"a/b": {"c~d": 2}}) == [{"op": "replace", "path": "/a~1b/c~0d", "value": 2}]
    assert diff(1, 2) == [{"op": "replace", "path": "", "value": 2}]
    assert diff(1, True) == [{"op": "replace", "path": "", "value": True}]
