"""Strict JSON: the one reader of the JSON bodies the agent's HTTP endpoints accept.

Who calls it: the decision API (`agent.runtime.decision_http`) and the Alertmanager webhook
(`agent.sources.alertmanager`). A body is refused with `JsonError` naming the problem when it is:

- not UTF-8 (the offset of the first bad byte is named);
- not JSON as RFC 8259 writes it: a syntax error, `NaN` or `Infinity`, a `\\ud800` escape that is
  half a surrogate pair (text no database can store), nesting deeper than the parsers go;
- an object with the same key twice (the key is named): parsers disagree on which one wins, so a
  body that means two things to two readers is never taken.

What it does not do: check the shape of the document (each endpoint does), or bound the size of
the body (the HTTP layer stops reading past each endpoint's limit).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from agent.errors import InputError


class JsonError(InputError):
    """A JSON body that cannot be taken; the message names the problem in one line."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JsonError(f"duplicate key {json.dumps(key)} in an object")
        out[key] = value
    return out


def parse_json(raw: bytes, *, what: str = "body") -> Any:
    """The JSON document `raw` holds; `JsonError` (`what: problem`) when it is not strict JSON."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonError(
            f"{what}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    try:
        orjson.loads(raw)  # syntax, NaN, lone surrogates: orjson refuses what RFC 8259 does
    except orjson.JSONDecodeError as exc:
        raise JsonError(f"{what}: not JSON: {' '.join(str(exc).split())}") from None
    try:
        return json.loads(text, object_pairs_hook=_pairs)
    except JsonError as exc:
        raise JsonError(f"{what}: {exc}") from None
    except RecursionError:  # deeper than the interpreter's recursion limit (orjson took it)
        raise JsonError(f"{what}: not JSON: nested too deeply") from None
