"""Crash safety of the Kueue path, in process (the crash walk, `tests.remediation.crashes`): every
point of a Kueue job's re-placement -- each step recorded, each write the server answered before
its step is recorded -- killed (or the database refusing records from there on), then resumed by
a fresh Remediator. The job ends re-placed through Kueue in one zone, its Workload deactivated
once and deleted once, its templates annotated once, its own `suspend` never written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.model.cluster import ZONE_LABEL
from agent.model.job import JobRef
from agent.model.lifecycle import IncidentStatus
from agent.model.workload import KUEUE, KUEUE_WORKLOAD, JobKind
from agent.remediation.writer import WriteVerb
from tests.remediation.crashes import Death, Walk
from tests.remediation.harness import (
    OUTAGE_BUDGET,
    PATIENT,
    approved_incident,
    new_store,
    pod_zones,
    recorded_steps,
    running_lab,
)

JOB = JobRef(JobKind.PYTORCH, "ml", "llm-finetune")



@pytest.mark.parametrize("death", [Death.KILL, Death.STORE_AWAY])
def test_every_point_of_the_kueue_path_stopped_then_resumed_re_places_the_job_once(
    tmp_path: Path, template: Path, death: Death
) -> None:
    store, _ = new_store(template, tmp_path, **OUTAGE_BUDGET)
    try:
        with running_lab(tmp_path, "kueue") as lab:
            incident_id = approved_incident(lab, store, ref=JOB)

            def make(on_step: Any, on_write: Any) -> Any:
                return lab.remediator(store, settings=PATIENT, on_step=on_step, on_write=on_write)

            walk = Walk.every_point(make, store, incident_id, death,
                                    sqlite_db=str(tmp_path / "incidents.db"))  # fmt: skip
            assert walk.run() is IncidentStatus.RESOLVED, walk.outcomes
            workload_kind = KUEUE_WORKLOAD.kind.value
            expected = [f"patch {workload_kind}", "patch PyTorchJob llm-finetune",
                        f"delete {workload_kind}"]  # fmt: skip
            if death is Death.KILL:
                expected += ["step planned", "step dry_run", "step deactivating patch",
                             "step deactivated", "step pods_gone",
                             "step annotating patch llm-finetune", "step annotated",
                             "step requeuing delete", "step resumed", "step admitted",
                             "step bound", "step verified"]  # fmt: skip
            for where in expected:
                assert any(s.startswith(where) for s in walk.stops), (where, walk.stops)
            writes = [(w.verb, w.kind) for w in walk.writes]
            assert writes.count((WriteVerb.PATCH, workload_kind)) == 1  # deactivated once
            assert writes.count((WriteVerb.DELETE, workload_kind)) == 1  # requeued once
            assert writes.count((WriteVerb.PATCH, "PyTorchJob")) == 1  # annotated once
            job = lab.api.json("GET", "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llm-finetune")
            assert job["spec"]["runPolicy"]["suspend"] is False
            for spec in job["spec"]["pytorchReplicaSpecs"].values():
                assert spec["template"]["metadata"]["annotations"][KUEUE.topology_annotation] == ZONE_LABEL
            assert pod_zones(lab) == {"us-east-1a": 5}
            steps = recorded_steps(store, incident_id)
            assert steps.count("deactivated") == 1 and steps.count("resumed") == 1
    finally:
        store.close()
