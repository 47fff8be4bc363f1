"""The connections each kind of training job needs (the Kubeflow training-operator v1 kinds).

- PyTorchJob, XGBoostJob, PaddleJob, JAXJob: every non-coordinator pod -> coordinator on the
  coordinator's named port; collective traffic between every ordered pair on TCP 1024-65535.
- TFJob: every ordered pair of pods (evaluators excluded) on `tfjob-port`.
- MPIJob (v1 and v2beta1): launcher -> each worker on TCP 22 (`ssh`); workers -> launcher and
  worker <-> worker on TCP 1024-65535.
- TrainJob and JobSet, torch (or any gang without a launcher): every rank -> rank 0 (the
  coordinator) on its port (the Trainer's 29500, declared as the trainer container's port);
  collective traffic between every ordered pair of ranks on TCP 1024-65535.
- TrainJob and JobSet with a launcher (MPI): launcher -> each node on the nodes' `ssh` port
  (default 22); nodes -> launcher and node <-> node on TCP 1024-65535. Initializers are not part
  of the job's pods (`agent.topology.jobs`), so they need no flow.
- Group: every worker -> coordinator on the configured ports (default: the coordinator's
  container ports).

Named ports resolve from the coordinator's container ports, else the table default (PaddleJob and
JAXJob: the coordinator's first container port, else the default). A JobSet's (or TrainJob's)
coordinator port is the master-port env var its replicated job's template sets, else its first
container port, else 29500. A job without a coordinator pod
needs no coordinator flows. Called by `agent.diagnosis`. Pure.
"""

from __future__ import annotations

from agent.model.cluster import Pod
from agent.model.flow import FlowRule
from agent.model.job import Job
from agent.model.network import PortRange, Protocol
from agent.model.workload import JobKind, workload

COLLECTIVE_PORTS = PortRange(1024, 65535, Protocol.TCP)

def job_port(kind: JobKind, coordinator: Pod | None) -> PortRange:
    """The coordinator's port for `kind` (its descriptor's): by name, else (Paddle, JAX) its
    first port, else the default."""
    rule = workload(kind).coordinator
    if coordinator is not None:
        for port in coordinator.ports:
            if port.name == rule.port_name:
                return PortRange.single(port.port, port.protocol)
        if rule.first_port and coordinator.ports:
            first = coordinator.ports[0]
            return PortRange.single(first.port, first.protocol)
    return PortRange.single(rule.default_port)


def launcher_port(kind: JobKind, ranks: tuple[Pod, ...]) -> PortRange:
    """The port a launcher of `kind` dials its ranks on: their port named as its descriptor
    says (`ssh`), else the descriptor's default."""
    launcher = workload(kind).coordinator.launcher
    if launcher is None:
        raise ValueError(f"{kind} has no launcher")
    for pod in ranks:
        for port in pod.ports:
            if port.name == launcher.port_name:
                return PortRange.single(port.port, port.protocol)
    return PortRange.single(launcher.default_port)


def required_flows(job: Job) -> tuple[FlowRule, ...]:
    """The flow rules `job` needs to train."""
    kind = job.ref.kind
    pods = job.pods
    coord = job.coordinator
    others = tuple(p for p in pods if p is not coord)
    rules: list[FlowRule] = []
    launcher = workload(kind).coordinator.launcher if kind is not JobKind.GROUP else None
    if (launcher is not None and coord is not None
            and job.replica_types.get(coord.name) == launcher.replica_type):  # fmt: skip
        ranks = tuple(p for p in others if job.replica_types.get(p.name) != launcher.replica_type)
        return (
            FlowRule((coord,), ranks, launcher_port(kind, ranks), "launcher -> node (ssh)"),
            FlowRule(ranks, (coord,), COLLECTIVE_PORTS, "node -> launcher"),
            FlowRule(ranks, ranks, COLLECTIVE_PORTS, "node <-> node"),
        )
    if kind is JobKind.GROUP:
        if coord is None:
            return ()
        workers = tuple(p for p in pods if job.replica_types.get(p.name) == "worker")
        ports = (
            [PortRange.single(p) for p in job.group_ports]
            if job.group_ports
            else [PortRange.single(p.port, p.protocol) for p in coord.ports]
        )
        return tuple(FlowRule(workers, (coord,), r, "worker -> coordinator") for r in ports)
    if kind is JobKind.TF:
        members = tuple(p for p in pods if job.replica_types.get(p.name) != "evaluator")
        return (FlowRule(members, members, job_port(kind, coord), "all pairs on tfjob-port"),)
    if kind is JobKind.MPI:
        if coord is None:
            return (FlowRule(pods, pods, COLLECTIVE_PORTS, "worker <-> worker"),)
        return (
            FlowRule((coord,), others, job_port(kind, coord), "launcher -> worker (ssh)"),
            FlowRule(others, (coord,), COLLECTIVE_PORTS, "worker -> launcher"),
            FlowRule(others, others, COLLECTIVE_PORTS, "worker <-> worker"),
        )
    if coord is not None:
        port = (PortRange.single(job.coordinator_port) if job.coordinator_port is not None
                else job_port(kind, coord))  # fmt: skip
        rules.append(FlowRule(others, (coord,), port, "-> coordinator"))
    rules.append(FlowRule(pods, pods, COLLECTIVE_PORTS, "collective, all pairs"))
    return tuple(rules)
