"""Stream the values of a YAML text: libyaml's event parser, built straight into Python values.

Called by `agent.snapshot.documents` for YAML snapshots. `yaml.load_all` composes the node graph
of a whole document (every scalar a node object with marks), then constructs it in Python: for a
40 MB `kubectl get -o yaml` List that is tens of seconds and gigabytes. Here the parser's events
(`CSafeLoader`, libyaml's C parser, else the pure-Python `SafeLoader`) are built directly into
dicts, lists and scalars by one loop, and the items of a top-level List (a mapping whose `items`
is a sequence, as kubectl prints it) or of a top-level sequence are handed out one at a time
(`iter_values` yields `(Part, value)`), so the caller can parse and drop each object before the
next is read.

Safety is SafeLoader's: plain scalars are resolved by the loader's resolver and built by
`SafeConstructor`'s own constructors for the standard tags (str, int, float, bool, null,
timestamp, binary); an explicit tag on a mapping or sequence other than `!!map`/`!!seq`, or on a
scalar other than the standard ones, is an error (no `!!python/...`, no custom tags; `!!set`,
`!!omap` and `!!pairs` are refused too). Anchors, aliases and merge keys (`<<`) work as in
SafeLoader. Errors are `yaml.YAMLError`s with a mark (the caller names file and line). A
document with a top-level `items` sequence whose `kind` does not end in `List` (known only once
the document ends) is reported by the caller. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import ScalarNode

from agent.parsing.bounded_yaml import EventChecker

try:  # libyaml's C parser; the pure-Python one when PyYAML was built without it
    from yaml import CSafeLoader as Loader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as Loader  # type: ignore[assignment]

C_PARSER = Loader.__name__ == "CSafeLoader"

STR = "tag:yaml.org,2002:str"
MAP_TAGS = frozenset({None, "!", "tag:yaml.org,2002:map"})
SEQ_TAGS = frozenset({None, "!", "tag:yaml.org,2002:seq"})
MERGE = "tag:yaml.org,2002:merge"
SCALAR_TAGS = frozenset(
    {
        STR,
        "tag:yaml.org,2002:null",
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:timestamp",
        "tag:yaml.org,2002:binary",
    }
)
CACHE_LIMIT = 200_000  # distinct scalars remembered (shared values, skipped re-resolution)

# frame layouts (lists, for speed): a mapping [MAP, dict, key, has_key, merges, start_mark],
# a sequence [SEQ, list, streamed]
MAP, SEQ = 0, 1
_ITEMS_KEY = "items"


class Part(Enum):
    """What `iter_values` hands out: a whole document; one item of a streamed List or top-level
    sequence; the streamed List's own mapping at its end (its `items` empty: for the caller to
    check its `kind`)."""

    DOCUMENT = "document"
    ITEM = "item"
    LIST_END = "list_end"


class _Merge:
    """The key `<<` (a merge key), kept apart from ordinary string keys."""


MERGE_KEY = _Merge()


def _error(problem: str, mark: Any) -> ConstructorError:
    return ConstructorError(None, None, problem, mark)


def _is_list_kind(kind: Any) -> bool:
    return isinstance(kind, str) and kind.endswith("List")


def iter_values(text: str | bytes, *, loader: type[Any] = Loader) -> Iterator[tuple[Part, Any]]:
    """Yield each document's value as `(Part.DOCUMENT, value)`, except that the items of a
    top-level `items` sequence (in a mapping whose `kind`, if already read, ends in `List`) and
    the elements of a top-level sequence come one by one as `(Part.ITEM, item)`; such a mapping
    then comes as `(Part.LIST_END, mapping)` with its `items` empty (a streamed top-level
    sequence adds nothing more). `loader`: `yaml.CSafeLoader` or `yaml.SafeLoader` (the parser,
    resolver and scalar constructors used)."""
    instance = loader(text)
    try:
        yield from _build(instance)
    finally:
        instance.dispose()


def _build(loader: Any) -> Iterator[tuple[Part, Any]]:
    resolve = loader.resolve
    constructors = loader.yaml_constructors
    get_event = loader.get_event
    plain: dict[str, Any] = {}  # plain scalar text -> its value (resolved and built once)
    quoted: dict[str, str] = {}  # quoted scalar text -> one shared str
    anchors: dict[str, Any] = {}
    stack: list[list[Any]] = []
    root: Any = None
    streamed_doc = False
    checker = EventChecker()  # nesting, recursive anchors, alias bombs: refused as they stream

    def scalar(event: Any) -> Any:
        tag = event.tag
        value = event.value
        if tag is None:
            if event.implicit[0]:  # plain: resolve (int, bool, null, timestamp, ...)
                found = plain.get(value, plain)
                if found is not plain:
                    return found
                tag = resolve(ScalarNode, value, (True, False))
                if tag == STR:
                    built = value
                elif tag == MERGE:
                    built = MERGE_KEY
                else:
                    built = constructors[tag](loader, ScalarNode(tag, value))
                if len(plain) >= CACHE_LIMIT:
                    plain.clear()
                plain[value] = built
                return built
            tag = STR
        if tag in ("!", STR):
            shared = quoted.get(value)
            if shared is None:
                if len(quoted) >= CACHE_LIMIT:
                    quoted.clear()
                quoted[value] = shared = value
            return shared
        if tag not in SCALAR_TAGS:
            raise _error(f"could not determine a constructor for the tag {tag!r}", event.start_mark)
        return constructors[tag](loader, ScalarNode(tag, value, style=event.style))

    while True:
        event = get_event()
        checker.feed(event)
        cls = event.__class__
        if cls is ScalarEvent:
            value = scalar(event)
            if event.anchor is not None:
                anchors[event.anchor] = value
        elif cls is MappingStartEvent:
            if event.tag not in MAP_TAGS:
                raise _error(f"could not determine a constructor for the tag {event.tag!r}", event.start_mark)
            mapping: dict[Any, Any] = {}
            if event.anchor is not None:
                anchors[event.anchor] = mapping
            stack.append([MAP, mapping, None, False, None, event.start_mark])
            continue
        elif cls is SequenceStartEvent:
            if event.tag not in SEQ_TAGS:
                raise _error(f"could not determine a constructor for the tag {event.tag!r}", event.start_mark)
            sequence: list[Any] = []
            if event.anchor is not None:
                anchors[event.anchor] = sequence
            streamed = event.anchor is None and (
                not stack  # a document that is a sequence of objects
                or (
                    len(stack) == 1
                    and stack[0][0] == MAP
                    and stack[0][3]  # the sequence is the value of the key `items`
                    and stack[0][2] == _ITEMS_KEY
                    and ("kind" not in stack[0][1] or _is_list_kind(stack[0][1]["kind"]))
                )
            )
            streamed_doc = streamed_doc or streamed
            stack.append([SEQ, sequence, streamed])
            continue
        elif cls is MappingEndEvent:
            frame = stack.pop()
            value = frame[1]
            if frame[4] is not None:  # merge keys: explicit keys win, earlier merges win
                merged: dict[Any, Any] = {}
                for source in frame[4]:
                    for k, v in source.items():
                        merged.setdefault(k, v)
                merged.update(value)
                value.clear()
                value.update(merged)
        elif cls is SequenceEndEvent:
            value = stack.pop()[1]
        elif cls is AliasEvent:
            if event.anchor not in anchors:
                raise yaml.composer.ComposerError(
                    None, None, f"found undefined alias {event.anchor!r}", event.start_mark
                )
            value = anchors[event.anchor]
        elif cls is DocumentStartEvent:
            anchors = {}
            root = None
            streamed_doc = False
            continue
        elif cls is DocumentEndEvent:
            if isinstance(root, dict) and streamed_doc:
                yield Part.LIST_END, root
            elif root is not None and not (isinstance(root, list) and streamed_doc):
                yield Part.DOCUMENT, root
            root = None
            continue
        elif cls is StreamEndEvent:
            return
        else:  # the stream's start
            continue
        # attach the finished value to its parent: a mapping's key, or a value
        parent: list[Any] | None = stack[-1] if stack else None
        if parent is not None and parent[0] == MAP and not parent[3]:
            parent[2] = value
            parent[3] = True
            continue
        if value is MERGE_KEY:
            raise _error("a merge key (<<) is only allowed as a mapping key", event.start_mark)
        if parent is None:
            root = value
            continue
        if parent[0] == SEQ:
            if parent[2]:
                yield Part.ITEM, value
            else:
                parent[1].append(value)
            continue
        key = parent[2]
        parent[3] = False
        if key is MERGE_KEY:
            sources = value if isinstance(value, list) else [value]
            if not all(isinstance(s, dict) for s in sources):
                raise _error("expected a mapping or list of mappings for merging", parent[5])
            parent[4] = (parent[4] or []) + sources
            continue
        try:
            parent[1][key] = value
        except TypeError:
            raise _error(f"found unhashable key ({type(key).__name__})", parent[5]) from None
