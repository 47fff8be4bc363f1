"""Nothing lost across a recording blackout (guarantee 4, issue 19): two agents in one process
against one twin and one database. The leader cannot record (its store refuses every detector
batch: the database stopped under its write, the batch in the detector's retries) while a job
arrives, splits and is deleted; the follower sees it. The leader then goes (its lease handed
over); the new leader's catch-up diagnosis sees only the current state (the job is gone), and
still the split gets its incident: recorded from what the follower kept, closed at once as
superseded with the reason, and no approval asked for the deleted job."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.errors import UnavailableError
from agent.model.incident import IncidentQuery, IncidentSummary
from agent.model.job import JobRef
from agent.model.lifecycle import EventKind, MessageKind
from agent.model.workload import JobKind
from agent.rig.rig import AgentRig
from agent.runtime.app import Agent
from agent.runtime.pipeline import AgentPipeline
from agent.runtime.root import Injected
from agent.runtime.unrecorded import MissedReason
from agent.sources.change import Change
from agent.store.repository import IncidentStore
from agent.twin import cluster as twin_cluster
from agent.twin.resources import by_kind
from tests.support.agent_rig import agent_settings
from tests.support.waiting import wait
from tests.twin import twin_fixtures

BLACKOUT = threading.Event()  # set: the leader's store refuses every detector batch


class BlackedOut(AgentPipeline):
    """The pipeline whose store, while `BLACKOUT` is set, refuses the leader's batches (as the
    store does after its own retries, with the database stopped)."""

    def handle_change(self, change: Change, first_seen: float) -> Change | None:
        if BLACKOUT.is_set() and self.is_leader():
            raise UnavailableError("the database is stopped (the test's blackout)")
        return super().handle_change(change, first_seen)


@dataclass
class Replicas:
    cluster: twin_cluster.TwinCluster
    agents: tuple[Agent, Agent]
    store: IncidentStore
    job: dict[str, Any]

    def incidents(self, name: str) -> list[IncidentSummary]:
        query = IncidentQuery(cluster="twin", namespace="ml", name=name)
        return list(self.store.list_incidents(query).incidents)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    scenario = twin_fixtures.fast("seed-blocked")
    (job,) = [o for o in scenario.objects if o.get("kind") == "PyTorchJob"]
    without_job = replace(scenario, objects=[o for o in scenario.objects if o is not job])
    with AgentRig(tmp_path) as rig:
        try:
            cluster = rig.start_twin(without_job)
            base = agent_settings(tmp_path, rig.kubeconfig, None)
            settings = replace(base, detection=replace(base.detection, debounce=timedelta(milliseconds=200)))
            a, b = (rig.start_agent(settings, injected=Injected(pipeline_class=BlackedOut), identity=name)
                    for name in ("a", "b"))  # fmt: skip
            yield Replicas(cluster, (a.agent, b.agent), a.store, job)
        finally:
            BLACKOUT.clear()


def test_a_split_no_replica_recorded_gets_its_incident_from_the_follower(replicas: Replicas) -> None:
    a, b = replicas.agents
    wait(lambda: a.elector.is_leader() or b.elector.is_leader(), timeout=30, what="a leader")
    leader, follower = (a, b) if a.elector.is_leader() else (b, a)
    wait(lambda: leader.detector.batches >= 1 and follower.pipeline.followed.batches >= 1,
         timeout=30, what="both replicas' start-up batches")  # fmt: skip
    name = replicas.job["metadata"]["name"]
    key = JobRef(JobKind.PYTORCH, "ml", name)

    BLACKOUT.set()  # the leader can no longer record
    replicas.cluster.apply(copy.deepcopy(replicas.job))  # the job arrives and splits
    wait(lambda: key in follower.pipeline.problems.kept, timeout=30,
         what="the follower to see the split")  # fmt: skip
    wait(lambda: leader.detector.retries >= 1, timeout=30, what="the leader's batch refused")
    rt = by_kind(replicas.job["apiVersion"], replicas.job["kind"])
    replicas.cluster.store.delete(rt, name, namespace="ml")  # deleted before anyone recorded it
    cache = follower.pipeline.cache
    wait(lambda: cache.job_object(key) is None and not cache.pods_of_job(key), timeout=30,
         what="the follower to see the job gone")  # fmt: skip
    assert replicas.incidents(name) == []  # nothing recorded so far

    leader.stop()  # the leader goes (its lease handed over), its refused batch never recorded
    BLACKOUT.clear()
    wait(follower.elector.is_leader, timeout=30, what="the follower to lead")
    (incident,) = wait(lambda: [i for i in replicas.incidents(name) if i.closed_at is not None],
                       timeout=30, what="the missed split's incident, closed")  # fmt: skip
    assert incident.verdict.value == "zone_split_blocked"
    assert incident.status.value == "superseded"
    detail = replicas.store.get_incident(incident.id)
    (closed,) = [e for e in detail.events if e.kind is EventKind.SUPERSEDED]
    assert closed.detail["reason"] == MissedReason.DELETED.value
    # the job is gone: nothing is posted for it, and no approval is asked
    assert [m for m in detail.messages if m.kind is MessageKind.POST] == []
    assert incident.approval_deadline is None
    assert key not in follower.pipeline.problems.kept
    assert len(replicas.incidents(name)) == 1
