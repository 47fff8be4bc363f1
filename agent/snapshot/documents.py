"""Decode one snapshot file's bytes into a flat list of Kubernetes objects (plain dicts).

Accepts JSON (decoded with orjson) or YAML (one or many documents); a document may be a single
object or a `kind: List` / `*List` with `items` (as `kubectl get -o yaml` prints). YAML passes the
bounded-YAML check first (nesting, recursive anchors, alias bombs); Lists may nest at most
`MAX_LIST_NESTING` deep. Called by
`agent.snapshot.collection`. It does not interpret kinds; it only checks that every item is an
object with a string `kind`. Errors are `SnapshotError` naming the file (and item or line).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import yaml

from agent.errors import SnapshotError
from agent.parsing.bounded_yaml import YamlLimitError, check_yaml

try:  # the C loader is ~10x faster; fall back to the pure-Python one when libyaml is absent
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]


# Lists (and `kind: List` items) inside lists: kubectl nests one level; anything past this is hostile
MAX_LIST_NESTING = 16


def _looks_like_json(data: bytes) -> bool:
    head = data[:4096].lstrip()
    return head[:1] in (b"{", b"[")


def _decode(data: bytes, *, source: str) -> list[Any]:
    """The file's top-level documents."""
    if source.endswith(".json") or _looks_like_json(data):
        try:
            return [orjson.loads(data)]
        except orjson.JSONDecodeError as exc:
            if source.endswith(".json"):
                raise SnapshotError(f"{source}: invalid JSON: {exc}") from exc
            # YAML that merely starts with a flow collection: let the YAML parser try.
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SnapshotError(f"{source}: not UTF-8 text: {exc.reason}") from exc
    try:
        check_yaml(text)  # depth, recursive anchors and alias bombs, before anything is built
        return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except YamlLimitError as exc:
        raise SnapshotError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SnapshotError(f"{source}:{where}: invalid YAML: {problem}") from exc


def _is_list(doc: dict[str, Any]) -> bool:
    kind = doc.get("kind")
    return isinstance(kind, str) and kind.endswith("List") and "items" in doc


def _flatten(
    doc: Any, *, source: str, counter: list[int], depth: int = 0
) -> Iterator[dict[str, Any]]:
    if depth > MAX_LIST_NESTING:
        raise SnapshotError(
            f"{source}: item {counter[0]}: lists nested deeper than {MAX_LIST_NESTING} levels"
        )
    if isinstance(doc, list):
        for item in doc:
            yield from _flatten(item, source=source, counter=counter, depth=depth + 1)
        return
    if isinstance(doc, dict) and _is_list(doc):
        items = doc["items"]
        if items is None:
            return
        if not isinstance(items, list):
            raise SnapshotError(
                f"{source}: item {counter[0]}: {doc['kind']}.items: expected a list, "
                f"got {type(items).__name__}"
            )
        for item in items:
            yield from _flatten(item, source=source, counter=counter, depth=depth + 1)
        return
    index = counter[0]
    counter[0] += 1
    if not isinstance(doc, dict):
        raise SnapshotError(
            f"{source}: item {index}: expected a Kubernetes object, got {type(doc).__name__}"
        )
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise SnapshotError(f"{source}: item {index}: missing or invalid `kind`")
    yield doc


def decode_items(data: bytes, *, source: str) -> list[dict[str, Any]]:
    """Every object in the file, Lists flattened, in file order (the index used in errors)."""
    counter = [0]
    out: list[dict[str, Any]] = []
    for doc in _decode(data, source=source):
        out.extend(_flatten(doc, source=source, counter=counter))
    return out
