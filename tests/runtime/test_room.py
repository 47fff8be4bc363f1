"""A split job waiting for room gets its proposal within seconds of room appearing, on the twin with
the whole agent (the resync an hour away): `seed-blocked`'s GPU zone is cordoned, so no zone has
room and the incident says why (the preview a refusal); a node added in that zone (no pod of the
job on it) re-diagnoses the job at once, and the incident's diagnosis and proposed fix follow."""

from __future__ import annotations

import copy
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from agent.model.incident import IncidentQuery
from agent.model.proposal import from_action, proposed_fix
from agent.settings import Settings
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from tests.support.agent_rig import running_agent
from tests.support.waiting import wait

NODES = lookup("nodes")
ZONE = "us-east-1a"


def _resync_in_an_hour(settings: Settings) -> Settings:
    return replace(settings, detection=replace(settings.detection, resync=timedelta(hours=1)))


def test_a_node_added_gives_the_waiting_split_its_proposal_within_seconds(tmp_path: Path) -> None:
    with running_agent(tmp_path, "seed-blocked", settings_change=_resync_in_an_hour) as rig:
        store = rig.store

        def diagnosis() -> dict[str, Any] | None:
            found = store.list_incidents(IncidentQuery(name="llm-finetune", limit=5)).incidents
            return dict(store.get_incident(found[0].id).diagnosis) if found else None

        first = wait(diagnosis, timeout=60, what="the incident")
        assert first["target_zone"] == ZONE
        (opened,) = store.list_incidents(IncidentQuery(name="llm-finetune", limit=5)).incidents
        previewed = wait(lambda: proposed_fix(store.get_incident(opened.id).actions), timeout=30,
                         what="the first preview")
        first_fix = previewed.action_id
        nodes, _ = rig.cluster.store.list(NODES)
        gpu_nodes = [n for n in nodes
                     if n["metadata"]["labels"].get("topology.kubernetes.io/zone") == ZONE]
        for node in gpu_nodes:
            rig.cluster.store.patch(NODES, node["metadata"]["name"],
                                    {"spec": {"unschedulable": True}}, patch_type=PatchType.MERGE)
        waiting = wait(lambda: (d := diagnosis()) is not None and d["remediable"] is False and d,
                       timeout=30, what="the split waiting for room")
        assert any("no zone has 4 free GPUs" in r for r in waiting["reasons"])
        (incident,) = store.list_incidents(IncidentQuery(name="llm-finetune", limit=5)).incidents

        node = copy.deepcopy(gpu_nodes[0])
        node["metadata"] = {"name": "gpu-a-new", "labels": dict(node["metadata"]["labels"])}
        node["metadata"]["labels"]["kubernetes.io/hostname"] = "gpu-a-new"
        node["spec"] = {**node.get("spec", {}), "unschedulable": False}
        added = time.monotonic()
        rig.cluster.store.create(NODES, node)
        room = wait(lambda: (d := diagnosis()) is not None and d["remediable"] is True and d,
                    timeout=15, what="the split diagnosed again once room appeared")
        assert room["target_zone"] == ZONE
        plan = wait(lambda: (f := proposed_fix(store.get_incident(incident.id).actions))
                    is not None and f.refusal is None and f.action_id != first_fix and f,
                    timeout=15, what="the proposal")
        took = time.monotonic() - added
        assert plan.target_zone == ZONE and plan.verdict == "zone_split_blocked"
        assert took < 15, f"the proposal came {took:.1f} s after the node"
        # meanwhile the message said why there was no fix (the preview re-planned as a refusal)
        fixes = [f for a in store.get_incident(incident.id).actions
                 if (f := from_action(a)) is not None]
        refusals = [f.refusal for f in fixes if f.refusal is not None]
        assert refusals and "no zone has 4 free GPUs" in refusals[-1]
