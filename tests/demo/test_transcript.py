"""The README's transcript of the demo is `docs/demo-output.txt` in substance (the same lines in
the same order for the lines it shows; timings, dates, ids and measured figures aside), and the
comparison itself: what it forgives and what it does not (table-driven). A real run is compared
with the README in `test_demo.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.transcript import disagreements, items, normalise, readme_transcript

REPO = Path(__file__).resolve().parents[2]
OUTPUT = """\
zonemedic demo: a split job
✔ Pods placed  5 pods: a ×4, b ×1  [0.4s]
╭─ Slack #ml-infra · zonemedic ─────────╮
│ Incident #1 · opened 2026-12-01 23:18 │
│ UTC, resourceVersion 28               │
│ uid 217b2a52-a63b-4001-9490-4aa808e63f2b│
│ GPU utilization: 40% now              │
╰───────────────────────────────────────╯
   ↳ thread  ✅ Approved by dana
✔ Approval  approved by dana: answered in 18 ms  [7.0s]
… still waiting for dana  [5.5s]
   ↳ thread  🎉 Resolved
✔ Incident resolved  [13.6s]
"""


def test_the_readmes_transcript_is_the_generated_output() -> None:
    excerpt = readme_transcript((REPO / "README.md").read_text())
    assert len(items(excerpt)) > 20, "the README shows the story"
    assert disagreements(excerpt, (REPO / "docs" / "demo-output.txt").read_text()) == []


@pytest.mark.parametrize(
    ("excerpt", "missing"),
    [
        # timings, dates, ids and figures are not substance; wrapping inside a box is not either
        ("✔ Pods placed  5 pods: a ×4, b ×1  [9.9s]\n✔ Approval  approved by dana: answered in 3 ms  [1.0s]", []),
        ("╭─ Slack #ml-infra · zonemedic ─╮\n│ Incident #1 · opened 2026-11-30 12:31 UTC, │\n"
         "│ resourceVersion 31 uid 00000000-0000-0000-0000-000000000000 │\n╰─╯", []),
        ("╭─ Slack #ml-infra · zonemedic ─╮\n│ Incident #1 │\n│ ... │\n│ GPU utilization: 85% now │\n╰─╯", []),
        # streams interleave as timing has it
        ("✔ Approval  approved by dana: answered in 18 ms  [7.0s]\n   ↳ thread  ✅ Approved by dana", []),
        # ... but within one stream the order is the story's
        ("✔ Incident resolved  [13.6s]\n✔ Pods placed  5 pods: a ×4, b ×1  [0.4s]",
         ["[step] ✔ Pods placed 5 pods: a ×4, b ×1 [<n>s]"]),
        # other words are substance, and so is a box's text
        ("✔ Pods placed  6 pods: a ×5, b ×1  [0.4s]", ["[step] ✔ Pods placed 6 pods: a ×5, b ×1 [<n>s]"]),
        ("╭─ Slack #ml-infra · zonemedic ─╮\n│ GPU utilization: 40% later │\n╰─╯",
         ["[post] Slack #ml-infra · zonemedic | GPU utilization: <n>% later"]),
        ("   ↳ thread  ✋ Rejected by dana", ["[thread] ↳ thread ✋ Rejected by dana"]),
        # progress lines that depend on timing are not compared
        ("… still waiting for dana  [10.5s]\n…   still waiting", []),
    ],
)
def test_what_the_comparison_forgives(excerpt: str, missing: list[str]) -> None:
    assert disagreements(excerpt, OUTPUT) == missing


def test_normalise() -> None:
    assert normalise("opened 2026-12-01 23:18 UTC, resourceVersion 28, 84.9% >= 80.0%, in 7 ms,"
                     "  took 14s, 0.0s after, until 2026-12-02T22:58:07.003076+00:00") == (
        "opened <time>, resourceVersion <n>, <n>% >= <n>%, in <n> ms, took <n>s, <n>s after, "
        "until <time>")
