"""Scenario cases run through the real `zonemedic diagnose --output json` process.

Cases live in ../shared/scenarios/ (relative to the repository; the shared examples) and beside
this file (tests/scenarios/<case>/, our own). Each has snapshot.yaml, optional config.yaml and
expect.json: exactly the listed jobs, each with its verdict, remediable and target_zone, and at
least one policy of `policies_any` (by name, the part after the last '/') in its denied flows.
Optional per job: `uncertain_any` (a policy name among the unreadable policies that may select it),
`uncertain_none`, `caveats_any` (a feature), `dataplane`, `excluded_labels` (all left out of
identities), `mislabelled_pods`, `reasons_any` (a substring of some reason), `reasons_of_flows`
(a deny reason among its denied flows). Every unreadable policy of a case must be named in a
warning on stderr, with its field.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SHARED = REPO.parent / "shared" / "scenarios"


def _cases(root: Path) -> list[Path]:
    return (
        sorted(p for p in root.iterdir() if (p / "expect.json").is_file()) if root.is_dir() else []
    )


def _command() -> list[str]:
    script = Path(sys.executable).parent / "zonemedic"
    return [str(script)] if script.exists() else [sys.executable, "-m", "agent.cli"]


def _diagnose(case: Path) -> dict[str, Any]:
    result, _ = _run(case)
    return result


def _run(case: Path) -> tuple[dict[str, Any], str]:
    args = [*_command(), "diagnose", "--snapshot", str(case / "snapshot.yaml"), "--output", "json"]
    if (case / "config.yaml").is_file():
        args += ["--config", str(case / "config.yaml")]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result, proc.stderr


def _names(items: list[dict[str, Any]], key: str) -> set[str]:
    return {str(i[key]).rsplit("/", 1)[-1] for i in items}


def _check(case: Path) -> None:
    expected = json.loads((case / "expect.json").read_text())["findings"]
    result, stderr = _run(case)
    actual = result["findings"]

    def key(f: dict[str, Any]) -> tuple[str, str, str]:
        return (f["job"]["kind"], f["job"]["namespace"], f["job"]["name"])

    found = {key(f): f for f in actual}
    assert sorted(found) == sorted(key(e) for e in expected), "exactly the listed jobs"
    for want in expected:
        got = found[key(want)]
        summary = (got["verdict"], got["remediable"], got["target_zone"])
        assert summary == (want["verdict"], want["remediable"], want["target_zone"]), (
            key(want),
            got["reasons"],
        )
        if want.get("policies_any"):
            names = {p.rsplit("/", 1)[-1] for flow in got["denied_flows"] for p in flow["policies"]}
            assert names & set(want["policies_any"]), (key(want), names)
        _check_trust(want, got, stderr)


def _check_trust(want: dict[str, Any], got: dict[str, Any], stderr: str) -> None:
    where = (got["job"], got["reasons"])
    if "uncertain_any" in want:
        assert _names(got["uncertain"], "policy") & set(want["uncertain_any"]), where
    if want.get("uncertain_none"):
        assert got["uncertain"] == [], where
    for u in got["uncertain"]:
        assert u["policy"] in stderr and (not u["field"] or u["field"] in stderr), stderr
    if "caveats_any" in want:
        assert {c["feature"] for c in got["caveats"]} & set(want["caveats_any"]), where
    if "dataplane" in want:
        assert got["identity_labels"]["dataplane"] == want["dataplane"], where
    if "excluded_labels" in want:
        excluded = {e["label"] for e in got["identity_labels"]["excluded"]}
        assert set(want["excluded_labels"]) <= excluded, (where, excluded)
        assert all(e["why"] for e in got["identity_labels"]["excluded"])
    if "mislabelled_pods" in want:
        assert [m["pod"] for m in got["mislabelled_pods"]] == want["mislabelled_pods"], where
    for text in want.get("reasons_any", ()):
        assert any(text in r for r in got["reasons"]), (where, text)
    if "reasons_of_flows" in want:
        reasons = {f["reason"] for f in got["denied_flows"]}
        assert reasons & set(want["reasons_of_flows"]), (where, reasons)


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared scenarios folder {SHARED} is absent")
@pytest.mark.parametrize("case", _cases(SHARED), ids=lambda p: p.name)
def test_shared_scenario(case: Path) -> None:
    _check(case)


@pytest.mark.parametrize("case", _cases(HERE), ids=lambda p: p.name)
def test_own_scenario(case: Path) -> None:
    _check(case)


def test_own_cases_exist() -> None:
    assert len(_cases(HERE)) >= 7
