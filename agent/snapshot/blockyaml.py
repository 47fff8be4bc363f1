"""Read the block-style YAML that `kubectl get -o yaml` prints, line by line; defer the rest.

Called by `agent.snapshot.documents` for YAML snapshots: `iter_values` hands out the same stream
of `(Part, value)` as `agent.snapshot.yamlstream.iter_values`. A 45 MB dump of 78,000 compact pods
is 5.6 million libyaml events, and building the Python event objects alone costs more than the
whole diagnosis. kubectl prints a narrow subset of YAML: block mappings and sequences (a
sequence at its key's column or deeper), plain and single-quoted scalars (folded over lines when
long), `{}` and `[]`, literal block scalars (`|`, `|-`, `|+`), full-line comments and `---`
between documents. This module reads that subset straight from the lines of the text, about one
dictionary operation per line.

It is an optimisation, never a second dialect: every plain scalar (key or value) is resolved and
built by the loader's own resolver and SafeConstructor constructors, with yamlstream's caches, and
a text that leaves the subset anywhere (flow collections other than `{}`/`[]`, anchors, aliases,
tags, merge keys, double-quoted escapes, folded block scalars, directives, tabs, carriage
returns, a comment after content, odd indentation, a scalar item of a streamed List, invalid
YAML...) is read by yamlstream instead: from the start, skipping the parts already handed out,
so the caller sees exactly the stream (values, errors and their lines) that yamlstream alone
gives, at the cost of reading the text twice. Within the subset the values equal yamlstream's
(the tests hold them equal on generated and hand-written documents). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml
from yaml.nodes import ScalarNode

from agent.parsing.bounded_yaml import DEFAULT_LIMITS
from agent.snapshot import yamlstream
from agent.snapshot.blockscan import (
    OUTSIDE,
    extent,
    goes_on,
    non_printable,
    plain_start,
    quoted_key,
    single_quoted,
)
from agent.snapshot.yamlstream import CACHE_LIMIT, MERGE, STR, Part

try:  # the loader yamlstream defaults to: its resolver and constructors build the scalars
    from yaml import CSafeLoader as Loader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as Loader  # type: ignore[assignment]

_MAX_KEY = 1000  # characters: libyaml refuses implicit keys past 1024
_MAX_DEPTH = DEFAULT_LIMITS.max_depth - 1  # open collections: deeper is yamlstream's to refuse
_ITEMS = "items"

# frame layout (a list, for speed): [indent, container, is_mapping, key, pending, streamed, memo]
# `pending`: a mapping's `key` (or a sequence's last `-`) still waits for its value; `memo`: the
# subtree cache's key for that value, stored once it is built
_INDENT, _BOX, _IS_MAP, _KEY, _PENDING, _STREAMED, _MEMO = range(7)


class UnsupportedError(Exception):
    """The text leaves the subset this module reads: yamlstream reads it instead."""


def iter_values(text: str | bytes, *, loader: type[Any] = Loader) -> Iterator[tuple[Part, Any]]:
    """`yamlstream.iter_values(text)`, read line by line while the text stays in the subset."""
    done = 0
    if isinstance(text, str):
        try:
            for part in block_values(text, loader=loader):
                yield part
                done += 1
            return
        except UnsupportedError:
            pass
    values = yamlstream.iter_values(text, loader=loader)
    for _ in range(done):  # handed out already, equal
        next(values)
    yield from values


def block_values(text: str, *, loader: type[Any] = Loader) -> Iterator[tuple[Part, Any]]:
    """The parts of a text in the subset, as yamlstream hands them out; raises `UnsupportedError`
    (possibly after some parts) where the text leaves it."""
    if not text.endswith("\n") or any(c in text for c in OUTSIDE) or non_printable(text):
        raise UnsupportedError
    instance = loader("")
    try:
        yield from _lines(text.split("\n")[:-1], instance)  # the list is consumed
    finally:
        instance.dispose()


# what a line says (the classification of a line, cached by its text; values are immutable)
_KEY_SCALAR, _KEY_PENDING, _KEY_EMPTY = 0, 1, 2  # (kind, col, key, value, plain text | None)
_ENTRY_SCALAR, _ENTRY_PENDING = 3, 4  # (kind, col, value, plain text | None)
_ENTRY_KEY_SCALAR, _ENTRY_KEY_PENDING, _ENTRY_KEY_EMPTY = 5, 6, 7  # + (kcol, key, value, text)
_ENTRY_NESTED = 8  # `- - ...`: (kind, col, the line after the first `- `, at its own column)
_BLANK, _COMMENT, _DOCUMENT, _TEXT = 9, 10, 11, 12  # (kind, col)
_LINE_CACHE = 100_000
_RELEASE = 200_000  # lines read before they are dropped from the list
_EMPTY_MAP, _EMPTY_SEQ = object(), object()  # `{}` and `[]`: a fresh container each time
_SUBTREE_LINES = 2  # a `key:` whose value spans at least this many lines is looked up
_SUBTREE_CACHE = 20_000  # values of `key:` subtrees remembered by their lines
_SUBTREE_TRIAL, _SUBTREE_RATIO = 32, 5  # a `key:` line is looked up while 1 in 5 is found


def _lines(lines: list[str], loader: Any) -> Iterator[tuple[Part, Any]]:
    resolve = loader.resolve
    constructors = loader.yaml_constructors
    plain_cache: dict[str, Any] = {}
    quoted_cache: dict[str, str] = {}
    line_cache: dict[str, tuple[Any, ...]] = {}
    subtrees: dict[tuple[int, int, tuple[str, ...]], Any] = {}  # see `extent`
    tries: dict[str, list[int]] = {}  # a `key:` line -> [its values found, not found]
    n = len(lines)
    j = 0
    frames: list[list[Any]] = []
    out: list[tuple[Part, Any]] = []
    root: Any = None
    has_root = False
    streamed_doc = False
    # the plain scalar later lines may continue: where it is, its text, its collection's column
    last_box: Any = None
    last_key: Any = None
    last_text = ""
    last_indent = 0
    blanks = 0

    def plain(value: str) -> Any:
        found = plain_cache.get(value, plain_cache)
        if found is not plain_cache:
            return found
        tag = resolve(ScalarNode, value, (True, False))
        if tag == STR:
            built: Any = value
        else:
            construct = constructors.get(tag) if tag != MERGE else None
            if construct is None:
                raise UnsupportedError
            try:
                built = construct(loader, ScalarNode(tag, value))
            except (ValueError, OverflowError, yaml.YAMLError):
                raise UnsupportedError from None
        if len(plain_cache) >= CACHE_LIMIT:
            plain_cache.clear()
        plain_cache[value] = built
        return built

    def quoted(value: str) -> str:
        shared = quoted_cache.get(value)
        if shared is None:
            if len(quoted_cache) >= CACHE_LIMIT:
                quoted_cache.clear()
            quoted_cache[value] = shared = value
        return shared

    def attach(value: Any) -> None:
        nonlocal root, has_root
        if not frames:
            if has_root:
                raise UnsupportedError
            root, has_root = value, True
            return
        top = frames[-1]
        if top[_IS_MAP]:
            top[_BOX][top[_KEY]] = value
            if top[_MEMO] is not None:
                remember(top, value)
        elif top[_STREAMED]:
            out.append((Part.ITEM, value))
        else:
            top[_BOX].append(value)
        top[_PENDING] = False

    def remember(frame: list[Any], value: Any) -> None:
        """The value of the frame's pending key is built: cache it under the key's lines."""
        if len(subtrees) >= _SUBTREE_CACHE:
            subtrees.clear()
        subtrees[frame[_MEMO]] = value
        frame[_MEMO] = None

    def close() -> None:
        frame = frames.pop()
        if frame[_PENDING]:  # `key:` or `-` with nothing after it: null
            if frame[_IS_MAP]:
                frame[_BOX][frame[_KEY]] = None
            elif frame[_STREAMED]:
                out.append((Part.ITEM, None))
            else:
                frame[_BOX].append(None)
        attach(frame[_BOX])

    def open_frame(indent: int, *, mapping: bool) -> list[Any]:
        nonlocal streamed_doc
        if len(frames) >= _MAX_DEPTH:
            raise UnsupportedError
        streamed = False
        if not mapping:
            if not frames:
                streamed = True  # a document that is a sequence of objects
            elif len(frames) == 1 and frames[0][_IS_MAP] and frames[0][_KEY] == _ITEMS:
                streamed = _list_kind_or_unknown(frames[0][_BOX])
            streamed_doc = streamed_doc or streamed
        frame = [indent, {} if mapping else [], mapping, None, False, streamed, None]
        frames.append(frame)
        return frame

    def finish_document() -> None:
        nonlocal root, has_root, streamed_doc
        while frames:
            close()
        if isinstance(root, dict) and streamed_doc:
            out.append((Part.LIST_END, root))
        elif root is not None and not (isinstance(root, list) and streamed_doc):
            out.append((Part.DOCUMENT, root))
        root, has_root, streamed_doc = None, False, False

    def split_key(content: str) -> tuple[Any, str]:
        """(key, the rest after `: `, stripped) of a `key: value` or `key:` line."""
        c0 = content[0]
        if c0 == "'":
            found = single_quoted(content, 1)
            if found is None:
                raise UnsupportedError
            key_text, end = found
            after = content[end:]
            if after[:1] != ":" or after[1:2] not in ("", " "):
                raise UnsupportedError
            return quoted(key_text), after[1:].strip(" ")
        if not plain_start(content):
            raise UnsupportedError
        p = content.find(": ")
        if p < 0:
            if not content.endswith(":"):
                raise UnsupportedError
            key_text, rest = content[:-1], ""
        else:
            key_text, rest = content[:p], content[p + 2 :].strip(" ")
        key_text = key_text.rstrip(" ")
        if not key_text or len(key_text) > _MAX_KEY:
            raise UnsupportedError
        return plain(key_text), rest

    def block_literal(rest: str, indent: int) -> str:
        """A literal block scalar (`|`, `|-`, `|+`) whose lines follow (libyaml's rules for its
        indentation, breaks and chomping)."""
        nonlocal j
        if rest == "|":
            chomping: bool | None = None
        elif rest == "|-":
            chomping = False
        elif rest == "|+":
            chomping = True
        else:
            raise UnsupportedError  # an indentation indicator, a comment, a folded scalar
        k = j
        widest = 0
        lead = 0
        while k < n and not lines[k].strip(" "):
            widest = max(widest, len(lines[k]))
            lead += 1
            k += 1
        first = len(lines[k]) - len(lines[k].lstrip(" ")) if k < n else 0
        width = max(indent + 1, 1, widest, first)
        if k >= n or first != width:  # no content: the next line is not the scalar's
            j = k
            return "\n" * lead if chomping is True else ""
        chunks = ["\n"] * lead
        while True:
            chunks.append(lines[k][width:])
            k += 1
            breaks = 0
            while k < n and len(lines[k]) <= width and not lines[k].strip(" "):
                breaks += 1
                k += 1
            # a line indented as far (or spaces past the indentation) goes on
            if k < n and len(lines[k]) - len(lines[k].lstrip(" ")) >= width:
                chunks.append("\n" * (breaks + 1))
                continue
            break
        j = k
        if chomping is not False:
            chunks.append("\n")
        if chomping is True:
            chunks.append("\n" * breaks)
        return "".join(chunks)

    def quoted_lines(first: str) -> str:
        """A single-quoted scalar that does not close on its first line (`first`: the text after
        the opening quote): folded over the following lines as libyaml folds it."""
        nonlocal j
        value = first.replace("''", "'").rstrip(" ")
        breaks = 0
        while True:
            if j >= n:
                raise UnsupportedError  # unterminated: yamlstream's error
            line = lines[j]
            j += 1
            content = line.lstrip(" ")
            if not content:
                breaks += 1
                continue
            if line.startswith(("---", "...")) and line[3:4] in ("", " "):
                raise UnsupportedError
            value += " " if breaks == 0 else "\n" * breaks
            breaks = 0
            found = single_quoted(content, 0)
            if found is None:
                value += content.replace("''", "'").rstrip(" ")
                continue
            chunk, end = found
            if content[end:].strip(" "):
                raise UnsupportedError
            return value + chunk

    def value_of(rest: str, indent: int) -> tuple[Any, str | None, bool]:
        """The value written after a key or a `-` (`rest`, stripped, not empty); its text when
        it is a plain scalar (later lines may continue it); whether the line alone says it (so
        the line's reading can be cached)."""
        if plain_start(rest):
            if ": " in rest or rest.endswith(":"):
                raise UnsupportedError
            return plain(rest), rest, True
        c0 = rest[0]
        if c0 == "'":
            found = single_quoted(rest, 1)
            if found is None:
                return quoted(quoted_lines(rest[1:])), None, False
            value, end = found
            if rest[end:].strip(" "):
                raise UnsupportedError
            return quoted(value), None, True
        if c0 == '"':
            end = rest.find('"', 1)
            if end < 0 or "\\" in rest[:end] or rest[end + 1 :].strip(" "):
                raise UnsupportedError
            return quoted(rest[1:end]), None, True
        if rest == "{}":
            return _EMPTY_MAP, None, True
        if rest == "[]":
            return _EMPTY_SEQ, None, True
        if c0 == "|":
            return quoted(block_literal(rest, indent)), None, False
        raise UnsupportedError

    def fold(content: str) -> None:
        """The plain scalar at `last_box[last_key]` goes on with this line (`content`: its text
        after the indentation): libyaml folds the line break into a space (blank lines between
        into line breaks)."""
        nonlocal last_text, blanks
        if ": " in content or content.endswith(":") or " #" in content:
            raise UnsupportedError  # invalid, or a comment: yamlstream's to say
        last_text = last_text + (" " if blanks == 0 else "\n" * blanks) + content.rstrip(" ")
        last_box[last_key] = plain(last_text)
        blanks = 0

    def classify(line: str) -> tuple[tuple[Any, ...], bool]:
        """What a line says (see the `_KEY_...` kinds), and whether its text alone says it (a
        block scalar or a quoted scalar over several lines reads the lines after it)."""
        content = line.lstrip(" ")
        if not content:
            return (_BLANK, 0), True
        col = len(line) - len(content)
        c0 = content[0]
        if c0 == "#":
            return (_COMMENT, col), True
        if col == 0 and c0 in "-." and content[:3] in ("---", "...") and content[3:4] in ("", " "):
            if content.rstrip(" ") != "---":
                raise UnsupportedError  # `...`, or content after `---`
            return (_DOCUMENT, 0), True
        if c0 == "%" or " #" in content:
            raise UnsupportedError  # a directive; a comment after content
        cacheable = True
        if c0 == "-" and (len(content) == 1 or content[1] == " "):  # `- ...`: an entry
            rest = content[1:].lstrip(" ")
            if not rest:
                return (_ENTRY_PENDING, col), True
            r0 = rest[0]
            kcol = col + len(content) - len(rest)
            if r0 == "-" and (len(rest) == 1 or rest[1] == " "):  # `- - x`: a sequence in one
                return (_ENTRY_NESTED, col, " " * kcol + rest), True
            is_key = (": " in rest or rest.endswith(":")) if r0 != "'" else quoted_key(rest)
            if not is_key:
                value, text, cacheable = value_of(rest, col)
                return (_ENTRY_SCALAR, col, value, text), cacheable
            key, after = split_key(rest)
            if not after:
                return (_ENTRY_KEY_PENDING, col, kcol, key), True
            value, text, cacheable = value_of(after, kcol)
            kind = _ENTRY_KEY_EMPTY if value is _EMPTY_MAP or value is _EMPTY_SEQ else _ENTRY_KEY_SCALAR
            return (kind, col, kcol, key, value, text), cacheable
        if ": " not in content and not content.endswith(":"):
            return (_TEXT, col), True  # the continuation of a plain scalar, or not in the subset
        key, after = split_key(content)
        if not after:
            return (_KEY_PENDING, col, key), True
        value, text, cacheable = value_of(after, col)
        kind = _KEY_EMPTY if value is _EMPTY_MAP or value is _EMPTY_SEQ else _KEY_SCALAR
        return (kind, col, key, value, text), cacheable

    inner: str | None = None  # what follows the first `- ` of a `- - ...` line, read next
    while j < n or inner is not None:
        if inner is not None:
            line, inner = inner, None
        else:
            if j >= _RELEASE:  # the lines read are dropped now and then: memory holds the rest
                del lines[:j]
                n -= j
                j = 0
            line = lines[j]
            j += 1
        spec = line_cache.get(line)
        if spec is None:
            if last_box is not None:  # a line the plain scalar goes on to is content, whatever it says
                content = line.lstrip(" ")
                if content and content[0] != "#" and len(line) - len(content) > last_indent:
                    fold(content)
                    continue
            spec, cacheable = classify(line)
            if cacheable:
                if len(line_cache) >= _LINE_CACHE:
                    line_cache.clear()
                line_cache[line] = spec
        kind = spec[0]
        if kind >= _BLANK:
            if kind == _BLANK:
                blanks += 1
                continue
            if kind == _COMMENT:
                last_box = None
                blanks = 0
                continue
            if kind == _DOCUMENT:
                finish_document()
                last_box = None
                blanks = 0
                if out:
                    yield from out
                    out.clear()
                continue
        col = spec[1]
        if last_box is not None:
            if col > last_indent:  # the plain scalar goes on: fold this line into it
                fold(line.lstrip(" "))
                continue
            last_box = None
        blanks = 0
        if kind == _TEXT:
            raise UnsupportedError
        while frames and frames[-1][_INDENT] > col:  # close deeper collections (`close()`, inline)
            frame = frames.pop()
            if frame[_PENDING]:
                frames.append(frame)
                close()
                continue
            if not frames:
                attach(frame[_BOX])
                continue
            parent = frames[-1]
            if parent[_IS_MAP]:
                parent[_BOX][parent[_KEY]] = frame[_BOX]
                if parent[_MEMO] is not None:
                    remember(parent, frame[_BOX])
            elif parent[_STREAMED]:
                out.append((Part.ITEM, frame[_BOX]))
            else:
                parent[_BOX].append(frame[_BOX])
            parent[_PENDING] = False
        top = frames[-1] if frames else None
        if kind >= _ENTRY_SCALAR:  # `- ...`: an entry
            if top is not None and top[_INDENT] == col and not top[_IS_MAP]:
                if top[_PENDING]:
                    attach(None)
            elif (top is None and not has_root) or (top is not None and top[_PENDING] and (
                top[_INDENT] < col or (top[_IS_MAP] and top[_INDENT] == col)
            )):  # a document's sequence; the value of a pending key (at its column) or entry
                top = open_frame(col, mapping=False)
            else:
                raise UnsupportedError
            if kind in (_ENTRY_PENDING, _ENTRY_NESTED):
                top[_PENDING] = True
                if kind == _ENTRY_NESTED:
                    inner = spec[2]
                continue
            if kind == _ENTRY_SCALAR:
                if top[_STREAMED]:
                    raise UnsupportedError  # a scalar item of a List: yamlstream's to judge
                box = top[_BOX]
                value = spec[2]
                if value is _EMPTY_MAP or value is _EMPTY_SEQ:
                    value = {} if value is _EMPTY_MAP else []
                box.append(value)
                if spec[3] is not None:
                    last_box, last_key, last_text, last_indent = box, len(box) - 1, spec[3], col
                continue
            top[_PENDING] = True
            if len(frames) >= _MAX_DEPTH:
                raise UnsupportedError
            top = [spec[2], {}, True, None, False, False, None]  # `open_frame(mapping=True)`
            frames.append(top)
            col, key = spec[2], spec[3]
            if kind == _ENTRY_KEY_PENDING:
                top[_KEY] = key
                top[_PENDING] = True
                continue
            value, text = spec[4], spec[5]
            kind = _KEY_SCALAR if kind == _ENTRY_KEY_SCALAR else _KEY_EMPTY
        else:  # `key: ...`
            if top is not None and top[_INDENT] == col and top[_IS_MAP]:
                if top[_PENDING]:
                    attach(None)
            elif top is not None and top[_INDENT] == col:  # a sequence at its key's column ends
                close()
                top = frames[-1] if frames else None
                if top is None or not top[_IS_MAP] or top[_INDENT] != col:
                    raise UnsupportedError
            elif top is not None and top[_PENDING] and top[_INDENT] < col:
                if len(frames) >= _MAX_DEPTH:
                    raise UnsupportedError
                top = [col, {}, True, None, False, False, None]  # `open_frame(mapping=True)`
                frames.append(top)
            elif top is None and not has_root:
                top = open_frame(col, mapping=True)
            else:
                raise UnsupportedError
            key = spec[2]
            if kind == _KEY_PENDING:
                top[_KEY] = key
                top[_PENDING] = True
                top[_MEMO] = None
                tried = tries.get(line)
                if tried is None:
                    tries[line] = tried = [0, 0, 0]
                if inner is None and (key != _ITEMS or len(frames) > 1) and (
                    tried[1] < _SUBTREE_TRIAL or tried[0] * _SUBTREE_RATIO >= tried[1]
                ):  # its values were seen again often enough to look them up
                    depth = len(frames)
                    end = j + tried[2]  # as long as the last one: no scan when it is the same
                    found = subtrees
                    if tried[2] and end <= n and not goes_on(lines, end, n, col):
                        memo = (col, depth, tuple(lines[j:end]))
                        found = subtrees.get(memo, subtrees)
                    if found is subtrees:
                        end = extent(lines, j, n, col)
                        memo = (col, depth, tuple(lines[j:end]))
                        if end - j >= _SUBTREE_LINES:
                            found = subtrees.get(memo, subtrees)
                    if found is not subtrees:
                        top[_BOX][key] = found
                        top[_PENDING] = False
                        j = end
                        tried[0] += 1
                    else:  # not found (or too short to look up): counted against the line
                        tried[1] += 1
                        if end - j >= _SUBTREE_LINES:
                            top[_MEMO] = memo  # stored by `remember` once built
                            tried[2] = end - j
                continue
            value, text = spec[3], spec[4]
        top[_KEY] = key
        box = top[_BOX]
        if kind == _KEY_EMPTY:
            if value is _EMPTY_MAP:
                box[key] = {}
            else:
                box[key] = []
                if len(frames) == 1 and key == _ITEMS:
                    # a flow `[]` is a sequence too: yamlstream streams it (nothing), ends the List
                    streamed_doc = streamed_doc or _list_kind_or_unknown(box)
        else:
            box[key] = value
            if text is not None:
                last_box, last_key, last_text, last_indent = box, key, text, col
        if out:
            yield from out
            out.clear()
    finish_document()
    yield from out


def _list_kind_or_unknown(mapping: dict[Any, Any]) -> bool:
    """yamlstream streams an `items` sequence when the mapping's kind is not read yet or is a
    List's."""
    return "kind" not in mapping or yamlstream._is_list_kind(mapping["kind"])
