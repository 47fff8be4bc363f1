"""Attribution of measured cross-zone flows to a job (pure): both ends must be the job's pods (by
pod name, else by owner name), one (exporter, counter) pair per job; nothing measured (None) when
no exporter answered or no row is the job's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.diagnosis.egress import EgressIndex, JobEnds, job_ends, owner_names
from agent.model.cluster import OwnerRef, Pod
from agent.model.egress import (
    EgressCounter,
    EgressExporter,
    EgressReport,
    FlowEnd,
    ZoneFlow,
)

AT = datetime(2026, 3, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
BEYLA, OBI = EgressExporter.BEYLA, EgressExporter.OBI
INTER, FLOW = EgressCounter.INTER_ZONE, EgressCounter.FLOW
RESNET = JobEnds(namespace="ml", pods=frozenset({"resnet-master-0", "resnet-worker-0",
                                                 "resnet-worker-1"}),
                 owners=frozenset({"resnet"}))  # fmt: skip


def pod_end(name: str, namespace: str = "ml", owner: str = "resnet") -> FlowEnd:
    return FlowEnd(namespace=namespace, owner=owner, pod=name)


def owner_end(owner: str, namespace: str = "ml") -> FlowEnd:
    return FlowEnd(namespace=namespace, owner=owner)


def flow(src: FlowEnd, dst: FlowEnd, rate: float, exporter: EgressExporter = BEYLA,
         counter: EgressCounter = FLOW) -> ZoneFlow:  # fmt: skip
    return ZoneFlow(src=src, dst=dst, bytes_per_second=rate, exporter=exporter, counter=counter,
                    src_zone="zone-a", dst_zone="zone-b")  # fmt: skip


def report(*flows: ZoneFlow, exporters: frozenset[EgressExporter] = frozenset({BEYLA}),
           available: bool = True) -> EgressReport:  # fmt: skip
    return EgressReport(available=available, at=AT, window=HOUR, flows=flows, exporters=exporters)


W0, W1, M0 = pod_end("resnet-worker-0"), pod_end("resnet-worker-1"), pod_end("resnet-master-0")


@pytest.mark.parametrize(
    ("rows", "exporters", "rate", "exporter", "count"),
    [
        # both directions between the job's own pods count, each once
        ((flow(W0, M0, 100.0), flow(M0, W0, 40.0)), {BEYLA}, 140.0, BEYLA, 2),
        # a flow to a pod of another job, or of another namespace, is not the split's
        ((flow(W0, M0, 100.0), flow(W0, pod_end("bert-0", owner="bert"), 7.0),
          flow(W0, pod_end("resnet-worker-0", namespace="other"), 9.0)), {BEYLA}, 100.0, BEYLA, 1),
        # without pod names the owner names the job's pods
        ((flow(owner_end("resnet"), owner_end("resnet"), 55.0),), {BEYLA}, 55.0, BEYLA, 1),
        # with a pod name the pod decides, whatever the owner says
        ((flow(pod_end("stranger", owner="resnet"), M0, 5.0), flow(W1, M0, 6.0)), {BEYLA}, 6.0,
         BEYLA, 1),
        # one counter per job: the inter-zone counter before the flow counter of the same bytes
        ((flow(W0, M0, 100.0, counter=FLOW), flow(W0, M0, 98.0, counter=INTER)), {BEYLA}, 98.0,
         BEYLA, 1),
        # Beyla before OBI when both run
        ((flow(W0, M0, 100.0, exporter=OBI), flow(W0, M0, 97.0)), {BEYLA, OBI}, 97.0, BEYLA, 1),
        ((flow(W0, M0, 100.0, exporter=OBI),), {BEYLA, OBI}, 100.0, OBI, 1),
    ],
)  # fmt: skip
def test_a_jobs_measured_cross_zone_bytes(
    rows: tuple[ZoneFlow, ...], exporters: set[EgressExporter], rate: float,
    exporter: EgressExporter, count: int,
) -> None:
    found = EgressIndex(report(*rows, exporters=frozenset(exporters))).job(RESNET)
    assert found is not None
    assert (found.bytes_per_second, found.exporter, found.flows) == (
        pytest.approx(rate), exporter, count)
    assert found.window == HOUR


@pytest.mark.parametrize(
    "answer",
    [report(exporters=frozenset()), report(flow(W0, M0, 1.0), available=False),
     report(flow(pod_end("bert-0", owner="bert"), pod_end("bert-1", owner="bert"), 3.0),
            exporters=frozenset({OBI}))],
    ids=["no counter exists", "the query failed", "no row of the job"],
)
def test_nothing_is_measured_without_an_answering_exporter(answer: EgressReport) -> None:
    assert EgressIndex(answer).job(RESNET) is None


@pytest.mark.parametrize(
    ("owners", "names"),
    [
        ((OwnerRef("PyTorchJob", "resnet", "kubeflow.org/v1", True),), {"resnet"}),
        # Beyla reports a ReplicaSet's pods as owned by the Deployment
        ((OwnerRef("ReplicaSet", "lab-head-7d9f8", "apps/v1", True),), {"lab-head-7d9f8",
                                                                        "lab-head"}),
        ((OwnerRef("Job", "resnet-launcher", "batch/v1", True),), {"resnet-launcher"}),
        ((OwnerRef("Job", "resnet-launcher", "batch/v1", False),), set()),
        ((), set()),
    ],
)  # fmt: skip
def test_owner_names(owners: tuple[OwnerRef, ...], names: set[str]) -> None:
    assert owner_names(Pod(namespace="ml", name="p", owners=owners)) == names


def test_job_ends_of_pods() -> None:
    pods = [Pod(namespace="ml", name=f"resnet-worker-{i}",
                owners=(OwnerRef("PyTorchJob", "resnet", "kubeflow.org/v1", True),))
            for i in range(2)]  # fmt: skip
    ends = job_ends("ml", pods)
    assert ends == JobEnds("ml", frozenset({"resnet-worker-0", "resnet-worker-1"}),
                           frozenset({"resnet"}))  # fmt: skip
