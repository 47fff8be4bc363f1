"""Bounded YAML: every YAML document zonemedic reads from a user passes these limits first.

Who calls it: the settings loader (`agent.settings`), the playbook schema (`agent.playbook.schema`)
and snapshot decoding (`agent.snapshot.documents`). Before a document is composed or constructed,
`check_yaml` walks the parser's event stream once (iteratively, with libyaml's C parser where it is
installed) and refuses, with `YamlLimitError` naming the line:

- nesting deeper than `YamlLimits.max_depth` levels (counting what an alias expands to), which
  would otherwise raise RecursionError in the composer or in any recursive walk of the result;
- an alias to a node that is still open (`&a [*a]`): a recursive structure, never valid input;
- aliases that together expand to more than `YamlLimits.max_alias_nodes` nodes (the "billion
  laughs" bomb: a few lines that a walk of the result would expand to billions of nodes).

Only safe (standard tag) loading is offered. The check works on events, so it holds whatever loader
then builds the objects (the pure-Python or the C loader, all at once or item by item). What it does
not do: bound the size of the text (the caller reads at most its own size limit), or interpret the
documents. `syntax_error` gives the line and problem of PyYAML's own syntax errors, for the
callers' messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from agent.errors import InputError

try:  # libyaml's C parser is ~10x faster; fall back to the pure-Python one where it is absent
    from yaml import CSafeLoader as FastSafeLoader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as FastSafeLoader  # type: ignore[assignment]


@dataclass(frozen=True)
class YamlLimits:
    """How deep a document may nest and how many nodes its aliases may add, in total."""

    max_depth: int = 100
    max_alias_nodes: int = 100_000


DEFAULT_LIMITS = YamlLimits()


class YamlLimitError(InputError):
    """A YAML document exceeds a limit or is recursive; `line` is 1-based (0: unknown)."""

    def __init__(self, problem: str, *, line: int) -> None:
        super().__init__(f"line {line}: {problem}" if line else problem)
        self.problem = problem
        self.line = line


_OPEN = (-1, -1)  # an anchor whose node is still being parsed: an alias to it is recursive


def syntax_error(exc: yaml.YAMLError, *, text: str | None = None) -> tuple[int | None, str]:
    """Where and what a YAML syntax error is, for a caller's one-line message: the line
    (1-based; None when PyYAML does not say) and the problem (one line). A character YAML does
    not allow (NUL, ESC, DEL, ...) is a reader error that knows only its position: with the
    `text` it came from, its line is counted from that."""
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, exc.position) + 1 if text is not None else None
        return line, " ".join(str(exc.reason).split()) + f" (character #x{exc.character:04x})" \
            if isinstance(exc.character, int) else " ".join(str(exc.reason).split())
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return (mark.line + 1 if mark is not None else None), " ".join(str(problem).split())


def _line(event: yaml.Event) -> int:
    mark = getattr(event, "start_mark", None)
    return mark.line + 1 if mark is not None else 0


class EventChecker:
    """Follows one YAML event stream (`feed` each event in order) and raises `YamlLimitError` at
    the first event that crosses a limit. Holds one entry per open collection and per anchor."""

    def __init__(self, limits: YamlLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        # anchor name -> (nodes in the anchored subtree, its height); _OPEN while being parsed
        self._anchors: dict[str, tuple[int, int]] = {}
        # per open collection: (anchor, node count before it, [tallest child height])
        self._stack: list[tuple[str | None, int, list[int]]] = []
        self._nodes = 0
        self._expanded = 0

    def feed(self, event: yaml.Event) -> None:
        kind = type(event)
        stack = self._stack
        if kind is yaml.ScalarEvent:
            self._nodes += 1
            if event.anchor is not None:  # type: ignore[attr-defined]
                self._anchors[event.anchor] = (1, 1)  # type: ignore[attr-defined]
            if stack and stack[-1][2][0] < 1:
                stack[-1][2][0] = 1
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            if len(stack) >= self.limits.max_depth:
                raise YamlLimitError(
                    f"nested deeper than {self.limits.max_depth} levels", line=_line(event)
                )
            self._nodes += 1
            anchor: str | None = event.anchor  # type: ignore[attr-defined]
            if anchor is not None:
                self._anchors[anchor] = _OPEN
            stack.append((anchor, self._nodes, [0]))
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            anchor, first, tallest = stack.pop()
            height = tallest[0] + 1
            if anchor is not None:
                self._anchors[anchor] = (self._nodes - first + 1, height)
            if stack and stack[-1][2][0] < height:
                stack[-1][2][0] = height
        elif kind is yaml.AliasEvent:
            self._alias(event)
        elif kind is yaml.DocumentStartEvent:
            self._anchors.clear()  # anchors do not cross documents

    def _alias(self, event: yaml.Event) -> None:
        name: str = event.anchor or ""  # type: ignore[attr-defined]
        found = self._anchors.get(name)
        if found is None:
            return  # an undefined alias: the composer reports it as invalid YAML
        if found == _OPEN:
            raise YamlLimitError(
                f"alias *{name} refers to a node that contains it (a recursive structure)",
                line=_line(event),
            )
        size, height = found
        stack = self._stack
        if len(stack) + height > self.limits.max_depth:
            raise YamlLimitError(
                f"alias *{name} nests deeper than {self.limits.max_depth} levels",
                line=_line(event),
            )
        self._expanded += size
        self._nodes += size
        if self._expanded > self.limits.max_alias_nodes:
            raise YamlLimitError(
                f"aliases expand to more than {self.limits.max_alias_nodes} nodes",
                line=_line(event),
            )
        if stack and stack[-1][2][0] < height:
            stack[-1][2][0] = height


def check_events(events: Iterable[yaml.Event], limits: YamlLimits = DEFAULT_LIMITS) -> None:
    """Walk one YAML event stream and raise `YamlLimitError` on the first limit crossed."""
    feed = EventChecker(limits).feed
    for event in events:
        feed(event)


def bounded_events(
    events: Iterable[yaml.Event], limits: YamlLimits = DEFAULT_LIMITS
) -> Iterator[yaml.Event]:
    """The same events, checked on the way (for a caller that composes from events itself)."""
    feed = EventChecker(limits).feed
    for event in events:
        feed(event)
        yield event


def check_yaml(text: str | bytes, limits: YamlLimits = DEFAULT_LIMITS) -> None:
    """Refuse a YAML stream (all its documents) that is too deep, recursive or an alias bomb.

    Raises `YamlLimitError`, or `yaml.YAMLError` for text that is not YAML at all."""
    check_events(yaml.parse(text, Loader=FastSafeLoader), limits)


def safe_load(text: str | bytes, limits: YamlLimits = DEFAULT_LIMITS) -> Any:
    """The single document of `text` as plain data (checked first), None when empty."""
    check_yaml(text, limits)
    return yaml.load(text, Loader=FastSafeLoader)


def safe_load_all(text: str | bytes, limits: YamlLimits = DEFAULT_LIMITS) -> Iterator[Any]:
    """Every document of `text` as plain data (the whole stream is checked first)."""
    check_yaml(text, limits)
    return iter(yaml.load_all(text, Loader=FastSafeLoader))
