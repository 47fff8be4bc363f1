"""`zonemedic demo` as a person runs it (a real process): the story end to end with `--json` on
`seed-degraded`, `lab` and `kueue` (side by side, real Prometheus), the two Kubeflow Trainer
stories `trainjob` and `trainjob-mpi` (side by side, real Prometheus), interactively rejected on
`seed-blocked` and snoozed on `lab` without metrics (side by side), and Ctrl-C stopping every
process it started and removing its files.

The story goes to stderr, a pipe: it reads as a log does (lines never wrapped, the steps in the
story's order, what it waits for said), and the seed-degraded run is the README's transcript in
substance (`tests.support.transcript`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.prometheus import requires_prometheus
from tests.support.transcript import disagreements, readme_transcript

REPO = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


@dataclass
class Run:
    """One `zonemedic demo --json` process, started with its standard input written; `finish`
    waits for it and checks it."""

    directory: Path
    process: subprocess.Popen[str]
    started: float

    def finish(self, timeout: float = 120) -> tuple[dict[str, Any], str]:
        try:
            out, story = self.process.communicate(timeout=timeout)
        finally:
            self.stop()
        assert self.process.returncode == 0, story[-4000:]
        assert time.monotonic() - self.started < 120, "the demo must finish within 2 minutes"
        assert list((self.directory / "tmp").iterdir()) == [], "the demo leaves no temporary files"
        at = story.find("Traceback")
        assert at < 0, story[max(0, at - 1000):at + 3000]
        summary: dict[str, Any] = json.loads(out)
        return summary, story

    def stop(self) -> None:
        """Kill it if it still runs (a test that failed before its `finish`)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def start(directory: Path, *args: str, stdin: str | None = None) -> Run:
    tmp = directory / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp)}
    answers = directory / "answers.txt"  # read when the demo asks (not a terminal)
    answers.write_text(stdin or "")
    with answers.open() as given:
        process = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "demo", "--json", *args], cwd=directory, env=env,
            stdin=given, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
    return Run(directory, process, time.monotonic())


# What the story says, beyond the steps every run shows, and what it must never say.
SAYS = {
    "seed-degraded": (
        # the waste once the split job's GPUs were measured (none when the pods were just bound)
        ["GPU-hours/day not measured yet: no utilization sample of the job yet", "% idle now x 24 h"],
        []),
    "lab": (
        # a group: its preview names the Deployment, its steps are no Job's, and the agent says
        # why it did not measure utilization (Prometheus is there)
        ["Previewed before approval from Deployment ml-lab/rendezvous (uid",
         "• Workloads moved (every workload outside the zone moved)",
         "GPU utilization not measured for a generic group"],
        ["uid -", "resourceVersion -", "no metrics configured", "Job resumed"]),
    "kueue": (
        # re-placed through Kueue: the preview and the thread say how, and Kueue admitted it
        ["Proposed fix: re-place the job through Kueue", "Kueue admitted Workload",
         "its Workload deactivated (Kueue suspended the job)"],
        ["nodeAffinity", "suspend patch"]),
}
KNOWN_STARTS = ("zonemedic demo:", "✔", "✘", "–", "…", "╭", "│", "╰", "   ↳ thread",
                "   (only visible to you)", "note:", "You are dana", "please answer")


def outside_boxes(story: str) -> list[str]:
    return [line for line in story.splitlines() if line and not line.startswith(("│", "╭", "╰"))]


def assert_reads_as_a_log(story: str) -> None:
    """Lines whole (a wrapped line would continue on a line of its own), the steps in order."""
    strays = [line for line in story.splitlines()
              if line and not line.startswith(KNOWN_STARTS)]
    assert strays == [], "lines wrapped or unexplained"
    assert story.index("✔ Pods placed") < story.index("✔ Split detected") < story.index(
        "╭─ Slack #ml-infra") < story.index("✔ Finding posted to Slack")
    assert story.index("… waiting for dana") < story.index("✔ Approval")


STORIES = [  # scenario, pods before, verdict
    ("seed-degraded", {"us-east-1a": 4, "us-east-1b": 1}, "zone_split_degraded"),
    ("lab", {"zone-a": 4, "zone-b": 1}, "zone_split_blocked"),
    # admitted by Kueue without a topology request: fixed through Kueue
    ("kueue", {"us-east-1a": 4, "us-east-1b": 1}, "zone_split_degraded"),
]
Finished = tuple[Path, dict[str, Any], str]  # the run's directory, its summary, its story


@pytest.fixture(scope="module")
def stories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Finished | AssertionError]:
    """The `STORIES` run side by side (each in its own directory: the wall time of one), each
    finished and checked by `Run.finish`; a run that failed its checks is its test's failure
    (the others are still checked)."""
    root = tmp_path_factory.mktemp("stories")
    runs = {name: start(root / name, "--scenario", name) for name, *_ in STORIES}
    finished: dict[str, Finished | AssertionError] = {}
    try:
        for name, run in runs.items():
            try:
                finished[name] = (run.directory, *run.finish())
            except AssertionError as failed:
                finished[name] = failed
    finally:
        for run in runs.values():
            run.stop()
    return finished


@requires_prometheus
@pytest.mark.parametrize(("scenario", "zones_before", "verdict"), STORIES)
def test_the_story_ends_resolved_co_located_and_faster(
    stories: dict[str, Finished | AssertionError], scenario: str,
    zones_before: dict[str, int], verdict: str,
) -> None:
    outcome = stories[scenario]
    if isinstance(outcome, AssertionError):
        raise outcome
    tmp_path, summary, story = outcome
    assert summary["scenario"] == scenario
    assert summary["incident_status"] == "resolved", story[-3000:]
    assert summary["verdict"] == verdict
    assert summary["detected_after_s"] is not None and 0 <= summary["detected_after_s"] < 10
    assert summary["zones_before"] == zones_before
    assert len(summary["zones_after"]) == 1 and sum(summary["zones_after"].values()) == 5
    assert summary["decided_by"] == "dana"
    assert summary["metrics"] is True
    before, after = summary["utilization_before"], summary["utilization_after"]
    assert before is not None and after is not None and after > before + 20, summary
    chart = Path(summary["chart"])
    assert chart.parent == tmp_path and chart.read_bytes().startswith(PNG)
    if verdict == "zone_split_degraded":  # its traffic crosses zones: Beyla measures it
        assert (summary["egress_source"], summary["egress_measured_by"]) == ("measured", "beyla")
        assert summary["egress_gb_per_day"] > 0 and summary["egress_usd_per_day"] > 0
        assert "measured by Beyla over the last 30s" in story
    else:  # blocked: nothing crosses, the estimate says so
        assert summary["egress_source"] == "estimated" and summary["egress_usd_per_day"] == 0
    # the story as a person reads it: the steps, and the agent's Slack message with its buttons
    for words in ("Pods placed", "Split detected", "Finding posted to Slack", "approved by dana",
                  "Pods co-located", "Incident resolved", "[ Approve ]", "╭─ demo summary"):
        assert words in story, words
    says, never = SAYS[scenario]
    assert [w for w in says if w not in story] == [], story
    assert [w for w in never if w in story] == [], story
    assert_reads_as_a_log(story)
    if scenario == "seed-degraded":
        # the README's transcript is what a run prints, in substance
        excerpt = readme_transcript((REPO / "README.md").read_text())
        assert disagreements(excerpt, story) == [], story


ANSWERS = [  # scenario, answer, status, the thread's reply, the message's edit
    ("seed-blocked", "r", "rejected", "↳ thread  ✋ Rejected by dana", "│ Rejected by dana at "),
    ("lab", "s", "snoozed", "↳ thread  💤 Snoozed by dana until ", "│ Snoozed by dana at "),
]


def test_interactive_without_metrics_sends_what_the_person_answered(tmp_path: Path) -> None:
    # both answers at once (two demos side by side, each in its own directory): the wall time of one
    runs = [start(tmp_path / answer, "--scenario", scenario, "--interactive", "--no-metrics",
                  stdin=f"maybe\n{answer}\n")
            for scenario, answer, *_ in ANSWERS]
    try:
        results = [run.finish() for run in runs]
    finally:
        for run in runs:
            run.stop()
    for (_, answer, status, thread, edited), (summary, story), run in zip(ANSWERS, results, runs, strict=True):
        # the question as it reads (the choices' brackets shown), the answers echoed from the pipe
        assert "? [a]pprove / [r]eject / [s]nooze: maybe\nplease answer a, r or s" in story
        assert f"[s]nooze: {answer}\n" in story
        assert f"{status} by dana" in story
        assert summary["incident_status"] == status
        # the decision in the thread and in the message, instead of its buttons
        assert thread in story and edited in story, story
        assert "Rejectd" not in story
        assert "– Incident resolved  incident #1" in story and "✘ Incident resolved" not in story
        assert summary["zones_after"] == {}
        # without metrics it says so, and measures nothing
        assert "metrics off" in story
        assert summary["metrics"] is False
        assert summary["utilization_before"] is None and summary["utilization_after"] is None
        assert summary["chart"] is None and not list(run.directory.glob("*.png"))


def children_of(pid: int) -> set[int]:
    """Every live descendant of `pid` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@requires_prometheus
def test_ctrl_c_stops_everything_and_removes_the_temporary_files(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    log = (tmp_path / "story.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "demo", "--json"],
        cwd=tmp_path, env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE,
        stderr=log, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        # running: its directory exists and it has started Prometheus (a child process)
        while not (list(tmp.glob("zonemedic-demo-*/prometheus/data")) and children_of(proc.pid)
                   and "Pods placed" in (tmp_path / "story.log").read_text()):
            assert proc.poll() is None, (tmp_path / "story.log").read_text()
            assert time.monotonic() < deadline, "the demo did not get going"
            time.sleep(0.1)
        children = children_of(proc.pid)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    story = (tmp_path / "story.log").read_text()
    assert proc.returncode == 130, story
    assert out == ""  # no summary: the story did not end
    assert "demo interrupted" in story and "Traceback" not in story
    assert [pid for pid in children if alive(pid)] == []
    assert list(tmp.iterdir()) == []


TRAINER_STORIES = [  # scenario, verdict, pods before, pods after, what the story says of its fix
    ("trainjob", "zone_split_degraded", {"us-east-1a": 2, "us-east-1b": 2}, 4,
     ["TrainJob ml/llm-pretrain node (planned)",
      "• Co-location patch applied (patched runtimePatches and resumed in one request)"]),
    ("trainjob-mpi", "zone_split_blocked", {"us-east-1a": 4, "us-east-1b": 1}, 5,
     ["TrainJob ml/mpi-pretrain launcher (planned)", "• Co-location patch applied (patched runtimePatches)",
      "• Job resumed (resumed (suspend: false))"]),
]  # fmt: skip


@requires_prometheus
def test_the_trainer_stories_end_resolved_with_the_gang_in_one_zone(tmp_path: Path) -> None:
    """A torch TrainJob split across two GPU zones (degraded) and an MPI TrainJob whose CPU-only
    launcher is blocked from its GPU nodes (the launcher moved alone), side by side, measured."""
    runs = [start(tmp_path / name, "--scenario", name) for name, *_ in TRAINER_STORIES]
    try:
        results = [run.finish() for run in runs]
    finally:
        for run in runs:
            run.stop()
    for (name, verdict, before, after, says), (summary, story) in zip(TRAINER_STORIES, results, strict=True):
        assert summary["scenario"] == name and summary["incident_status"] == "resolved", story[-3000:]
        assert summary["verdict"] == verdict
        assert sorted(summary["zones_before"].values()) == sorted(before.values())
        assert len(summary["zones_after"]) == 1 and sum(summary["zones_after"].values()) == after
        before_util, after_util = summary["utilization_before"], summary["utilization_after"]
        assert before_util is not None and after_util is not None and after_util > before_util + 20, summary
        assert [w for w in says if w not in story] == [], story
        assert "✔ Job suspended  suspended; the co-location patch (zone pin, toleration) goes in once its pods are gone" in story
        assert_reads_as_a_log(story)
