"""The import-linter contracts in pyproject.toml: the real tree keeps them all, and a wrong import
added to a copy of the package breaks the contract that forbids it (so the contracts can fail).
And no module of the agent imports itself through others: the import graph (grimp's, as
import-linter builds it, `TYPE_CHECKING` imports included) has no cycle, including the one between
a package's `__init__` and its own modules that the sibling contract does not see."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

LAYERS = "Layers: each package imports only the packages below it"
ADAPTERS = "The adapters do not know each other"
PURE_EDGES = "Rendering, planning and verifying are pure"
TWIN = "Only the CLI and the twin itself import the twin"
PURE_CORE = "The pure core imports no I/O library and no adapter"
DEMO = "Only the CLI imports the demo"
FAKES = "Only the demo, the rig and the fakes themselves import the fakes"
RIG = "Only the demo imports the rig"
FAKES_ALONE = "The fakes import no product code"
ACYCLIC = "No import cycle among the modules and packages of any package"
WRITER = "Only the writer writes"
ROOMS = "Remediation rooms: the plan side imports nothing of the run side"
FAMILY_STEPS = "Remediation families do not know each other"
FAMILY_PLANS = "Remediation family planners do not know each other"
PIPES = "The pipeline only pipes"
APPROVALS = "Approvals are the domain: no Slack, no HTTP, no cluster client, no remediation"
ROOT = "One composition root: only the commands, the demo, the rig and the running agent"
RUNNER = "The running agent builds no part"
CONTRACTS = (LAYERS, ADAPTERS, PURE_EDGES, TWIN, PURE_CORE, DEMO, FAKES, FAKES_ALONE, RIG, ACYCLIC,
             WRITER, ROOMS, FAMILY_STEPS, FAMILY_PLANS, PIPES, APPROVALS, ROOT, RUNNER)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root, capture_output=True, text=True, timeout=120, check=False,
    )


def verdicts(output: str) -> dict[str, str]:
    """Contract name prefix -> KEPT or BROKEN, from lint-imports' summary (names may wrap)."""
    flat = " ".join(output.split())
    found = {}
    for name in CONTRACTS:
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
        # and the sources, which import the model's job identity, would reach it through it;
        # the store imports the model, so this is a cycle as well)
        ("agent/model/job.py", "import agent.store.repository",
         {LAYERS, PURE_CORE, PURE_EDGES, ADAPTERS, ACYCLIC}),
        # siblings in one layer: the adapters must not know each other
        ("agent/sources/cache.py", "import agent.store.engine", {LAYERS, ADAPTERS}),
        ("agent/diagnosis/report.py", "import agent.remediation.plan", {LAYERS}),
        # the pure edges of the next issues: no I/O library, no clock
        ("agent/remediation/plan.py", "import httpx", {PURE_EDGES}),
        ("agent/chatops/render.py", "import time", {PURE_EDGES}),
        # production code outside the CLI must not import the twin
        ("agent/runtime/app.py", "import agent.twin.cluster", {TWIN}),
        ("agent/snapshot/documents.py", "import agent.twin.resources", {TWIN, PURE_CORE}),
        # nor the demo, which is not in the image either (and which imports the runtime)
        ("agent/runtime/app.py", "import agent.demo.story", {DEMO, LAYERS, ACYCLIC}),
        # nor the fakes (the fake Slack), which are for tests and the demo, and not in the image
        ("agent/chatops/slack.py", "import agent.fakes.slack", {FAKES}),
        # a fake speaks its protocol on its own: it does not borrow the agent's signing
        ("agent/fakes/slack.py", "import agent.chatops.verification", {FAKES_ALONE}),
        # nor the rig, which starts the fakes and the twin with agents (the demo's, the tests')
        ("agent/commands/run.py", "import agent.rig.rig", {RIG}),
        ("agent/runtime/app.py", "import agent.rig.config", {RIG, LAYERS, ACYCLIC}),
        # the pipeline serves no HTTP read (the agent does, over its store)
        ("agent/runtime/recording.py", "import agent.runtime.incidents", {PIPES}),
        # approvals are one package beside the chat layer and the remediation, below the runtime:
        # it reaches neither sibling nor up (the runtime imports the approvals: a cycle too), and
        # its rule stays pure; the remediation knows nothing of approvals
        ("agent/approval/decision.py", "import agent.chatops.slack", {LAYERS, APPROVALS}),
        ("agent/approval/expiry.py", "import agent.runtime.root", {LAYERS, APPROVALS, ACYCLIC, ROOT}),
        ("agent/approval/requests.py", "import agent.commands.decisions", {LAYERS, APPROVALS, ACYCLIC}),
        ("agent/approval/approvers.py", "import time", {PURE_EDGES}),
        ("agent/approval/step.py", "import agent.remediation.plan", {LAYERS, APPROVALS}),
        ("agent/remediation/remediator.py", "import agent.approval.decision", {LAYERS}),
        # one composition root: a part does not reach back to it (and would close a cycle)
        ("agent/runtime/pipeline.py", "import agent.runtime.root", {PIPES, ROOT, ACYCLIC}),
        ("agent/runtime/remediation_queue.py", "import agent.runtime.root", {ROOT, ACYCLIC}),
        # the running agent runs what the root built; it builds no part itself
        ("agent/runtime/app.py", "import agent.runtime.chat", {RUNNER}),
        # a cycle between two modules of one package
        ("agent/twin/clock.py", "import agent.twin.cluster", {ACYCLIC}),
        # the remediation's rooms: only the writer (and the API reader) use the Kubernetes client
        ("agent/remediation/training_steps.py", "import kubernetes.client", {WRITER}),
        ("agent/remediation/remediator.py", "from kubernetes import client", {WRITER}),
        # the plan side knows nothing of the run; the families do not know each other
        ("agent/remediation/planner.py", "import agent.remediation.fence", {ROOMS}),
        ("agent/remediation/group_steps.py", "import agent.remediation.training_steps", {FAMILY_STEPS}),
        ("agent/remediation/training_plan.py", "import agent.remediation.group_plan", {FAMILY_PLANS}),
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
    dotted = module.removesuffix(".py").replace("/", ".")
    # the cycle contract names the imports it would remove relative to their package
    shown = f".{dotted.rpartition('.')[2]} -> " if broken == {ACYCLIC} else f"{dotted} -> "
    assert shown in result.stdout


def import_cycles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """Every cycle of the graph once, as `(a, b, ..., a)`: for each import a -> b, the shortest
    way back from b to a."""
    cycles: dict[frozenset[str], tuple[str, ...]] = {}
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                cycles.setdefault(frozenset(back), (module, *back))
    return sorted(cycles.values())


def graph_of(*imports: tuple[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported)
    return graph


@pytest.mark.parametrize(
    ("imports", "cycles"),
    [
        ([("a.x", "a.y"), ("a.y", "a.z"), ("a.x", "a.z")], []),
        ([("a.x", "a.y"), ("a.y", "a.x")], [("a.x", "a.y", "a.x")]),
        ([("a.x", "a.y"), ("a.y", "a.z"), ("a.z", "a.x")], [("a.x", "a.y", "a.z", "a.x")]),
        # a package's __init__ and one of its modules
        ([("a.p", "a.p.m"), ("a.p.m", "a.p")], [("a.p", "a.p.m", "a.p")]),
        # two cycles through one module, each reported once
        ([("a.x", "a.y"), ("a.y", "a.x"), ("a.x", "a.z"), ("a.z", "a.x")],
         [("a.x", "a.y", "a.x"), ("a.x", "a.z", "a.x")]),
    ],
)
def test_import_cycles_finds_each_cycle_once(
    imports: list[tuple[str, str]], cycles: list[tuple[str, ...]]
) -> None:
    assert import_cycles(graph_of(*imports)) == cycles


def test_no_module_of_the_agent_imports_itself_through_others() -> None:
    graph = grimp.build_graph("agent", cache_dir=None)
    assert "agent.twin.apiserver" in graph.modules and "agent.fakes.slack" in graph.modules
    assert import_cycles(graph) == []


def _is_test_module(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def imported_test_modules(source: str) -> list[str]:
    """The test modules (`test_*`, and a folder's `conftest`) a module's source imports, by
    dotted name."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            if _is_test_module(node.module):
                found.append(node.module)
            else:
                found += [f"{node.module}.{a.name}" for a in node.names if _is_test_module(a.name)]
    return found


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from tests.runtime.test_pipeline import World\n", ["tests.runtime.test_pipeline"]),
        ("import tests.commands.test_run\n", ["tests.commands.test_run"]),
        ("from tests.remediation import test_plan\n", ["tests.remediation.test_plan"]),
        ("from tests.chatops.conftest import LOOPBACK_ONLY\n", ["tests.chatops.conftest"]),
        ("from tests.remediation.builders import live\nimport json\n", []),
        ("from tests.support.waiting import wait\n", []),
    ],
)
def test_imported_test_modules_names_each_test_module(source: str, found: list[str]) -> None:
    assert imported_test_modules(source) == found


def test_no_test_imports_another_test_module() -> None:
    """Shared fixtures live in a folder's conftest and shared helpers in support modules: a test
    module imported by another would run its tests twice and tie two files together (and a
    conftest imported by a test would register its fixtures twice)."""
    offenders = {
        str(path.relative_to(REPO)): names
        for path in sorted((REPO / "tests").rglob("*.py"))
        if (names := imported_test_modules(path.read_text()))
    }
    assert offenders == {}
