"""One Alertmanager webhook body with 1,000 alerts for one job: every alert is accepted and counted,
but the job's incident gets one re-detection row in its timeline, not 1,000 (real store, real
pipeline, the webhook's own parser and receiver)."""

from __future__ import annotations

import orjson

from agent.model.job import JobRef
from agent.model.lifecycle import EventKind
from agent.runtime.alerts import AlertReceiver
from agent.sources.alertmanager import Alert
from tests.runtime.world import JOB, World


def test_a_thousand_alerts_in_one_body_are_one_incident_with_a_short_timeline(world: World) -> None:
    def on_alert(alert: Alert, jobs: list[JobRef]) -> bool:
        world.pipeline.handle_alert(alert, jobs)
        return True

    receiver = AlertReceiver(
        jobs_named=lambda ns, name: [JOB] if (ns, name) == (JOB.namespace, JOB.name) else [],
        job_of_pod=lambda ns, pod: None,
        ready=lambda: True,
        on_alert=on_alert,
    )
    alerts = [
        {"labels": {"alertname": "TrainingJobGPUUtilizationDrop", "severity": "warning",
                    "namespace": JOB.namespace, "training_job": JOB.name, "replica": str(i)},
         "startsAt": "2026-11-29T10:00:00Z"}
        for i in range(1000)
    ]
    outcome = receiver.handle(orjson.dumps({"version": "4", "status": "firing", "alerts": alerts}))
    assert outcome.status == 200
    assert outcome.body["accepted"] == 1000
    (incident,) = world.incidents()
    detail = world.store.get_incident(incident.id)
    assert detail.incident.detections == 1000
    kinds = [e.kind for e in detail.events]
    assert kinds.count(EventKind.REDETECTED) == 1
    assert len(detail.events) <= 5
    (folded,) = [e for e in detail.events if e.kind is EventKind.REDETECTED]
    assert folded.detail["repeats"] == 999
    assert len(detail.messages) == 1  # the playbook's notification fired once, for the new incident
