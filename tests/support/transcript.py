"""The README's transcript of `zonemedic demo` compared with a real run's output, in substance.

Who calls it: `tests/demo` (the README's excerpt against `docs/demo-output.txt`, and against the
story of a real run). `readme_transcript` returns the fenced block that follows the README's
marker. `items` reads a story as a list of `Item`s: a Slack box (its title, and its text with the
lines joined, so where a line wraps does not matter) or a line, each normalised by `normalise`
(times, dates, durations, uids, resource versions and measured figures, grouped thousands among
them, which change from run to run, become placeholders) and tagged with its stream (the checklist, progress lines, thread
replies, the chart upload, ephemeral replies, posts, edits, the summary). `disagreements(excerpt,
output)` lists each item of the excerpt the output does not have, in the same order within its
stream: streams interleave as timing has it (a thread reply may come before or after the
checklist's next tick), and within one stream the order is the story's. In the excerpt a line
`...` stands for left-out lines, and so does a box line `│ ... │` for left-out lines of a box;
"… still" progress lines are not compared (how many there are depends on timing).

What it does not do: run the demo.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MARKER = "<!-- demo-transcript -->"
ELISION = "..."

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uid>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?( UTC|\+00:00)?"), "<time>"),
    (re.compile(r"resourceVersion \d+"), "resourceVersion <n>"),
    (re.compile(r"\d+(\.\d+)?%"), "<n>%"),
    (re.compile(r"\b\d+ ms\b"), "<n> ms"),
    (re.compile(r"\btook \d+s\b"), "took <n>s"),
    (re.compile(r"\d{1,3}(,\d{3})+(\.\d+)?"), "<n>"),  # 153,069 GB/day, $3,061.37/day
    (re.compile(r"\d+\.\d+"), "<n>"),
    (re.compile(r"\s+"), " "),
)


def normalise(text: str) -> str:
    """`text` with what changes from run to run replaced by placeholders, spaces collapsed."""
    for pattern, placeholder in _RULES:
        text = pattern.sub(placeholder, text)
    return text.strip()


@dataclass(frozen=True)
class Item:
    stream: str
    text: str  # normalised; a box: its title
    fragments: tuple[str, ...] = field(default=())  # a box: its text, cut where left out

    def found_in(self, other: Item) -> bool:
        if self.stream != other.stream or self.text != other.text:
            return False
        if not self.fragments:
            return True
        body, at = other.fragments[0] if other.fragments else "", 0
        for fragment in self.fragments:
            found = body.find(fragment, at)
            if found < 0:
                return False
            at = found + len(fragment)
        return True

    def __str__(self) -> str:
        return f"[{self.stream}] {self.text}" + "".join(f" | {f}" for f in self.fragments)


def _line_stream(line: str) -> str | None:
    """The stream of a line outside a box (None: not compared)."""
    if line.startswith("zonemedic demo:"):
        return "title"
    if line[:1] in ("✔", "✘", "–"):
        return "step"
    if line.startswith("… still"):
        return None
    if line.startswith("…"):
        return "progress"
    if line.startswith("↳ thread 📎"):
        return "chart"
    if line.startswith("↳ thread"):
        return "thread"
    if line.startswith("(only visible to you)"):
        return "ephemeral"
    return "other"


def _box_stream(title: str) -> str:
    if title.startswith("Slack #"):
        return "post"
    if title.startswith("Slack · message edited"):
        return "edit"
    return title


def items(story: str) -> list[Item]:
    """The story's items (see the module docstring); an excerpt's elisions are kept as cuts."""
    out: list[Item] = []
    box: list[str] | None = None
    title = ""
    for raw in story.splitlines():
        line = raw.strip()
        if box is not None:
            if line.startswith("╰"):
                fragments, current = [], []
                for inner in box:
                    if inner == ELISION:
                        fragments.append(" ".join(current))
                        current = []
                    else:
                        current.append(inner)
                fragments.append(" ".join(current))
                kept = tuple(normalise(f) for f in fragments if f.strip())
                out.append(Item(_box_stream(title), title, kept))
                box = None
            else:
                box.append(line.strip("│").strip())
            continue
        if line.startswith("╭"):
            title = normalise(line.strip("╭╮─ ").split(" ─")[0])
            box = []
            continue
        if not line or line == ELISION:
            continue
        text = normalise(line)
        stream = _line_stream(text)
        if stream is not None:
            out.append(Item(stream, text))
    return out


def disagreements(excerpt: str, output: str) -> list[str]:
    """Each item of `excerpt` that `output` lacks in the same order within its stream."""
    have = items(output)
    missing: list[str] = []
    position: dict[str, int] = {}
    for wanted in items(excerpt):
        candidates = [i for i, item in enumerate(have) if item.stream == wanted.stream]
        start = position.get(wanted.stream, -1)
        found = next((i for i in candidates if i > start and wanted.found_in(have[i])), None)
        if found is None:
            missing.append(str(wanted))
        else:
            position[wanted.stream] = found
    return missing


def readme_transcript(readme: str) -> str:
    """The fenced block after `MARKER` in the README."""
    at = readme.index(MARKER)
    start = readme.index("```text\n", at) + len("```text\n")
    return readme[start:readme.index("```", start)]
