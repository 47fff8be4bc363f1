"""The line-level lexical checks of the YAML subset `kubectl get -o yaml` prints.

Called by `agent.snapshot.blockyaml`, which reads that subset line by line: whether a text can be
in the subset at all (no tab, carriage return, other YAML line break, byte order mark or character
YAML does not allow in a stream), where a plain scalar may start, a single-quoted scalar closed on
its line, and which lines belong to the value of a `key:`. Pure: strings in, answers out.

What it does not do: build values or decide what a line means (`agent.snapshot.blockyaml`).
"""

from __future__ import annotations

import yaml

# YAML's line breaks other than \n, tabs, a byte order mark: outside the subset
OUTSIDE = ("\t", "\r", "\x85", "\u2028", "\u2029", "\ufeff")
_NON_PRINTABLE = yaml.reader.Reader.NON_PRINTABLE
_PRINTABLE_ASCII = b"\t\n\r" + bytes(range(0x20, 0x7F))  # what NON_PRINTABLE allows of ASCII
_SLICE = 1 << 20  # characters checked at a time
# characters that cannot start a plain scalar in block context (`-`, `?`, `:` can, when a
# non-space follows)
INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")


def single_quoted(text: str, start: int) -> tuple[str, int] | None:
    """The single-quoted scalar whose content starts at `start` (after the opening quote): its
    value and the index after the closing quote; None when it does not close on this line."""
    chunks: list[str] = []
    i = start
    while True:
        k = text.find("'", i)
        if k < 0:
            return None
        if k + 1 < len(text) and text[k + 1] == "'":
            chunks.append(text[i : k + 1])
            i = k + 2
            continue
        chunks.append(text[i:k])
        return "".join(chunks), k + 1


def non_printable(text: str) -> bool:
    """Whether the text holds a character YAML does not allow in a stream (the reader's
    `NON_PRINTABLE`); an ASCII text is checked a slice at a time at memory speed."""
    if not text.isascii():
        return _NON_PRINTABLE.search(text) is not None
    return any(
        text[i : i + _SLICE].encode("ascii").translate(None, _PRINTABLE_ASCII)
        for i in range(0, len(text), _SLICE)
    )


def plain_start(text: str) -> bool:
    """Whether a non-empty text can start a plain scalar in block context."""
    c0 = text[0]
    return c0 not in INDICATORS or (c0 in "-?:" and len(text) > 1 and text[1] != " ")


def extent(lines: list[str], start: int, n: int, col: int) -> int:
    """The end of the lines from `start` that belong to the value of a `key:` at column `col`
    (indented deeper, `-` entries at the key's column, blank lines)."""
    k = start
    while k < n and goes_on(lines, k, n, col):
        k += 1
    return k


def goes_on(lines: list[str], k: int, n: int, col: int) -> bool:
    """Whether line `k` still belongs to the value of a `key:` at column `col` (see `extent`)."""
    if k >= n:
        return False
    line = lines[k]
    return (line.startswith(" " * (col + 1)) or line.startswith(" " * col + "- ")
            or not line.strip(" ") or line == " " * col + "-")  # fmt: skip


def quoted_key(rest: str) -> bool:
    """Whether `rest` (starting at its quote) is a single-quoted key: closed on the line, then `:`."""
    found = single_quoted(rest, 1)
    return found is not None and rest[found[1] : found[1] + 1] == ":"
