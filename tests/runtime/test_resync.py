"""The leader's periodic cluster-wide diagnosis (`detection.resync`) records what the event-driven
detector missed: on the twin (`seed-blocked`), with every detector batch but the resync's failing
as a bug would (logged, dropped, counted as `outcome="error"`), the split job still gets its
incident, from the resync."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import httpx

from agent.model.incident import IncidentQuery
from agent.runtime.pipeline import AgentPipeline
from agent.settings import Settings
from agent.sources.change import Change
from tests.support.agent_rig import running_agent
from tests.support.waiting import wait


class BuggyPipeline(AgentPipeline):
    """Fails every batch that is not the resync's, as a bug in detection would."""

    dropped = 0

    def handle_change(self, change: Change, first_seen: float) -> Change | None:
        if "resync" not in change.reasons:
            BuggyPipeline.dropped += 1
            raise RuntimeError(f"a bug in detection ({', '.join(change.reasons)})")
        return super().handle_change(change, first_seen)


def _counter(text: str, outcome: str) -> float:
    prefix = f'zonemedic_detection_batches_total{{outcome="{outcome}"}} '
    return next((float(line[len(prefix):]) for line in text.splitlines()
                 if line.startswith(prefix)), 0.0)


def _resync_every_2s(settings: Settings) -> Settings:
    return replace(settings, detection=replace(settings.detection, resync=timedelta(seconds=2)))


def test_batches_dropped_by_a_bug_are_covered_by_the_resync(tmp_path: Path) -> None:
    BuggyPipeline.dropped = 0
    with running_agent(tmp_path, "seed-blocked", pipeline_class=BuggyPipeline,
                       settings_change=_resync_every_2s) as rig:
        incidents = wait(lambda: rig.store.list_incidents(IncidentQuery(limit=10)).incidents,
                         timeout=60, what="an incident recorded by the resync")
        assert [(i.name, i.verdict.value) for i in incidents] == [
            ("llm-finetune", "zone_split_blocked")]
        assert BuggyPipeline.dropped >= 1  # the start-up diagnosis at least was dropped

        def counted() -> str | None:  # a batch is counted once handled, after its incident
            text = httpx.get(rig.url + "/metrics", timeout=10).text
            return text if _counter(text, "ok") >= 1 else None

        metrics = wait(counted, timeout=30, what="the resync batch counted ok")
        assert _counter(metrics, "error") >= 1
