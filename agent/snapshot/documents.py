"""Decode one snapshot file's bytes into a stream of Kubernetes objects (plain dicts).

Accepts JSON (decoded with orjson) or YAML (one or many documents); a document may be a single
object or a `kind: List` / `*List` with `items` (as `kubectl get -o yaml` prints). Called by
`agent.snapshot.collection`. YAML goes through `agent.snapshot.blockyaml` (the block style kubectl
prints, read line by line) and, for anything else, `agent.snapshot.yamlstream` (libyaml's C parser
when PyYAML has it, a safe loader either way), with the same values: the items of a List are
handed out one at a time, never the whole document, so a large dump is parsed item by item. A YAML document whose
top-level `items` sequence turns out (its `kind` read after `items`, as kubectl orders keys) not
to be a `*List` is an error. YAML is bounded while it streams (nesting, recursive anchors, alias bombs:
`agent.parsing.bounded_yaml`); Lists may nest at most `MAX_LIST_NESTING` deep. It does not
interpret kinds; it only checks that every item is an
object with a string `kind`. Errors are `SnapshotError` naming the file (and item or line).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import yaml

from agent.errors import SnapshotError
from agent.parsing.bounded_yaml import YamlLimitError, syntax_error
from agent.snapshot.blockyaml import iter_values
from agent.snapshot.yamlstream import Part

# Lists (and `kind: List` items) inside lists: kubectl nests one level; anything past this is hostile
MAX_LIST_NESTING = 16


def _looks_like_json(data: bytes) -> bool:
    head = data[:4096].lstrip()
    return head[:1] in (b"{", b"[")


def _yaml_error(exc: yaml.YAMLError, *, source: str) -> SnapshotError:
    line, problem = syntax_error(exc)
    where = f" line {line}:" if line is not None else ""
    return SnapshotError(f"{source}:{where} invalid YAML: {problem}")


def _decode(data: bytes, *, source: str) -> Iterator[Any]:
    """The file's top-level documents, or the items of its Lists one at a time."""
    if source.endswith(".json") or _looks_like_json(data):
        try:
            yield orjson.loads(data)
            return
        except orjson.JSONDecodeError as exc:
            if source.endswith(".json"):
                raise SnapshotError(f"{source}: invalid JSON: {exc}") from exc
            # YAML that merely starts with a flow collection: let the YAML parser try.
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SnapshotError(f"{source}: not UTF-8 text: {exc.reason}") from exc
    values = iter_values(text)
    while True:
        try:
            part, value = next(values)
        except StopIteration:
            return
        except YamlLimitError as exc:
            raise SnapshotError(f"{source}: {exc}") from None
        except yaml.YAMLError as exc:
            raise _yaml_error(exc, source=source) from exc
        if part is Part.LIST_END:
            if not _is_list(value):  # its items went out already: they were not a List's
                raise SnapshotError(
                    f"{source}: a document with a top-level `items` sequence must be a List "
                    f"(kind: {value.get('kind')!r})"
                )
            continue
        yield value


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


def iter_items(data: bytes, *, source: str) -> Iterator[dict[str, Any]]:
    """Every object in the file, Lists flattened, in file order (the index used in errors),
    one at a time."""
    counter = [0]
    for doc in _decode(data, source=source):
        yield from _flatten(doc, source=source, counter=counter)


def decode_items(data: bytes, *, source: str) -> list[dict[str, Any]]:
    """Every object in the file, as a list (see `iter_items`)."""
    return list(iter_items(data, source=source))
