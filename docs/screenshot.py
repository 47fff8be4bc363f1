"""Regenerates the README's transcript and pictures of the demo from one real run of
`zonemedic demo` (seed-degraded): `docs/demo-output.txt` (the story as text, as a pipe or a log
shows it: `PIPE_WIDTH` columns, nothing wrapped), `docs/demo-chart.png` (the utilization chart
the demo writes) and `docs/demo-terminal.png` (the same story drawn as a terminal: recorded by
rich, drawn by `rsvg-convert` from the Debian package librsvg2-bin, with the fonts of
fonts-dejavu-core and fonts-noto-color-emoji).

Usage: `make demo-docs` (installs Prometheus and rsvg-convert where it may, then runs this), or
`.venv/bin/python docs/screenshot.py` from the repository root. Needs the prometheus binary.
Without rsvg-convert it writes the transcript and the chart, says what is missing and exits 1.
It also rewrites the README's transcript (the block after `<!-- demo-transcript -->`) as an
excerpt of `demo-output.txt` (`readme_excerpt`: the patch diff, the executed plan's edit, most
thread replies and the "still waiting" lines left out, each cut marked `...`); `tests/demo` fails
when the two disagree, and when a real run disagrees with them. It changes nothing else.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from PIL import Image
from rich.console import Console
from rich.text import Text

from agent.demo.command import PIPE_WIDTH, narrate
from agent.runtime.logging import LogFormat, configure_logging

DOCS = Path(__file__).resolve().parent
MISSING_RSVG = (
    "rsvg-convert is missing (Debian package librsvg2-bin): docs/demo-output.txt, "
    "docs/demo-chart.png and the README's transcript are written, docs/demo-terminal.png is "
    "not. Install it with `make rsvg` (as root) or `sudo apt-get install librsvg2-bin "
    "fonts-noto-color-emoji`, then run this again."
)


README = DOCS.parent / "README.md"
MARKER = "<!-- demo-transcript -->"
THREAD_SHOWN = ("Approved by", "Remediation started", "Plan recorded", "Dry run passed",
                "Verified:", "Resolved:")
CUT = "   ..."


def readme_excerpt(transcript: str) -> str:
    """The README's excerpt of the transcript (see the module docstring)."""
    lines = transcript.splitlines()
    out: list[str] = []
    in_diff = in_plan_edit = False
    for at, line in enumerate(lines):
        if line.startswith("╭─ Slack · message edited") and any(
                "│ Proposed fix: co-locate" in later for later in lines[at + 1:at + 3]):
            in_plan_edit = True  # the plan the executor recorded: the preview's, re-planned
        if in_plan_edit:
            in_plan_edit = not line.startswith("╰")
            continue
        if line.startswith("│ --- ") and not in_diff and not any(
                old.startswith("│ ...") for old in out):
            in_diff = True
            out.append("│ ..." + " " * (len(line) - 6) + "│")
            continue
        if in_diff:
            in_diff = not line.startswith(("│ Previewed", "│ Planned"))
            if in_diff:
                continue
        if line.startswith("… still"):
            continue
        if line.startswith("   ↳ thread") and not any(words in line for words in THREAD_SHOWN):
            if out[-1] != CUT:
                out.append(CUT)
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def with_excerpt(readme: str, excerpt: str) -> str:
    """The README with its transcript block replaced by `excerpt`."""
    start = readme.index("```text\n", readme.index(MARKER)) + len("```text\n")
    return readme[:start] + excerpt + readme[readme.index("```", start):]


def as_terminal(recorded: Console) -> Console:
    """The recorded story as a terminal of `PIPE_WIDTH` columns shows it: a line longer than the
    terminal (the transcript never wraps) continues on the next row."""
    screen = Console(record=True, width=PIPE_WIDTH, file=io.StringIO(), force_terminal=True,
                     color_system="truecolor", highlight=False)
    for line in recorded.export_text(clear=False, styles=True).splitlines():
        screen.print(Text.from_ansi(line))
    return screen


def main() -> int:
    rsvg = shutil.which("rsvg-convert")
    console = Console(record=True, width=PIPE_WIDTH, file=io.StringIO(), force_terminal=False,
                      color_system="truecolor", highlight=False)
    os.chdir(DOCS)  # the chart lands where a person's would: in the working directory
    args = argparse.Namespace(scenario="seed-degraded", interactive=False, output="text",
                              chart=None, no_metrics=False)
    configure_logging("error", fmt=LogFormat.TEXT, timestamps=False)
    status = narrate(args, console)
    if status != 0:
        return status
    (DOCS / "zonemedic-demo-seed-degraded.png").replace(DOCS / "demo-chart.png")
    text = console.export_text(clear=False)
    transcript = "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
    (DOCS / "demo-output.txt").write_text(transcript)
    README.write_text(with_excerpt(README.read_text(), readme_excerpt(transcript)))
    if rsvg is None:
        print(MISSING_RSVG, file=sys.stderr)
        return 1
    svg = DOCS / "demo-terminal.svg"
    # rich sizes each run of text to its cell width (textLength); rsvg-convert then squeezes runs
    # drawn in a fallback font, and drops a run's leading spaces: let the monospace font keep its
    # own width, and keep the spaces
    drawn = re.sub(r' textLength="[^"]*"', "", as_terminal(console).export_svg(title="make demo"))
    drawn = drawn.replace('<svg class="rich-terminal"',
                          '<svg xml:space="preserve" class="rich-terminal"', 1)
    svg.write_text(drawn.replace('font-family: Fira Code, monospace',
                                 "font-family: 'DejaVu Sans Mono', monospace"))
    png = DOCS / "demo-terminal.png"
    try:
        subprocess.run([rsvg, "--zoom", "0.75", "-o", str(png), str(svg)], check=True)
    finally:
        svg.unlink()
    # a small file: 64 colours are plenty for a terminal (Pillow comes with matplotlib)
    Image.open(png).convert("RGB").quantize(colors=64).save(png, optimize=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
