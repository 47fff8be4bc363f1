"""`zonemedic demo`'s words at the terminal: the interactive question shows its choices (console
markup does not eat `[a]`), the story without a terminal is `PIPE_WIDTH` columns wide (not rich's
80), and the chart's title says how the story ended."""

from __future__ import annotations

import io
import sys
from types import SimpleNamespace

import pytest
from rich.console import Console

from agent.demo.command import PIPE_WIDTH, question, story_console
from agent.demo.stage import Target
from agent.demo.story import Summary, chart_title


def test_the_question_shows_its_choices() -> None:
    console = Console(file=io.StringIO(), width=200, record=True)
    incident = SimpleNamespace(kind="PyTorchJob", namespace="ml", name="llm-[x]", target_zone="us-east-1a")
    console.print(question(incident), end="")
    assert console.export_text() == (
        "\nYou are dana, an approver. Co-locate PyTorchJob ml/llm-[x] in us-east-1a? "
        "[a]pprove / [r]eject / [s]nooze: ")


@pytest.mark.parametrize(("columns", "width"), [(None, PIPE_WIDTH), ("132", 132)])
def test_without_a_terminal_the_story_is_wide(
    monkeypatch: pytest.MonkeyPatch, columns: str | None, width: int
) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a pipe, not a terminal
    console = story_console(stderr=True)
    assert not console.is_terminal and console.width == width


TARGET = Target("PyTorchJob", "ml", "llm-finetune", {})


@pytest.mark.parametrize(
    ("status", "zones_after", "title"),
    [
        ("resolved", {"us-east-1a": 5}, "split across zones then co-located"),
        ("rejected", {}, "split across zones (the fix rejected)"),
        ("snoozed", {}, "split across zones (the fix snoozed)"),
        ("failed", {}, "split across zones (the fix failed)"),
        (None, {}, "split across zones (not co-located)"),
    ],
)
def test_the_charts_title_says_how_the_story_ended(
    status: str | None, zones_after: dict[str, int], title: str
) -> None:
    summary = Summary(scenario="seed-degraded", job=TARGET.label, incident_status=status,
                      zones_after=zones_after)
    assert chart_title(TARGET, summary) == f"PyTorchJob ml/llm-finetune: GPU utilization, {title}"
