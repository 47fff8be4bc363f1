"""Fixtures of the runtime tests: a pipeline world on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.world import World


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    try:
        yield w
    finally:
        w.store.close()
