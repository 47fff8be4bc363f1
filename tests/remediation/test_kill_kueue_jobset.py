"""Crash safety of the Kueue path for a JobSet of its own, in process (the crash walk,
`tests.remediation.crashes`): every point of its re-placement through Kueue -- each step
recorded, each write the server answered before its step is recorded (the Workload's
deactivation, the patch of its replicated jobs' pod templates, the renewal of the suspended
child Job keeping Kueue's old marks, the Workload's deletion) -- killed (or the database refusing
records from there on), then resumed by a fresh Remediator. The JobSet ends re-placed through
Kueue in one zone, its Workload deactivated once and deleted once, its templates patched once,
its child Job renewed once, its own `suspend` never written, no child Job of the old placement
left."""

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

JOB = JobRef(JobKind.JOBSET, "ml", "pytorch-ddp")
JOBSET_PATH = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/pytorch-ddp"
CHILD = "pytorch-ddp-workers-0"



@pytest.mark.parametrize("death", [Death.KILL, Death.STORE_AWAY])
def test_every_point_of_a_jobsets_kueue_path_stopped_then_resumed_re_places_it_once(
    tmp_path: Path, template: Path, death: Death
) -> None:
    store, _ = new_store(template, tmp_path, **OUTAGE_BUDGET)
    try:
        with running_lab(tmp_path, "kueue-jobset") as lab:
            incident_id = approved_incident(lab, store, ref=JOB)

            def make(on_step: Any, on_write: Any) -> Any:
                return lab.remediator(store, settings=PATIENT, on_step=on_step, on_write=on_write)

            walk = Walk.every_point(make, store, incident_id, death,
                                    sqlite_db=str(tmp_path / "incidents.db"))  # fmt: skip
            assert walk.run() is IncidentStatus.RESOLVED, walk.outcomes
            workload_kind = KUEUE_WORKLOAD.kind.value
            expected = [f"patch {workload_kind}", "patch JobSet pytorch-ddp",
                        f"delete Job {CHILD}", f"delete {workload_kind}"]  # fmt: skip
            if death is Death.KILL:
                expected += ["step planned", "step dry_run", "step deactivating patch",
                             "step deactivated", "step pods_gone",
                             "step annotating patch pytorch-ddp", "step annotated",
                             f"step renewing delete {CHILD}", "step renewed",
                             "step requeuing delete", "step resumed", "step admitted",
                             "step bound", "step verified"]  # fmt: skip
            for where in expected:
                assert any(s.startswith(where) for s in walk.stops), (where, walk.stops)
            writes = [(w.verb, w.kind) for w in walk.writes]
            assert writes.count((WriteVerb.PATCH, workload_kind)) == 1  # deactivated once
            assert writes.count((WriteVerb.DELETE, workload_kind)) == 1  # requeued once
            assert writes.count((WriteVerb.PATCH, "JobSet")) == 1  # its templates patched once
            assert writes.count((WriteVerb.DELETE, "Job")) == 1  # its child Job renewed once
            assert {w.kind for w in walk.writes} == {workload_kind, "JobSet", "Job"}
            job = lab.api.json("GET", JOBSET_PATH)
            assert job["spec"]["suspend"] is False  # Kueue resumed it
            (rjob,) = job["spec"]["replicatedJobs"]
            annotations = rjob["template"]["spec"]["template"]["metadata"]["annotations"]
            assert annotations[KUEUE.topology_annotation] == ZONE_LABEL
            assert KUEUE.group_annotation not in annotations  # one PodSet: nothing to group
            assert "nodeSelector" not in rjob["template"]["spec"]["template"]["spec"]
            children = lab.api.json("GET", "/apis/batch/v1/namespaces/ml/jobs")["items"]
            assert [c["metadata"]["name"] for c in children] == [CHILD]  # renewed, not doubled
            assert pod_zones(lab) == {"us-east-1a": 4}
            # one Workload, Kueue's rebuilt one, active and admitted: none left deactivated
            (wl,) = lab.api.json("GET", f"/apis/{KUEUE_WORKLOAD.api_version}/namespaces/ml/"
                                        f"{KUEUE_WORKLOAD.plural}")["items"]  # fmt: skip
            assert wl["spec"].get("active", True) is True
            assert any(c["type"] == "Admitted" and c["status"] == "True"
                       for c in wl["status"]["conditions"])  # fmt: skip
            steps = recorded_steps(store, incident_id)
            assert steps.count("deactivated") == 1 and steps.count("resumed") == 1
            assert steps.count("renewed") == 1
    finally:
        store.close()
