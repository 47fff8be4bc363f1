"""A one-call snapshot parser for tests: manifests in, the real `Snapshot` out.

Who calls it: tests of snapshot, topology, diagnosis and the diagnose command, which describe a
cluster with `tests.support.objects` and run the parser over it as the command does.
What it does not do: build objects (see `tests.support.objects`) or read files from disk.
"""

from __future__ import annotations

from typing import Any

from agent.snapshot.collection import Snapshot, parse_snapshot
from tests.support.objects import as_list


def load(items: list[dict[str, Any]]) -> Snapshot:
    """Parse `items` with the real snapshot parser (as one JSON List file)."""
    return parse_snapshot([("test.json", as_list(items))])
