"""Attribution of measured cross-zone flows to a training job: the bytes its split costs.

Who calls it: the pipeline, when it records a split finding, with the latest `EgressReport` (one
per metrics refresh) indexed once (`EgressIndex`) and the job's pods (`job_ends`). Pure: plain data
in, plain data out.

Rules:
- A flow end is the job's when it lies in the job's namespace and its pod name is one of the job's
  pods, or (the exporter reporting no pod name) its owner name is one of the names the exporter
  gives the job's pods' owners (`owner_names`: the controller's name, and for a ReplicaSet also
  its Deployment's, the name Beyla reports as the top owner).
- A job's cross-zone bytes are the flows whose both ends are the job's: the traffic that
  co-locating the job removes (its traffic to storage or services elsewhere stays either way).
- Each row is a rate measured by one exporter from one counter; a job's figure is the sum of the
  rows of one (exporter, counter) pair, the first with any row in `PREFERENCE` (Beyla before OBI,
  the inter-zone counter before the flow counter), so two counters of the same bytes never add up.
- No row of the job: nothing measured (the estimate applies, labelled as such): its traffic is not
  seen yet, or there is none (a blocked split sends nothing; the estimate says $0 then).
What it does not do: query Prometheus, or price the bytes (`agent.diagnosis.waste`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from agent.model.cluster import Pod
from agent.model.egress import (
    EgressCounter,
    EgressExporter,
    EgressReport,
    FlowEnd,
    MeasuredEgress,
    ZoneFlow,
)
from agent.model.workload import REPLICA_SET

PREFERENCE: tuple[tuple[EgressExporter, EgressCounter], ...] = (
    (EgressExporter.BEYLA, EgressCounter.INTER_ZONE),
    (EgressExporter.BEYLA, EgressCounter.FLOW),
    (EgressExporter.OBI, EgressCounter.INTER_ZONE),
    (EgressExporter.OBI, EgressCounter.FLOW),
    (EgressExporter.QUERY, EgressCounter.QUERY),
)


@dataclass(frozen=True)
class JobEnds:
    """What names a job's pods in flow rows: its namespace, pod names and owner names."""

    namespace: str
    pods: frozenset[str]
    owners: frozenset[str]

    def holds(self, end: FlowEnd) -> bool:
        if end.namespace != self.namespace:
            return False
        return end.pod in self.pods if end.pod else end.owner in self.owners


def owner_names(pod: Pod) -> set[str]:
    """The owner names an exporter may report for `pod` (see the module)."""
    controller = pod.controller
    if controller is None:
        return set()
    names = {controller.name}
    if controller.kind == REPLICA_SET.kind and "-" in controller.name:
        names.add(controller.name.rsplit("-", 1)[0])  # its Deployment's name (`<name>-<hash>`)
    return names


def job_ends(namespace: str, pods: Iterable[Pod]) -> JobEnds:
    names: set[str] = set()
    owners: set[str] = set()
    for pod in pods:
        names.add(pod.name)
        owners |= owner_names(pod)
    return JobEnds(namespace=namespace, pods=frozenset(names), owners=frozenset(owners))


class EgressIndex:
    """A report's rows indexed by their source end's namespace and names, built once per report."""

    def __init__(self, report: EgressReport) -> None:
        self.report = report
        self._by_pod: dict[tuple[str, str], list[ZoneFlow]] = defaultdict(list)
        self._by_owner: dict[tuple[str, str], list[ZoneFlow]] = defaultdict(list)
        for flow in report.flows:
            if flow.src.pod:
                self._by_pod[(flow.src.namespace, flow.src.pod)].append(flow)
            else:
                self._by_owner[(flow.src.namespace, flow.src.owner)].append(flow)

    def job(self, ends: JobEnds) -> MeasuredEgress | None:
        """The job's measured cross-zone bytes per second, or None when no exporter answered or
        no row is the job's (its traffic not seen yet, or none: a blocked split sends nothing)."""
        if not self.report.measured:
            return None
        rows: list[ZoneFlow] = []
        for pod in ends.pods:
            rows.extend(self._by_pod.get((ends.namespace, pod), ()))
        for owner in ends.owners:
            rows.extend(self._by_owner.get((ends.namespace, owner), ()))
        sums: dict[tuple[EgressExporter, EgressCounter], tuple[float, int]] = {}
        for flow in rows:
            if not ends.holds(flow.dst):
                continue
            key = (flow.exporter, flow.counter)
            total, count = sums.get(key, (0.0, 0))
            sums[key] = (total + flow.bytes_per_second, count + 1)
        window = self.report.window
        for key in PREFERENCE:
            if key in sums:
                total, count = sums[key]
                return MeasuredEgress(bytes_per_second=total, exporter=key[0], window=window,
                                      flows=count)  # fmt: skip
        return None
