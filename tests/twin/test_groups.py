"""Generic training groups: which pods belong, in which role; the agent's configuration for them."""

from __future__ import annotations

import pytest

from agent.twin.groups import GroupRole, TrainingGroup

GROUP = TrainingGroup(
    name="g",
    namespace="lab",
    selector={"app": "x"},
    coordinator={"role": "coordinator"},
    workers={"role": "worker"},
)


@pytest.mark.parametrize(
    ("namespace", "labels", "expected"),
    [
        ("lab", {"app": "x", "role": "coordinator", "zone": "b"}, GroupRole.COORDINATOR),
        ("lab", {"app": "x", "role": "worker"}, GroupRole.WORKER),
        ("lab", {"app": "x", "role": "other"}, None),  # matches the selector, no role
        ("lab", {"app": "y", "role": "worker"}, None),  # not selected
        ("other", {"app": "x", "role": "worker"}, None),  # another namespace
        ("lab", {"role": "worker"}, None),
    ],
)
def test_role_of(namespace: str, labels: dict[str, str], expected: GroupRole | None) -> None:
    assert GROUP.role_of(namespace, labels) is expected


def test_default_port_and_config() -> None:
    assert GROUP.port == 29500
    assert GROUP.as_config()["ports"] == [29500]
