"""`zonemedic demo` as a person runs it (a real process): the story end to end with `--json` on
`seed-degraded` and `lab` (real Prometheus), interactively rejected on `seed-blocked` without
metrics, and Ctrl-C stopping every process it started and removing its files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.prometheus import requires_prometheus

REPO = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def demo(tmp_path: Path, *args: str, stdin: str | None = None,
         timeout: float = 120) -> tuple[dict[str, Any], str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp)}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "demo", "--json", *args],
        cwd=tmp_path, env=env, input=stdin, capture_output=True, text=True, timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert time.monotonic() - started < 120, "the demo must finish within 2 minutes"
    assert list(tmp.iterdir()) == [], "the demo leaves no temporary files"
    assert "Traceback" not in proc.stderr
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary, proc.stderr


@requires_prometheus
@pytest.mark.parametrize(("scenario", "zones_before", "verdict"), [
    ("seed-degraded", {"us-east-1a": 4, "us-east-1b": 1}, "zone_split_degraded"),
    ("lab", {"zone-a": 4, "zone-b": 1}, "zone_split_blocked"),
])
def test_the_story_ends_resolved_co_located_and_faster(
    tmp_path: Path, scenario: str, zones_before: dict[str, int], verdict: str
) -> None:
    summary, story = demo(tmp_path, "--scenario", scenario)
    assert summary["scenario"] == scenario
    assert summary["incident_status"] == "resolved"
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
                  "Pods co-located", "Incident resolved", "[ Approve ]"):
        assert words in story, words


def test_interactive_without_metrics_sends_what_the_person_answered(tmp_path: Path) -> None:
    summary, story = demo(tmp_path, "--scenario", "seed-blocked", "--interactive",
                          "--no-metrics", stdin="maybe\nr\n")
    assert "please answer a, r or s" in story
    assert "rejected by dana" in story
    assert summary["incident_status"] == "rejected"
    assert summary["zones_after"] == {}
    # without metrics it says so, and measures nothing
    assert "metrics off" in story
    assert summary["metrics"] is False
    assert summary["utilization_before"] is None and summary["utilization_after"] is None
    assert summary["chart"] is None and not list(tmp_path.glob("*.png"))


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
