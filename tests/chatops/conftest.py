"""Fixtures of the chat-layer tests, and the guard that keeps them on loopback.

Every test here runs with `socket.socket.connect` refusing any address that is not 127.0.0.1 or
::1, so a test that would reach real Slack (or anything else) fails loudly instead."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from agent.fakes.slack import FakeSlack
from tests.support.loopback import LOOPBACK_ONLY, is_loopback


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    reached: list[Any] = []
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def guarded(self: socket.socket, address: Any) -> Any:
        reached.append(address)
        if not is_loopback(address):
            raise OSError(f"{LOOPBACK_ONLY}: refused {address!r}")
        return connect(self, address)

    def guarded_ex(self: socket.socket, address: Any) -> Any:
        reached.append(address)
        if not is_loopback(address):
            raise OSError(f"{LOOPBACK_ONLY}: refused {address!r}")
        return connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_ex)
    yield reached


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack(
        users={"U1": "alice", "U2": "bob", "U3": "carol", "U9": "mallory"},
        usergroups={"S1": ["U3"]},
    )
    with fake:
        yield fake


@pytest.fixture
def rig(slack: FakeSlack, sqlite_template: Any, tmp_path: Any) -> Iterator[Any]:
    from tests.chatops.harness import start_rig

    running = start_rig(slack, sqlite_template, tmp_path)
    try:
        yield running
    finally:
        running.stop()
