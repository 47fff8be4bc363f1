"""An RFC 6902 JSON patch that turns one JSON document into another.

Who calls it: `agent.admission.decision`, which builds the planned object (the remediation plan's
template changes merged into the object being created) and answers the API server with the patch
from the object as sent to it. Pure: two documents in, a list of operations out; it applies
nothing (`apply` is for checking a patch, in tests and the bench).

Rules: maps are compared key by key (a key only in the new one is `add`ed, only in the old one
`remove`d, in both and different: recursed into when both values are maps, else `replace`d); a
list that differs is replaced whole (the patch stays exact whatever the server's list types).
Keys are escaped as RFC 6901 says (`~` -> `~0`, `/` -> `~1`). A part both documents hold as
one object is equal without a look inside (the planned object shares what it does not change
with the object as sent, so the walk costs what changed). The operations hold the new
document's values themselves (not copies): serialise them before changing that document.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

Operation = dict[str, Any]


def pointer(path: tuple[str, ...]) -> str:
    """The RFC 6901 JSON pointer of a path of map keys."""
    return "".join("/" + key.replace("~", "~0").replace("/", "~1") for key in path)


def diff(before: Any, after: Any) -> list[Operation]:
    """The operations that turn `before` into `after` (empty when they are equal)."""
    out: list[Operation] = []
    _diff(before, after, "", out)
    return out


def _diff(before: Any, after: Any, at: str, out: list[Operation]) -> None:
    """`diff` below the JSON pointer `at`."""
    if before is after:  # one value (JSON holds no NaN): a planned document shares what it keeps
        return
    if ((type(before) is dict or isinstance(before, Mapping))
            and (type(after) is dict or isinstance(after, Mapping))):  # fmt: skip
        for key in before:
            if key not in after:
                out.append({"op": "remove", "path": at + pointer((str(key),))})
        for key, value in after.items():
            if key not in before:
                out.append({"op": "add", "path": at + pointer((str(key),)), "value": value})
            else:
                _diff(before[key], value, at + pointer((str(key),)), out)
        return
    if before != after or type(before) is not type(after):
        out.append({"op": "replace", "path": at, "value": after})


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply(document: Any, operations: list[Operation]) -> Any:
    """`document` with the add/remove/replace operations of `diff` applied (a new value)."""
    out = copy.deepcopy(document)
    for op in operations:
        tokens = [_unescape(t) for t in str(op["path"]).split("/")[1:]]
        if not tokens:
            out = copy.deepcopy(op.get("value"))
            continue
        parent = out
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        if op["op"] == "remove":
            del parent[last]
        else:
            parent[last] = copy.deepcopy(op["value"])
    return out
