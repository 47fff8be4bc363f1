"""`zonemedic demo --scenario lab --gitops` as a person runs it (a real process, real Prometheus
when installed): the lab deployed from Git is fixed automatically, the simulated Argo CD sync puts
the coordinator's zone label back (the pin stays), and the agent names the revert ("fix reverted
by argocd-controller"), holds the automatic approval and posts the kustomize patch, all in the
story's order; `--gitops` with another scenario is refused naming the flag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.cli import main

MANAGER = "argocd-controller"


def test_the_gitops_story_names_the_revert_holds_and_hands_over(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "demo", "--scenario", "lab", "--gitops", "--json"],
        cwd=tmp_path, env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True,
        timeout=180, check=False,
    )  # fmt: skip
    story = done.stderr
    assert done.returncode == 0, story[-4000:]
    assert time.monotonic() - started < 150
    assert list(tmp.iterdir()) == [], "the demo leaves no temporary files"
    assert "Traceback" not in story
    summary = json.loads(done.stdout)
    assert (summary["incident_status"], summary["verdict"]) == ("resolved", "zone_split_blocked")
    assert summary["decided_by"] == "zonemedic"  # the namespace opts in: approved automatically
    assert summary["zones_after"] == {"zone-a": 5}
    again = summary["redetected_incident_id"]
    assert again is not None and again != summary["incident_id"]
    assert (summary["reverted_by"], summary["redetected_status"], summary["handover_posted"]) == (
        MANAGER, "awaiting_approval", True)
    # the story's steps in order, each saying what happened
    order = ["✔ Approval  approved automatically by zonemedic", "✔ Incident resolved",
             "✔ GitOps sync re-applies the manifest  argocd-controller applied its manifest "
             "again, now Deployment ml-lab/rendezvous: template label zone=zone-b, zone pin zone-a",
             f"✔ Fix reverted, named  incident #{again}: fix reverted by {MANAGER} at ",
             "✔ Automatic approval held  automatic co-location held: the last fix of this job "
             "was undone", f"✔ Kustomize patch posted  in the post of incident #{again}"]
    at = [story.find(words) for words in order]
    assert -1 not in at and at == sorted(at), list(zip(order, at, strict=True))
    # the re-detection's post as Slack shows it: named by the revert, the patch right after
    post = story[story.index(f"│ Fix reverted by {MANAGER}: Group ml-lab/llm-pretrain"):]
    assert post.index("Kustomize patch for the source:") < post.index("Denied flows")
    assert "│ kind: Deployment" in post and "│         zone: zone-a" in post
    assert f"zonemedic incidents patch {again} --format kustomize" in post
    assert f"then the GitOps sync undid half of it: incident #{again}" in story


def test_gitops_needs_the_lab(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--scenario", "seed-blocked", "--gitops"]) == 2
    err = capsys.readouterr().err
    assert "--gitops: only with --scenario lab" in err and "Traceback" not in err
