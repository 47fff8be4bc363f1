"""The path of a member of user input in an error message: `labels.job`, `groups[0]`, or
`labels["a b\\n"]` for a key that is not a plain printable word.

Who calls it: every parser that names where a bad value sits (settings, the Alertmanager webhook).
An error names its place in one line whatever the key holds: a key with a newline, a space, a dot
or a bracket is written JSON-quoted, so it can neither break the line nor pass for a nested path.
What it does not do: validate the key or the value.
"""

from __future__ import annotations

import json

_NOT_PLAIN = ' ."[]'


def member(where: str, key: str) -> str:
    """`where.key` for a plain word, `where["..."]` (JSON-quoted) otherwise; `key` alone without a
    `where`."""
    if key and key.isprintable() and not any(c in key for c in _NOT_PLAIN):
        return f"{where}.{key}" if where else key
    return f"{where}[{json.dumps(key)}]"
