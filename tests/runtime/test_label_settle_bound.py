"""The bound on verdict-first recording: a job whose pods never start (so never get the zone label
their policies select on) is still recorded, after `detection.label_settle_timeout`, with the
verdict at hand and a reason saying the labels were still unsettled."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from agent.model.incident import IncidentQuery, IncidentSummary
from agent.model.lifecycle import EventKind
from agent.settings.sections import Settings
from tests.remediation.harness import quick
from tests.support.agent_rig import running_agent
from tests.support.waiting import wait

BOUND = timedelta(seconds=1)


def _short_bound(settings: Settings) -> Settings:
    return replace(settings, detection=replace(settings.detection, label_settle_timeout=BOUND))


def test_a_job_whose_labels_never_come_is_recorded_after_the_bound(tmp_path: Path) -> None:
    scenario = quick("seed-blocked")
    # the pods bind but never start: the twin stamps the zone label at start, so it never comes
    scenario = replace(scenario, model=replace(scenario.model, pod_start_seconds=3600.0))
    with running_agent(tmp_path, scenario, settings_change=_short_bound) as rig:

        def incident() -> IncidentSummary | None:
            found = rig.store.list_incidents(IncidentQuery(limit=5)).incidents
            return found[0] if found else None

        opened = wait(incident, timeout=60, what="the incident recorded past the bound")
        detail = rig.store.get_incident(opened.id)
        detected = [e for e in detail.events if e.kind is EventKind.DETECTED]
        assert detected, [e.kind for e in detail.events]
        assert detected[0].detail["verdict"] == "zone_split_degraded"  # the verdict at hand
        text = json.dumps(detail.diagnosis)
        assert "zone-mirroring labels were still unsettled after 1s" in text, text
