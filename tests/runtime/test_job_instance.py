"""An incident is bound to the instance of its job: when a PyTorchJob's pods reach the agent's
cache before the job's object (its watch failing meanwhile), the incident is recorded without
the job's uid, and the uid is filled in as soon as the object is known. On the twin with the
whole agent (watches over HTTP with the official client, the real pipeline and store)."""

from __future__ import annotations

import copy
from pathlib import Path

from agent.model.incident import IncidentQuery, IncidentSummary
from agent.model.job import JobRef
from agent.model.workload import JobKind
from agent.twin.resources import lookup
from tests.support.agent_rig import running_agent
from tests.support.waiting import wait

PYTORCHJOBS = lookup("pytorchjobs")
SECOND = "llm-second"


def test_pods_cached_before_the_job_object_then_the_incident_takes_its_uid(tmp_path: Path) -> None:
    with running_agent(tmp_path, "seed-blocked") as rig:
        store, cluster, cache = rig.store, rig.cluster, rig.agent.cache
        wait(lambda: store.list_incidents(IncidentQuery(name="llm-finetune")).incidents,
             timeout=60, what="the seed job's incident (the agent runs)")
        assert cluster.api is not None
        # the PyTorchJob watch and list fail from now on: a new job's pods reach the agent,
        # its object does not
        cluster.api.faults.fail(100_000, code=500, resource="pytorchjobs")
        cluster.api.close_watches()
        manifest = copy.deepcopy(cluster.store.get(PYTORCHJOBS, "llm-finetune", namespace="ml"))
        manifest["metadata"] = {"name": SECOND, "namespace": "ml"}
        manifest.pop("status", None)
        uid = str(cluster.store.create(PYTORCHJOBS, manifest, namespace="ml")["metadata"]["uid"])
        ref = JobRef(JobKind.PYTORCH, "ml", SECOND)

        def recorded() -> IncidentSummary | None:
            found = store.list_incidents(IncidentQuery(name=SECOND)).incidents
            return found[0] if found else None

        first = wait(recorded, timeout=60, what="the new job's incident, from its pods")
        assert cache.job_object(ref) is None  # its object did not reach the cache
        assert first.uid is None
        cluster.api.faults.clear()  # the watch comes back: the object reaches the cache
        wait(lambda: cache.job_object(ref) is not None, timeout=60, what="the job object cached")
        bound = wait(lambda: (i := recorded()) is not None and i.uid is not None and i,
                     timeout=60, what="the incident's uid filled in")
        assert bound.id == first.id and bound.uid == uid
        assert len(store.list_incidents(IncidentQuery(name=SECOND)).incidents) == 1
