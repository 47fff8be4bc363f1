"""The merge patch of a template: `merged_view` (shares what the patch does not reach) reads as
`apply_merge_patch` (copies), on random documents and patches, and neither changes its inputs."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from agent.remediation.template import apply_merge_patch, merged_view

KEYS = ("a", "b", "c", "spec", "labels")


def document(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth >= 3 or roll < 0.25:
        return rng.choice((1, "x", True, [1, {"k": "v"}], ""))
    return {rng.choice(KEYS): document(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def patch_of(rng: random.Random, depth: int = 0) -> Any:
    if depth >= 3 or rng.random() < 0.3:
        return rng.choice((None, 2, "y", [3], {"new": "z"}))
    return {rng.choice(KEYS): patch_of(rng, depth + 1) for _ in range(rng.randint(1, 3))}


@pytest.mark.parametrize("seed", range(20))
def test_the_merged_view_reads_as_the_applied_patch(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        target, patch = document(rng), patch_of(rng)
        target_before, patch_before = copy.deepcopy(target), copy.deepcopy(patch)
        applied = apply_merge_patch(target, patch)
        view = merged_view(target, patch)
        assert view == applied
        assert target == target_before and patch == patch_before


def test_the_applied_patch_is_a_copy_and_the_view_shares_what_the_patch_leaves() -> None:
    target = {"spec": {"containers": [{"name": "c"}], "nodeSelector": {"pool": "p1"}}}
    patch = {"spec": {"nodeSelector": {"zone": "a"}}}
    applied = apply_merge_patch(target, patch)
    view = merged_view(target, patch)
    assert applied == view == {"spec": {"containers": [{"name": "c"}],
                                        "nodeSelector": {"pool": "p1", "zone": "a"}}}  # fmt: skip
    assert applied["spec"]["containers"] is not target["spec"]["containers"]
    assert view["spec"]["containers"] is target["spec"]["containers"]
    assert view["spec"] is not target["spec"] and target["spec"]["nodeSelector"] == {"pool": "p1"}
