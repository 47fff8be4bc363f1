"""The leader's periodic cluster-wide diagnosis (`detection.resync`) records what the event-driven
detector missed: on the twin (`seed-blocked`), with every detector batch but the resync's failing
as a bug would (logged, dropped, counted as `outcome="error"`), the split job still gets its
incident, from the resync."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from agent.model.incident import IncidentQuery
from agent.runtime.app import Agent
from agent.runtime.pipeline import AgentPipeline
from agent.runtime.root import Parts
from agent.sources.cache import Change
from agent.store.migrate import upgrade_on_start
from agent.twin import kubeconfig
from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from tests.remediation.harness import quick
from tests.support.agent_rig import agent_settings


class BuggyPipeline(AgentPipeline):
    """Fails every batch that is not the resync's, as a bug in detection would."""

    dropped = 0

    def handle_change(self, change: Change, first_seen: float) -> Change | None:
        if "resync" not in change.reasons:
            BuggyPipeline.dropped += 1
            raise RuntimeError(f"a bug in detection ({', '.join(change.reasons)})")
        return super().handle_change(change, first_seen)


def _wait(check: Any, *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _counter(text: str, outcome: str) -> float:
    prefix = f'zonemedic_detection_batches_total{{outcome="{outcome}"}} '
    return next((float(line[len(prefix):]) for line in text.splitlines()
                 if line.startswith(prefix)), 0.0)


def test_batches_dropped_by_a_bug_are_covered_by_the_resync(tmp_path: Path) -> None:
    with TwinCluster(quick("seed-blocked")) as cluster:
        pods = lookup("pods")
        assert cluster.wait_until(lambda: all(
            p["spec"].get("nodeName") for p in cluster.store.list(pods, namespace="ml")[0]
        ) and cluster.store.list(pods, namespace="ml")[0], timeout=30)
        api = cluster.serve_api()
        path = kubeconfig.write(tmp_path / "kubeconfig", api.url)
        settings = agent_settings(tmp_path, path, None)
        settings = replace(settings, detection=replace(settings.detection,
                                                       resync=timedelta(seconds=2)))
        store = upgrade_on_start(settings)

        def factory(parts: Parts) -> AgentPipeline:
            return BuggyPipeline(parts, store)

        agent = Agent(settings, pipeline_factory=factory)
        BuggyPipeline.dropped = 0
        agent.start()
        try:
            incidents = _wait(lambda: store.list_incidents(IncidentQuery(limit=10)).incidents,
                              timeout=60, what="an incident recorded by the resync")
            assert [(i.name, i.verdict.value) for i in incidents] == [
                ("llm-finetune", "zone_split_blocked")]
            assert BuggyPipeline.dropped >= 1  # the start-up diagnosis at least was dropped
            metrics = httpx.get(agent.url + "/metrics", timeout=10).text
            assert _counter(metrics, "error") >= 1 and _counter(metrics, "ok") >= 1
        finally:
            agent.stop()
            store.close()
