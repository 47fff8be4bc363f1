"""`zonemedic demo --scenario prevent`: seed-blocked's PyTorchJob, created through the agent's
admission webhook on the twin, starts in one zone at its first try and opens no incident."""

from __future__ import annotations

import json

import pytest

from agent.cli import main


def test_the_prevent_story_places_the_job_at_admission(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--scenario", "prevent", "--output", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["zones"] == {"us-east-1a": 5}
    assert (summary["verdict"], summary["incidents"], summary["admission"]) == ("healthy", 0, "placed")
    assert summary["warning"].startswith("zonemedic: pinned PyTorchJob ml/llm-finetune to zone us-east-1a")
    assert "pods placed at the first try: us-east-1a ×5" in err
