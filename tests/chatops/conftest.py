"""Fixtures of the chat-layer tests, and the guard that keeps them on loopback.

Every test here runs with `socket.socket.connect` refusing any address that is not 127.0.0.1 or
::1, so a test that would reach real Slack (or anything else) fails loudly instead. The slash
command tests (test_slash_explain, test_slash_whatif) share the parsed kubectl dump of
examples/split-blocked.yaml (`split_blocked`), a chat rig started with the ports they pass
(`chat_rig`) and the signed round trip of one command to its ephemeral reply (`ask`)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from agent.commands.diagnose import load_snapshot
from agent.fakes.slack import FakeSlack
from agent.snapshot.collection import Snapshot
from tests.support.loopback import LOOPBACK_ONLY, is_loopback

if TYPE_CHECKING:
    from tests.chatops.harness import ChatRig

REPO = Path(__file__).resolve().parents[2]


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


@pytest.fixture
def chat_rig(slack: FakeSlack, sqlite_template: Any, tmp_path: Any) -> Iterator[Callable[..., ChatRig]]:
    """Starts a chat rig with the ports given (`start_rig`'s keywords: `explain=`, `whatif=`...);
    every rig started is stopped at the end of the test."""
    from tests.chatops.harness import start_rig

    started: list[ChatRig] = []

    def start(**ports: Any) -> ChatRig:
        started.append(start_rig(slack, sqlite_template, tmp_path, **ports))
        return started[-1]

    try:
        yield start
    finally:
        for running in started:
            running.stop()


@pytest.fixture
def split_blocked() -> Snapshot:
    """The parsed kubectl dump of examples/split-blocked.yaml (a job split, its flows blocked)."""
    return load_snapshot([REPO / "examples" / "split-blocked.yaml"])


def _ask(rig: ChatRig, text: str, user: str = "U9") -> tuple[str, str]:
    from tests.chatops.harness import CHANNEL

    answer = rig.slack.command(rig.url, user=user, text=text)
    assert answer.status == 200
    rig.wait(lambda: bool(rig.slack.ephemeral(user)))
    reply = rig.slack.ephemeral(user)[0]
    assert reply.channel == CHANNEL
    return reply.text, json.dumps(reply.blocks)


@pytest.fixture
def ask() -> Callable[..., tuple[str, str]]:
    """`ask(rig, text, user="U9")`: the fake Slack sends the signed slash command `text` as
    `user`; the ephemeral reply in the rig's channel, as (its text, its blocks as JSON)."""
    return _ask
