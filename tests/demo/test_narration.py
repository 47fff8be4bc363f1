"""The checklist without a terminal (a pipe, a log, `--json`'s stderr): each step one whole line
(never wrapped), what the spinner would say printed once when a step begins, and a "still" line
every few seconds of the same wait; nothing of that in a terminal's live display."""

from __future__ import annotations

import io

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from agent.demo.narration import PROGRESS_EVERY, Narration

STEPS = [("posted", "Finding posted to Slack"), ("approved", "Approval")]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def piped(width: int = 40) -> Console:
    return Console(file=io.StringIO(), width=width, force_terminal=False, record=True)


def test_without_a_terminal_it_says_what_it_waits_for_and_keeps_lines_whole() -> None:
    console, clock = piped(), Clock()
    narration = Narration(console, STEPS, title="zonemedic demo: a title longer than forty columns",
                          clock=clock)
    with narration.running():
        narration.begin("posted")  # no detail: nothing to say
        clock.now += 0.4
        narration.done("posted", "to #ml-infra, with Approve / Reject / Snooze")
        narration.begin("approved", "waiting for dana")
        clock.now += PROGRESS_EVERY - 0.1
        narration.tick()  # not yet
        clock.now += 0.2
        narration.tick()
        narration.tick()  # once per PROGRESS_EVERY
        narration.say(Text("   ↳ thread  ✅ Approved by dana, a reply longer than forty columns"))
        narration.say(Panel("a box keeps the console's width"))
        clock.now += 1.0
        narration.done("approved", "approved by dana")
        narration.tick()  # nothing is running
    lines = console.export_text().splitlines()
    assert lines[:5] == [
        "zonemedic demo: a title longer than forty columns",
        "✔ Finding posted to Slack  to #ml-infra, with Approve / Reject / Snooze  [0.4s]",
        "… waiting for dana",
        "… still waiting for dana  [5.5s]",
        "   ↳ thread  ✅ Approved by dana, a reply longer than forty columns",
    ]
    assert lines[5].startswith("╭") and len(lines[5]) == 40
    assert lines[-1] == "✔ Approval  approved by dana  [6.5s]"


def test_an_update_shows_in_the_next_progress_line() -> None:
    console, clock = piped(), Clock()
    narration = Narration(console, [("utilization", "GPU utilization")], title="t", clock=clock)
    with narration.running():
        narration.begin("utilization", "measuring")
        narration.update("utilization", "measuring: 4 sample(s), 40% now")
        clock.now += PROGRESS_EVERY
        narration.tick()
    assert console.export_text().splitlines()[-2:] == [
        "… measuring", "… still measuring: 4 sample(s), 40% now  [5.0s]"]


def test_in_a_terminal_the_live_display_says_it_instead() -> None:
    console = Console(file=io.StringIO(), width=60, force_terminal=True, record=True)
    clock = Clock()
    narration = Narration(console, STEPS, title="t", clock=clock)
    with narration.running():
        narration.begin("approved", "waiting for dana")
        clock.now += PROGRESS_EVERY * 2
        narration.tick()
        assert narration.live is not None
    out = console.export_text()
    assert "… waiting for dana" not in out and "still" not in out
    assert "waiting for dana" in out  # the live checklist's running step
