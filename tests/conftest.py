"""Settings of the whole test run: the Hypothesis profiles, the order tests start in, and an
environment without the terminal's size.

Who calls it: pytest, before the conftest of any test folder. `make test` runs the suite on
several pytest-xdist workers, each test file whole on one worker (`--dist loadfile`, so a
module-scoped fixture such as a twin or an agent run is built once); this module makes that run
finish early and reproducibly:

- Hypothesis profile `ci` (`--hypothesis-profile=ci`, which `make test` passes): every property
  test draws the same examples on every run and on whichever worker it lands, and no example
  database is read or written. Without the option the library's default applies (random draws,
  failing examples remembered in `.hypothesis/`), for exploring on a developer's machine.
- The files known to run long start first (`LONG_FIRST`), so that no worker is left running one
  of them alone at the end while the others idle.
- `COLUMNS` and `LINES` are removed from every test's environment: a worker process inherits them
  from readline (80x24) where a plain run has none, and output widths must not depend on where a
  test runs. A test that wants a width sets it (monkeypatch.setenv).

What it does not do: hold fixtures of a folder (each folder's conftest holds its own), or change
what any test checks or how long it may take.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)

# The test files that take longest (each tens of seconds on 2 cores, most of it waiting on
# subprocesses, the twin, PostgreSQL or Prometheus), longest first. Order only: a file missing
# here still runs, after these, in collection order.
LONG_FIRST: tuple[str, ...] = (
    "tests/soak/test_soak.py",
    "tests/remediation/test_kill.py",
    "tests/demo/test_demo.py",
    "tests/store/test_timeline_fold.py",
    "tests/commands/test_run.py",
    "tests/test_cli.py",
    "tests/remediation/test_remediator_group.py",
    "tests/commands/test_sweep.py",
    "tests/runtime/test_decision_http.py",
    "tests/runtime/test_agent_e2e.py",
    "tests/commands/test_hostile_cli.py",
    "tests/commands/test_incidents.py",
    "tests/remediation/test_remediator.py",
    "tests/deploy/test_rbac_usage.py",
    "tests/runtime/test_pipeline.py",
    "tests/sources/test_alertmanager.py",
)
_RANK = {path: rank for rank, path in enumerate(LONG_FIRST)}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # stable: within a file the collection order stays (its fixtures are set up as in a plain run)
    items.sort(key=lambda item: _RANK.get(item.nodeid.split("::", 1)[0], len(LONG_FIRST)))


@pytest.fixture(autouse=True)
def _no_terminal_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
