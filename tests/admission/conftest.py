"""Fixtures of the admission tests: the cluster view and the webhook served over HTTPS
(`tests.support.admission` builds them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.admission.decision import View
from agent.store.repository import IncidentStore
from tests.support.admission import Served, base_items, make_view, serve


@pytest.fixture
def view_of() -> Callable[..., View]:
    """A view of the base cluster plus the objects given (bound pods, more policies)."""
    return lambda *extra: make_view([*base_items(), *extra])


@pytest.fixture
def served(tmp_path: Path, store: IncidentStore) -> Iterator[Served]:
    """The webhook over the base cluster, recording into `store` (SQLite and PostgreSQL)."""
    found = serve(tmp_path, store=store, view=make_view(base_items()))
    yield found
    found.server.stop()
    found.webhook.stop()
