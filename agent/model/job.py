"""A job's identity (`JobRef`), and a training job (or generic group) as topology found it.

`JobRef` names a job everywhere: the watch cache's indexes and change notices, the Prometheus
and Alertmanager sources, findings, plans and the runtime. `Job` is built by `agent.topology.jobs`
and read by `agent.topology.flows` and `agent.diagnosis`. Plain data: the grouping and role rules
live in `agent.topology`, not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agent.model.cluster import OwnerRef, Pod, TrainingJobObject
from agent.model.workload import JobKind


@dataclass(frozen=True, slots=True, order=True)
class JobRef:
    """Which job: kind, namespace and name (ordered by them, in that order)."""

    kind: JobKind
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, kind: str, namespace: str, name: str) -> JobRef | None:
        """The ref of a job whose kind is text (a stored incident's, a label's); None when no
        kind has that name."""
        try:
            return cls(JobKind(kind), namespace, name)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class Job:
    """A job's live pods (finished ones dropped), each pod's replica type and the coordinator.

    `replica_types` maps pod name -> lower-case replica type (`master`, `worker`, `ps`, `chief`,
    `evaluator`, `launcher`; `coordinator`/`worker` for generic groups). `group_ports` are the
    configured ports of a generic group (empty: use the coordinator's container ports).
    `controllers` maps pod name -> its controller owner, for restartability checks (generic
    groups only: a Kubeflow job is restarted through its job object). `coordinator_port`: the
    port the job's object sets for its coordinator (a JobSet template's master-port env var),
    when it does.
    """

    ref: JobRef
    pods: tuple[Pod, ...]
    replica_types: Mapping[str, str]
    coordinator: Pod | None
    obj: TrainingJobObject | None = None
    group_ports: tuple[int, ...] = ()
    controllers: Mapping[str, OwnerRef | None] = field(default_factory=dict)
    coordinator_port: int | None = None

    @property
    def gpu_request(self) -> int:
        return sum(p.gpu_request for p in self.pods)
