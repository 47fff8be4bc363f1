"""Printable text: outside text made safe to show a person, one escape per control character.

Who calls it: every human output of text zonemedic did not write itself (an actor's name, a
comment, a Slack display name, a label, a file name): the CLI's tables and `incidents show`,
its error and warning lines, the readable log lines, and the Slack messages (through
`agent.chatops.render.mrkdwn_escape`). A terminal obeys control characters: ESC starts a sequence
that can clear the screen, move the cursor or set the window title, CR returns to the line's
start, a newline forges a line of its own ("Approved by mallory"), the C1 CSI (U+009B) is ESC [
to some terminals, and the Unicode bidirectional overrides reorder what is shown (Trojan Source).
Each of them is written as its escape instead (`\\x1b`, `\\r`, `\\n`, `\\t`, `\\x9b`, `\\u202e`),
so what a person reads is the text as stored, on the line where it belongs.

Pure: text in, text out. What it does not do: escape for a markup (Slack mrkdwn's `<`, `>`, `&`
are the renderer's), or change stored data (JSON output already escapes every control character).
"""

from __future__ import annotations

import re

# C0 controls (tab and newline included), DEL, C1 controls, the line and paragraph separators and
# the bidirectional formatting characters
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character written as its escape (see the module docstring)."""
    return _CONTROL.sub(_escape, text)


def printable_lines(text: str) -> str:
    """Each line of `text` made printable, the line breaks between them kept (for a block this
    program laid out itself, whose fields are outside text)."""
    return "\n".join(printable(line) for line in text.split("\n"))
