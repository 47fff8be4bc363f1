"""Generic training groups of the twin: coordinator and worker pods that are not a Kubeflow job.

A scenario may declare groups (the lab's shape: a Deployment's pod coordinates, batch Job pods
train), each with the same keys as the agent's `diagnosis.groups` configuration: `name`,
`namespace`, `selector` (labels every member carries), `coordinator` and `workers` (labels that
tell the roles apart) and `ports` (the first is the port the workers dial on the coordinator).
The twin's training runtime runs such a group like a job: every worker dials the coordinator and
its ring neighbour, and the workers' GPUs train only while every one of those flows passes.

Parsed by `scenario.py`, used by `training_runtime.py`; `as_config` gives the agent configuration
that declares the same groups. Pure; it does not list pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agent.errors import InputError

DEFAULT_PORT = 29500


class GroupError(InputError):
    """A group declaration that cannot be used; the message names where and what."""


class GroupRole(StrEnum):
    COORDINATOR = "coordinator"
    WORKER = "worker"


@dataclass(frozen=True)
class TrainingGroup:
    name: str
    namespace: str
    selector: Mapping[str, str]
    coordinator: Mapping[str, str]
    workers: Mapping[str, str]
    ports: tuple[int, ...] = field(default=(DEFAULT_PORT,))

    @property
    def port(self) -> int:
        return self.ports[0] if self.ports else DEFAULT_PORT

    def role_of(self, namespace: str, labels: Mapping[str, str]) -> GroupRole | None:
        """The role of a pod with these labels in this group, or None if it is not a member."""
        if namespace != self.namespace or not _matches(labels, self.selector):
            return None
        if _matches(labels, self.coordinator):
            return GroupRole.COORDINATOR
        if _matches(labels, self.workers):
            return GroupRole.WORKER
        return None

    def as_config(self) -> dict[str, Any]:
        """The agent's `diagnosis.groups` entry for this group."""
        return {
            "name": self.name,
            "namespace": self.namespace,
            "selector": dict(self.selector),
            "coordinator": dict(self.coordinator),
            "workers": dict(self.workers),
            "ports": list(self.ports),
        }


def _matches(labels: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in wanted.items())


_KEYS = {"name", "namespace", "selector", "coordinator", "workers", "ports"}


def _labels(value: object, where: str, *, required: bool) -> dict[str, str]:
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping) or not value:
        raise GroupError(f"{where}: expected a non-empty mapping of labels, got {value!r}")
    return {str(k): str(v) for k, v in value.items()}


def parse_groups(data: object, where: str) -> list[TrainingGroup]:
    """Groups from a scenario's `groups:` list; a GroupError names the entry and key."""
    if data is None:
        return []
    if not isinstance(data, list):
        raise GroupError(f"{where}: expected a list of groups")
    out = []
    for i, item in enumerate(data):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise GroupError(f"{at}: expected a mapping")
        unknown = sorted(set(item) - _KEYS)
        if unknown:
            raise GroupError(f"{at}.{unknown[0]}: unknown key (known: {', '.join(sorted(_KEYS))})")
        for key in ("name", "namespace"):
            if not isinstance(item.get(key), str) or not item[key]:
                raise GroupError(f"{at}.{key}: required (a string)")
        ports = item.get("ports", [DEFAULT_PORT])
        if not isinstance(ports, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536 for p in ports
        ):
            raise GroupError(f"{at}.ports: expected a list of port numbers, got {ports!r}")
        out.append(
            TrainingGroup(
                name=item["name"],
                namespace=item["namespace"],
                selector=_labels(item.get("selector"), f"{at}.selector", required=True),
                coordinator=_labels(item.get("coordinator"), f"{at}.coordinator", required=True),
                workers=_labels(item.get("workers"), f"{at}.workers", required=True),
                ports=tuple(ports) or (DEFAULT_PORT,),
            )
        )
    names = [(g.namespace, g.name) for g in out]
    if len(set(names)) != len(names):
        raise GroupError(f"{where}: group names repeat within a namespace")
    return out
