"""The demo's live progress display: the story's steps, ticked off as they happen.

Who calls it: `agent.demo.story`. `Narration` shows the steps as a checklist (done, current with a
spinner, to come), each done step with its detail and the second of the story it happened at, in a
rich `Live` display when the console is a terminal; elsewhere (a pipe, a log, `--json`'s stderr)
each step is printed as one line when it is done, never wrapped, and what the spinner would say is
printed instead: a step begun with a detail prints "… detail" once, and `tick` (called while the
story waits) prints "… still detail" every `PROGRESS_EVERY` seconds of the same wait. `say`
prints a renderable above the checklist (the Slack messages); `pause` stops the live display
while the person answers a question.

What it does not do: know what the steps mean or wait for them (the story does).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
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


PROGRESS_EVERY = 5.0  # seconds between two "still waiting" lines without a terminal

_MARKS = {StepState.DONE: ("✔", "green"), StepState.SKIPPED: ("–", "dim"),
          StepState.FAILED: ("✘", "red"), StepState.WAITING: ("·", "dim")}


class Narration:
    def __init__(self, console: Console, steps: Sequence[tuple[str, str]], *,
                 title: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self.steps = [Step(key, text) for key, text in steps]
        self.title = title
        self.clock = clock
        self.started = clock()
        self.live: Live | None = None
        self._spinner = Spinner("dots", style="cyan")
        self._current: Step | None = None  # the step begun last (what a progress line is about)
        self._said_at = 0.0  # when the last line was printed (monotonic)

    def elapsed(self) -> float:
        return self.clock() - self.started

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
            self._line(Text(self.title, style="bold"))
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
        self._current = s
        if self.live is None and detail:
            self._line(Text(f"… {detail}", style="dim"))
        self._said_at = self.clock()

    def update(self, key: str, detail: str) -> None:
        """A running step's new detail (the spinner line shows it; without a terminal, the next
        progress line)."""
        s = self.step(key)
        if s.state is StepState.RUNNING:
            s.detail = detail

    def tick(self) -> None:
        """Without a terminal: "… still <detail>" when the step begun last has been waited on for
        `PROGRESS_EVERY` seconds since the last line printed."""
        s = self._current
        if self.live is not None or s is None or s.state is not StepState.RUNNING:
            return
        now = self.clock()
        if now - self._said_at >= PROGRESS_EVERY:
            what = s.detail or s.title
            self._line(Text.assemble((f"… still {what}", "dim"),
                                     (f"  [{self.elapsed():.1f}s]", "dim")))

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
            self._line(Text.assemble((f"{char} ", style), (s.title, "bold"),
                                     f"  {detail}" if detail else "",
                                     (f"  [{s.at:.1f}s]", "dim")))

    def say(self, renderable: RenderableType) -> None:
        if isinstance(renderable, Text):
            self._line(renderable)
        else:
            self.console.print(renderable)
            self._said_at = self.clock()

    def _line(self, text: Text) -> None:
        """One line: never wrapped without a terminal (a log keeps it whole), wrapped by the
        terminal in one."""
        self.console.print(text, soft_wrap=self.live is None)
        self._said_at = self.clock()
