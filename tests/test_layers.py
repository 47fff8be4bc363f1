"""The import-linter contracts in pyproject.toml: the real tree keeps them all, and a wrong import
added to a copy of the package breaks the contract that forbids it (so the contracts can fail)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

LAYERS = "Layers: each package imports only the packages below it"
ADAPTERS = "The adapters do not know each other"
PURE_EDGES = "Rendering, planning and verifying are pure"
TWIN = "Only the CLI and the twin itself import the twin"
PURE_CORE = "The pure core imports no I/O library and no adapter"
DEMO = "Only the CLI imports the demo"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root, capture_output=True, text=True, timeout=120, check=False,
    )


def verdicts(output: str) -> dict[str, str]:
    """Contract name prefix -> KEPT or BROKEN, from lint-imports' summary (names may wrap)."""
    flat = " ".join(output.split())
    found = {}
    for name in (LAYERS, ADAPTERS, PURE_EDGES, TWIN, PURE_CORE, DEMO):
        at = flat.find(name)
        assert at >= 0, f"contract {name!r} not in the output:\n{output}"
        rest = flat[at:]
        kept, broken = rest.find("KEPT"), rest.find("BROKEN")
        found[name] = "BROKEN" if broken >= 0 and (kept < 0 or broken < kept) else "KEPT"
    return found


def test_the_real_tree_keeps_every_contract() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(verdicts(result.stdout).values()) == {"KEPT"}
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # the model is near the bottom: it must not reach up to an adapter (and the pure edges
        # and the sources, which import the model's job identity, would reach it through it)
        ("agent/model/job.py", "import agent.store.repository",
         {LAYERS, PURE_CORE, PURE_EDGES, ADAPTERS}),
        # siblings in one layer: the adapters must not know each other
        ("agent/sources/cache.py", "import agent.store.engine", {LAYERS, ADAPTERS}),
        ("agent/diagnosis/report.py", "import agent.remediation.plan", {LAYERS}),
        # the pure edges of the next issues: no I/O library, no clock
        ("agent/remediation/plan.py", "import httpx", {PURE_EDGES}),
        ("agent/chatops/render.py", "import time", {PURE_EDGES}),
        # production code outside the CLI must not import the twin
        ("agent/runtime/app.py", "import agent.twin.cluster", {TWIN}),
        ("agent/snapshot/documents.py", "import agent.twin.resources", {TWIN, PURE_CORE}),
        # nor the demo, which is not in the image either
        ("agent/runtime/app.py", "import agent.demo.story", {DEMO, LAYERS}),
    ],
)
def test_a_wrong_import_breaks_its_contract(tmp_path: Path, module: str, line: str, broken: set[str]) -> None:
    shutil.copytree(REPO / "agent", tmp_path / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}  # a deliberately wrong import\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout
    found = verdicts(result.stdout)
    assert {name for name, verdict in found.items() if verdict == "BROKEN"} == broken, result.stdout
    assert f"{module.removesuffix('.py').replace('/', '.')} -> " in result.stdout
