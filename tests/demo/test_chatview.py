"""Slack's markup as a person reads it in the terminal (table-driven: mrkdwn in, plain text and
styles out), and a posted message with its buttons rendered from the fake Slack's record."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rich.console import Console

from agent.demo.chatview import ChatView, block_lines, mrkdwn
from agent.fakes.slack import FakeSlack


@pytest.mark.parametrize(("source", "plain", "styled"), [
    ("plain words", "plain words", []),
    ("*Approved* by dana", "Approved by dana", [("Approved", "bold")]),
    ("moved to _zone-a_ now", "moved to zone-a now", [("zone-a", "italic")]),
    ("a `nodeSelector` pin", "a nodeSelector pin", [("nodeSelector", "cyan")]),
    ("```+spec:\n+  x: 1```", "+spec:\n+  x: 1", [("+spec:\n+  x: 1", "cyan")]),
    ("see <https://x.invalid/i/1|incident 1>", "see incident 1", [("incident 1", "underline")]),
    ("&lt;none&gt; &amp; more", "<none> & more", []),
    ("snake_case_name stays", "snake_case_name stays", []),
])
def test_mrkdwn(source: str, plain: str, styled: list[tuple[str, str]]) -> None:
    text = mrkdwn(source)
    assert text.plain == plain
    spans = [(text.plain[s.start:s.end], str(s.style)) for s in text.spans]
    assert spans == styled


def test_blocks_read_as_header_sections_context_and_buttons() -> None:
    lines = block_lines([
        {"type": "header", "text": {"type": "plain_text", "text": "Zone split"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": "*Pods per zone*: a: 4"}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "incident #1"}]},
        {"type": "actions", "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": "Approve"},
             "style": "primary"},
            {"type": "button", "text": {"type": "plain_text", "text": "Reject"},
             "style": "danger"}]},
    ], "fallback")
    assert [line.plain.rstrip() for line in lines] == [
        "Zone split", "Pods per zone: a: 4", "incident #1", "[ Approve ]  [ Reject ]"]
    assert [line.plain for line in block_lines([], "only *text*")] == ["only text"]


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


def test_the_view_prints_a_post_its_thread_and_an_edit_once(slack: FakeSlack) -> None:
    from slack_sdk import WebClient

    client = WebClient(token=slack.bot_token, base_url=slack.base_url)
    view = ChatView(slack)
    posted = client.chat_postMessage(channel="C1", text="split", blocks=[
        {"type": "section", "text": {"type": "mrkdwn", "text": "*split* found"}}])
    client.chat_postMessage(channel="C1", text="Approved by dana", thread_ts=posted["ts"])
    client.chat_update(channel="C1", ts=posted["ts"], text="split", blocks=[
        {"type": "section", "text": {"type": "mrkdwn", "text": "*split* found"}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "now resolved"}]}])
    console = Console(record=True, width=60)
    for renderable in view.new_renderables():
        console.print(renderable)
    out = console.export_text()
    assert out.index("split found") < out.index("↳ thread") < out.index("message edited")
    assert out.count("split found") == 1  # the edit shows only what changed
    assert "now resolved" in out and view.posted == 1
    assert view.new_renderables() == []  # each call is shown once
