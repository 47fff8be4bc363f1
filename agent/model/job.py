"""A training job (or generic group) as topology found it: its pods, roles and coordinator.

Built by `agent.topology.jobs`; read by `agent.topology.flows` and `agent.diagnosis`. Plain data:
the grouping and role rules live in `agent.topology`, not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agent.model.cluster import JobKind, OwnerRef, Pod, TrainingJobObject


@dataclass(frozen=True, slots=True)
class JobRef:
    """What a finding is about: kind, namespace and name."""

    kind: JobKind
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Job:
    """A job's live pods (finished ones dropped), each pod's replica type and the coordinator.

    `replica_types` maps pod name -> lower-case replica type (`master`, `worker`, `ps`, `chief`,
    `evaluator`, `launcher`; `coordinator`/`worker` for generic groups). `group_ports` are the
    configured ports of a generic group (empty: use the coordinator's container ports).
    `controllers` maps pod name -> its controller owner, for restartability checks (generic
    groups only: a Kubeflow job is restarted through its job object).
    """

    ref: JobRef
    pods: tuple[Pod, ...]
    replica_types: Mapping[str, str]
    coordinator: Pod | None
    obj: TrainingJobObject | None = None
    group_ports: tuple[int, ...] = ()
    controllers: Mapping[str, OwnerRef | None] = field(default_factory=dict)

    @property
    def gpu_request(self) -> int:
        return sum(p.gpu_request for p in self.pods)
