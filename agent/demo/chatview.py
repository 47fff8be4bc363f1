"""Slack as a person reads it, in the terminal: the fake Slack's traffic rendered with rich.

Who calls it: the demo's narration (`agent.demo.story`), which polls `ChatView.new_renderables`
while the story runs. `ChatView` reads what the agent sent to the fake Slack
(`FakeSlack.calls()`, in order) and turns each call into something to print: a posted message as a
panel (header, sections, context lines and the buttons as `[ Approve ]`), a thread reply as one
indented line, an edit as the lines that changed, an uploaded chart as a one-line note, an
ephemeral reply as a dimmed line. `mrkdwn` turns Slack's markup (`*bold*`, `_italic_`, `code`,
code blocks, `<url|label>`, the three HTML entities) into styled text.

What it does not do: talk to Slack or the agent, or decide anything; it only reads the fake.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from agent.fakes.slack import FakeSlack

_TOKEN = re.compile(r"```(.+?)```|`([^`\n]+)`|\*([^*\n]+)\*|(?<![A-Za-z0-9])_([^_\n]+)_(?![A-Za-z0-9])"
                    r"|<([^>|]+)\|([^>]+)>|<([^>]+)>", re.DOTALL)
_ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"))


def unescape(text: str) -> str:
    for entity, char in _ENTITIES:
        text = text.replace(entity, char)
    return text


def mrkdwn(source: str) -> Text:
    """Slack mrkdwn as styled text."""
    out = Text()
    at = 0
    for match in _TOKEN.finditer(source):
        out.append(unescape(source[at:match.start()]))
        block, code, bold, italic, url, label, bare = match.groups()
        if block is not None:
            out.append(unescape(block.strip("\n")), style="cyan")
        elif code is not None:
            out.append(unescape(code), style="cyan")
        elif bold is not None:
            out.append(unescape(bold), style="bold")
        elif italic is not None:
            out.append(unescape(italic), style="italic")
        elif url is not None:
            out.append(unescape(label), style="underline")
        else:
            out.append(unescape(bare), style="underline")
        at = match.end()
    out.append(unescape(source[at:]))
    return out


def _text_of(element: Mapping[str, Any]) -> str:
    text = element.get("text")
    if isinstance(text, Mapping):
        return str(text.get("text", ""))
    return str(text or "")


def block_lines(blocks: Sequence[Mapping[str, Any]], fallback: str) -> list[Text]:
    """The lines a person sees for `blocks` (the fallback text when there are none)."""
    if not blocks:
        return [mrkdwn(fallback)]
    lines: list[Text] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "header":
            lines.append(Text(unescape(_text_of(block)), style="bold"))
        elif kind == "section":
            lines.append(mrkdwn(_text_of(block)))
            for field in block.get("fields") or []:
                lines.append(mrkdwn(_text_of(field)))
        elif kind == "context":
            for element in block.get("elements") or []:
                lines.append(Text.assemble(mrkdwn(_text_of(element)), style="dim"))
        elif kind == "actions":
            buttons = Text()
            for element in block.get("elements") or []:
                style = {"primary": "bold green", "danger": "bold red"}.get(
                    str(element.get("style")), "bold")
                buttons.append(f"[ {_text_of(element)} ]", style=style)
                buttons.append("  ")
            lines.append(buttons)
        elif kind == "divider":
            lines.append(Text("─" * 20, style="dim"))
        elif kind == "image":
            lines.append(Text(f"(image) {block.get('alt_text', '')}", style="dim"))
    return lines


class ChatView:
    """Turns the fake Slack's new calls into renderables, in the order they happened."""

    def __init__(self, slack: FakeSlack, *, channel_name: str = "#ml-infra") -> None:
        self.slack = slack
        self.channel_name = channel_name
        self._seen = 0
        self._shown: dict[str, list[str]] = {}  # message ts -> its lines as last shown
        self.posted = 0

    def new_renderables(self) -> list[RenderableType]:
        calls = self.slack.calls()
        fresh, self._seen = calls[self._seen:], len(calls)
        out: list[RenderableType] = []
        for call in fresh:
            if call.status != 200:
                continue
            rendered = self._render(call.method, call.args)
            if rendered is not None:
                out.append(rendered)
        return out

    def _render(self, method: str, args: Mapping[str, Any]) -> RenderableType | None:
        blocks = list(args.get("blocks") or [])
        text = str(args.get("text", ""))
        if method == "chat.postMessage":
            lines = block_lines(blocks, text)
            if args.get("thread_ts"):
                return Text.assemble(("   ↳ thread  ", "dim"), *_joined(lines))
            self.posted += 1
            ts = self._latest_ts(args)
            if ts is not None:
                self._shown[ts] = [line.plain for line in lines]
            return Panel(Group(*lines), title=f"Slack {self.channel_name} · zonemedic",
                         title_align="left", border_style="magenta")
        if method == "chat.update":
            ts = str(args.get("ts", ""))
            lines = block_lines(blocks, text)
            before = set(self._shown.get(ts, []))
            changed = [line for line in lines if line.plain not in before]
            self._shown[ts] = [line.plain for line in lines]
            if not changed:
                return None
            return Panel(Group(*changed), title="Slack · message edited", title_align="left",
                         border_style="dim magenta")
        if method == "files.completeUploadExternal":
            files = args.get("files") or []
            titles = [str(f.get("title", "chart")) for f in files if isinstance(f, Mapping)]
            return Text(f"   ↳ thread  📎 {', '.join(titles) or 'file'} (chart uploaded)",
                        style="dim")
        if method == "chat.postEphemeral":
            return Text.assemble(("   (only visible to you) ", "dim"), mrkdwn(text))
        return None

    def _latest_ts(self, args: Mapping[str, Any]) -> str | None:
        channel = str(args.get("channel", ""))
        found = [m for m in self.slack.messages() if m.channel == channel and m.thread_ts is None]
        return found[-1].ts if found else None


def _joined(lines: Sequence[Text]) -> list[Text]:
    out: list[Text] = []
    for i, line in enumerate(lines):
        if i:
            out.append(Text(" "))
        out.append(line)
    return out
