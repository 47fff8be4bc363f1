"""The demo's live progress display: the story's steps, ticked off as they happen.

Who calls it: `agent.demo.story`. `Narration` shows the steps as a checklist (done, current with a
spinner, to come), each done step with its detail and the second of the story it happened at, in a
rich `Live` display when the console is a terminal; elsewhere (a pipe, a log, `--json`'s stderr)
each step is printed as one line when it is done. `say` prints a renderable above the checklist
(the Slack messages); `pause` stops the live display while the person answers a question.

What it does not do: know what the steps mean or wait for them (the story does).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text


class StepState(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    DONE = "done"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass
class Step:
    key: str
    title: str
    state: StepState = StepState.WAITING
    detail: str = ""
    at: float | None = None  # seconds since the story started


_MARKS = {StepState.DONE: ("✔", "green"), StepState.SKIPPED: ("–", "dim"),
          StepState.FAILED: ("✘", "red"), StepState.WAITING: ("·", "dim")}


class Narration:
    def __init__(self, console: Console, steps: Sequence[tuple[str, str]], *,
                 title: str) -> None:
        self.console = console
        self.steps = [Step(key, text) for key, text in steps]
        self.title = title
        self.started = time.monotonic()
        self.live: Live | None = None
        self._spinner = Spinner("dots", style="cyan")

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def step(self, key: str) -> Step:
        return next(s for s in self.steps if s.key == key)

    # -- the display -----------------------------------------------------------------------------

    def __rich__(self) -> RenderableType:
        table = Table.grid(padding=(0, 1), expand=True)
        table.add_column(width=2)
        table.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
        table.add_column(style="dim", justify="right", width=6, no_wrap=True)
        for s in self.steps:
            if s.state is StepState.RUNNING:
                mark: RenderableType = self._spinner
                line = Text.assemble((s.title, "bold"), ("  " + s.detail, "dim"))
            else:
                char, style = _MARKS[s.state]
                mark = Text(char, style=style)
                line = Text.assemble((s.title, "" if s.state is StepState.DONE else "dim"),
                                     ("  " + s.detail if s.detail else "", ""))
            at = f"{s.at:5.1f}s" if s.at is not None else ""
            table.add_row(mark, line, at)
        return Group(Text(self.title, style="bold"), table)

    @contextmanager
    def running(self) -> Iterator[Narration]:
        if self.console.is_terminal:
            with Live(self, console=self.console, refresh_per_second=8,
                      transient=False) as live:
                self.live = live
                try:
                    yield self
                finally:
                    self.live = None
        else:
            self.console.print(Text(self.title, style="bold"))
            yield self

    @contextmanager
    def pause(self) -> Iterator[None]:
        """Stop the live display for a question at the terminal."""
        live = self.live
        if live is None:
            yield
            return
        live.stop()
        try:
            yield
        finally:
            live.start()

    # -- what the story tells it -----------------------------------------------------------------

    def begin(self, key: str, detail: str = "") -> None:
        s = self.step(key)
        s.state, s.detail = StepState.RUNNING, detail

    def done(self, key: str, detail: str = "") -> None:
        self._finish(key, StepState.DONE, detail)

    def skip(self, key: str, detail: str = "") -> None:
        self._finish(key, StepState.SKIPPED, detail)

    def fail(self, key: str, detail: str = "") -> None:
        self._finish(key, StepState.FAILED, detail)

    def _finish(self, key: str, state: StepState, detail: str) -> None:
        s = self.step(key)
        s.state, s.detail, s.at = state, detail, self.elapsed()
        if self.live is None:
            char, style = _MARKS[state]
            self.console.print(Text.assemble((f"{char} ", style), (s.title, "bold"),
                                             f"  {detail}" if detail else "",
                                             (f"  [{s.at:.1f}s]", "dim")))

    def say(self, renderable: RenderableType) -> None:
        self.console.print(renderable)
