"""End to end on the twin's `gitops` scenario with the running agent (the rig), Slack on the fake.

The lab's namespace opts in to automatic co-location (playbooks copied with `auto_namespaces`),
so the agent fixes the split coordinator by itself. The simulated Argo CD sync then applies the
coordinator's manifest again and undoes half of the fix (the zone label `zone-b` comes back, the
zone pin stays): the coordinator runs in zone-a labelled zone-b, blocked again. The agent
detects it, and:
- the re-detection is named "fix reverted by argocd-controller": the Slack post's header, the
  finding's first reason, `incidents list` and `show` (`--output json`) and the HTTP API;
- both incidents' timelines hold a `fix_reverted` event by argocd-controller (when, which field,
  and the other incident), read through the CLI and the HTTP API;
- the automatic approval is held (the incident awaits a person, a note says why);
- the Slack post leads with the hand-over: the kustomize patch and `zonemedic incidents patch N`,
  whose kustomize output (the CLI) names the Deployment and the zone label.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from agent.chatops.blocks import ButtonAction
from agent.cli import main
from agent.fakes.slack import FakeSlack
from agent.model.incident import IncidentQuery, IncidentSummary
from agent.model.lifecycle import IncidentStatus
from agent.settings import DiagnosisSettings
from agent.settings.sections import GroupSpec
from tests.support.agent_rig import REPO, running_agent
from tests.support.waiting import wait

GROUP = "llm-pretrain"
NAMESPACE = "ml-lab"
MANAGER = "argocd-controller"
LAB = DiagnosisSettings(groups=[GroupSpec(
    name=GROUP, namespace=NAMESPACE, selector={"app": GROUP}, coordinator={"role": "coordinator"},
    workers={"role": "worker"}, ports=[29500])])  # fmt: skip


def auto_playbooks(directory: Path) -> Path:
    """The shipped playbooks, the lab's namespace opted in to automatic co-location."""
    directory.mkdir()
    for source in sorted((REPO / "playbooks").glob("*.yaml")):
        book = yaml.safe_load(source.read_text())
        for action in book.get("actions") or []:
            if isinstance(action.get("approval"), dict):
                action["approval"]["auto_namespaces"] = [NAMESPACE]
        (directory / source.name).write_text(yaml.safe_dump(book, sort_keys=False))
    return directory


def cli_json(capsys: pytest.CaptureFixture[str], database: str, *args: str) -> Any:
    capsys.readouterr()
    assert main(["incidents", *args, "--database", database, "--output", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def top_post(slack: FakeSlack, incident_id: int) -> Any:
    for message in slack.messages():
        if message.thread_ts is None and f"#{incident_id}" in message.text:
            return message
    return None


def test_a_gitops_sync_undoing_the_fix_is_named_held_and_handed_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    playbooks = auto_playbooks(tmp_path / "playbooks")
    with FakeSlack(users={"U1": "alice"}) as slack, running_agent(
        tmp_path, "gitops", slack=slack, executor=True, leader_election=False, diagnosis=LAB,
        playbooks=playbooks,
    ) as rig:
        def incidents() -> list[IncidentSummary]:
            return list(rig.store.list_incidents(IncidentQuery(name=GROUP, limit=10)).incidents)

        first = wait(lambda: next((i for i in incidents() if i.status is IncidentStatus.RESOLVED),
                                  None),
                     timeout=90, what=lambda: f"the automatic fix resolved; {incidents()}")
        assert rig.store.get_incident(first.id).decisions[0].source.value == "auto"
        sync = rig.cluster.gitops
        assert sync is not None
        done = sync.syncs
        sync.sync_now()
        wait(lambda: sync.syncs > done, timeout=20, what="the simulated Argo CD sync")
        again = wait(lambda: next((i for i in incidents() if i.id != first.id
                                   and i.status is IncidentStatus.AWAITING_APPROVAL), None),
                     timeout=60, what=lambda: f"the re-detection awaiting approval; {incidents()}")

        # held: a person decides, and a note says why (written just after the request)
        def held() -> list[str]:
            events = rig.store.get_incident(again.id).events
            return [str(e.detail.get("reason")) for e in events if e.kind.value == "note"
                    and "automatic co-location held: the last fix of this job was undone"
                    in str(e.detail.get("reason"))]

        (note,) = wait(held, timeout=20, what="the note saying why the approval is held")
        assert f"(incident {first.id}: fix reverted by {MANAGER})" in note
        assert not rig.store.get_incident(again.id).decisions

        def reverted_events() -> bool:
            return all(any(e.kind.value == "fix_reverted" for e in rig.store.get_incident(i).events)
                       for i in (first.id, again.id))

        wait(reverted_events, timeout=20, what="the fix_reverted events on both incidents")

        # the CLI: list and show name it, both timelines record it
        database = rig.settings.database.url
        listed = {i["id"]: i for i in cli_json(capsys, database, "list", "--job",
                                               f"{NAMESPACE}/{GROUP}")["incidents"]}
        assert listed[again.id]["reverted_by"] == MANAGER
        assert listed[first.id]["reverted_by"] == MANAGER
        shown = cli_json(capsys, database, "show", str(again.id))
        assert shown["incident"]["reverted_by"] == MANAGER
        assert shown["diagnosis"]["reasons"][0].startswith(f"fix reverted by {MANAGER} at ")
        event = next(e for e in shown["events"] if e["kind"] == "fix_reverted")
        assert event["actor"] == MANAGER and event["detail"]["reverted_incident"] == first.id
        assert event["detail"]["fields"] == [
            f"Deployment {NAMESPACE}/rendezvous spec.template.metadata.labels.zone"]
        assert event["detail"]["reverted_at"].endswith("Z")
        assert shown["proposed_fix"]["reverted"]["manager"] == MANAGER
        # the live finding names who owns what the fix writes
        (owner,) = [o for o in shown["proposed_fix"]["owners"] if o["name"] == "rendezvous"]
        assert (owner["kind"], owner["owner"]["kind"], owner["owner"]["name"]) == (
            "Deployment", "argocd", "lab")
        fixed = cli_json(capsys, database, "show", str(first.id))
        back = next(e for e in fixed["events"] if e["kind"] == "fix_reverted")
        assert back["actor"] == MANAGER and back["detail"]["redetected_as"] == again.id
        capsys.readouterr()
        assert main(["incidents", "show", str(again.id), "--database", database]) == 0
        text = capsys.readouterr().out
        assert text.splitlines()[0].endswith(f"fix reverted by {MANAGER}")
        assert "fix_reverted" in text
        assert main(["incidents", "list", "--database", database]) == 0
        rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
        assert rows[str(again.id)].endswith(f"{NAMESPACE}/{GROUP}  fix reverted by {MANAGER}")

        # the HTTP API says the same
        with httpx.Client(base_url=rig.url, timeout=10) as http:
            api = http.get(f"/api/incidents/{again.id}").json()
            assert api["incident"]["reverted_by"] == MANAGER
            assert [e["actor"] for e in api["events"] if e["kind"] == "fix_reverted"] == [MANAGER]
            rows = http.get("/api/incidents", params={"job": f"{NAMESPACE}/{GROUP}"}).json()
            assert {i["id"]: i["reverted_by"] for i in rows["incidents"]} == {
                again.id: MANAGER, first.id: MANAGER}
            patch = http.get(f"/api/incidents/{again.id}/patch",
                             params={"format": "kustomize"})  # fmt: skip
            assert patch.status_code == 200, patch.text

        # Slack: named by the revert, leading with the hand-over
        post = wait(lambda: top_post(slack, again.id), timeout=20,
                    what=f"incident {again.id}'s post")
        blocks = post.blocks
        assert blocks[0]["type"] == "header"
        assert blocks[0]["text"]["text"].startswith(f"Fix reverted by {MANAGER}: ")
        texts = [b["text"]["text"] for b in blocks if b["type"] == "section"]
        lead = texts[1]  # right after the facts
        assert lead.startswith(f"*Fix reverted by {MANAGER}*")
        assert f"zonemedic incidents patch {again.id} --format kustomize" in lead
        assert texts[2].startswith("*Kustomize patch for the source:*")
        assert "kind: Deployment" in texts[2] and "zone: zone-a" in texts[2]
        buttons = [e["action_id"] for b in blocks if b["type"] == "actions" for e in b["elements"]]
        assert ButtonAction.APPROVE.value in buttons  # held: a person decides whether to apply it live again

        # the hand-over from the CLI: a kustomize patch naming the Deployment
        capsys.readouterr()
        assert main(["incidents", "patch", str(again.id), "--format", "kustomize",
                     "--database", database]) == 0
        handed = capsys.readouterr().out
        assert "name: rendezvous" in handed and "zone: zone-a" in handed
