"""Regenerates the README's pictures of the demo from a real run: `docs/demo-terminal.png` (the
terminal output of `zonemedic demo`, recorded by rich and drawn by `rsvg-convert` from the Debian
package librsvg2-bin, with the fonts of fonts-dejavu-core and fonts-noto-color-emoji),
`docs/demo-output.txt` (the same as text) and `docs/demo-chart.png` (the
utilization chart the demo writes). Usage: `.venv/bin/python docs/screenshot.py` from the
repository root. Needs the prometheus binary; it changes nothing else."""

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

from agent.demo.command import narrate
from agent.runtime.logging import LogFormat, configure_logging

DOCS = Path(__file__).resolve().parent
WIDTH = 100  # terminal columns


def main() -> int:
    rsvg = shutil.which("rsvg-convert")
    if rsvg is None:
        print("rsvg-convert is missing: apt-get install librsvg2-bin", file=sys.stderr)
        return 1
    console = Console(record=True, width=WIDTH, file=io.StringIO(), force_terminal=False,
                      color_system="truecolor", highlight=False)
    os.chdir(DOCS)  # the chart lands where a person's would: in the working directory
    args = argparse.Namespace(scenario="seed-degraded", interactive=False, json=False,
                              chart=None, no_metrics=False)
    configure_logging("error", fmt=LogFormat.TEXT, timestamps=False)
    status = narrate(args, console)
    if status != 0:
        return status
    (DOCS / "zonemedic-demo-seed-degraded.png").replace(DOCS / "demo-chart.png")
    text = console.export_text(clear=False)
    (DOCS / "demo-output.txt").write_text(
        "\n".join(line.rstrip() for line in text.splitlines()) + "\n")
    svg = DOCS / "demo-terminal.svg"
    # rich sizes each run of text to its cell width (textLength); rsvg-convert then squeezes runs
    # drawn in a fallback font, and drops a run's leading spaces: let the monospace font keep its
    # own width, and keep the spaces
    drawn = re.sub(r' textLength="[^"]*"', "", console.export_svg(title="make demo"))
    drawn = drawn.replace('<svg class="rich-terminal"', '<svg xml:space="preserve" class="rich-terminal"', 1)
    svg.write_text(drawn.replace('font-family: Fira Code, monospace',
                                 "font-family: 'DejaVu Sans Mono', monospace"))
    png = DOCS / "demo-terminal.png"
    subprocess.run([rsvg, "--zoom", "0.75", "-o", str(png), str(svg)], check=True)
    svg.unlink()
    # a small file: 64 colours are plenty for a terminal (Pillow comes with matplotlib)
    Image.open(png).convert("RGB").quantize(colors=64).save(png, optimize=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
