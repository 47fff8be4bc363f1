"""`metadata.managedFields` as the API server keeps it: who wrote which field, moved on each write.

Every write is stamped under a field manager: the request's `fieldManager`, else the User-Agent up
to its first `/` (the official Python client: `OpenAPI-Generator`; kubectl sends its own
`fieldManager` per command: `kubectl-create`, `kubectl-client-side-apply`, `kubectl-edit`,
`kubectl-patch`, `kubectl-label`, ...); an in-process controller writes under its own name
(`acting_as`). An Update gives the writer the fields it added or changed and takes them from every
other manager; fields it removed leave every manager; an entry left empty goes. An Apply
(server-side apply) makes the applied configuration's fields the manager's (`operation: Apply`),
409 Conflict when another manager owns a field whose value the apply changes (unless `force`,
which moves it), and removes what the manager applied last time and no longer applies when
nobody else owns it. A status subresource write is entered with `subresource: status`; status
writes and main-resource writes see only their own half of a kind with a status subresource.
The entry's time moves only when the manager's write changed the object.

Called by writes.py at the one place a create or an update is stored (`stamp`), by the HTTP layer
to name the request's manager (`acting_as`, `manager_from`) and by the controller scaffolding.
It does not merge patches (patch.py) or decide what a write may change.
"""

from __future__ import annotations

import contextvars
import unicodedata
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from agent.twin import crd_schema
from agent.twin import fieldset as fs
from agent.twin.apierror import ApiError
from agent.twin.fieldset import FieldSet, Path, Typing
from agent.twin.resources import ResourceType

Obj = dict[str, Any]
UPDATE = "Update"
APPLY = "Apply"
FIELDS_V1 = "FieldsV1"
DEFAULT_MANAGER = "zonemedic-twin"  # an in-process write outside any controller or request
MAX_MANAGER_LENGTH = 128
# Server-set metadata and identity: never owned (the server strips them before tracking).
_SERVER_META = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds",
                "generateName")  # fmt: skip
_STRIPPED: tuple[Path, ...] = (*(("f:metadata", f"f:{k}") for k in _SERVER_META),
                               ("f:apiVersion",), ("f:kind",))  # fmt: skip


@dataclass(frozen=True)
class Writer:
    """Who writes now: the manager, and for an apply whether conflicts are forced."""

    manager: str
    force: bool = False


_WRITER: contextvars.ContextVar[Writer | None] = contextvars.ContextVar("twin_writer", default=None)


@contextmanager
def acting_as(manager: str, *, force: bool = False) -> Iterator[None]:
    """Writes made inside this block are stamped under `manager`."""
    token = _WRITER.set(Writer(manager, force))
    try:
        yield
    finally:
        _WRITER.reset(token)


def current_writer() -> Writer:
    return _WRITER.get() or Writer(DEFAULT_MANAGER)


def manager_from(field_manager: str | None, user_agent: str) -> str:
    """The request's manager: `fieldManager`, else the printable User-Agent before its first `/`,
    at most 128 bytes (the API server's rule)."""
    if field_manager:
        if len(field_manager.encode()) > MAX_MANAGER_LENGTH:
            raise ApiError(422, "Invalid", f"fieldManager: Too long: may not be longer than "
                                           f"{MAX_MANAGER_LENGTH}")  # fmt: skip
        return field_manager
    out = ""
    for char in user_agent.split("/", maxsplit=1)[0]:
        if not char.isprintable() or unicodedata.category(char).startswith("C"):
            continue
        if len((out + char).encode()) > MAX_MANAGER_LENGTH:
            break
        out += char
    return out


# ---------------------------------------------------------------- entries


@dataclass(frozen=True)
class Entry:
    """One managedFields entry, its fields as a path set."""

    manager: str
    operation: str
    api_version: str
    time: str
    fields: FieldSet
    subresource: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.manager, self.operation, self.subresource)

    def to_json(self) -> Obj:
        out: Obj = {"manager": self.manager, "operation": self.operation,
                    "apiVersion": self.api_version, "time": self.time, "fieldsType": FIELDS_V1,
                    "fieldsV1": fs.to_fields_v1(self.fields)}  # fmt: skip
        if self.subresource:
            out["subresource"] = self.subresource
        return out


class Stored:
    """One stored managedFields entry: its raw JSON, its fields parsed only when needed (most
    writes leave most entries alone, and those are kept as they are)."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.key = (str(raw.get("manager") or ""), str(raw.get("operation") or UPDATE),
                    str(raw.get("subresource") or ""))  # fmt: skip
        self._fields: FieldSet | None = None

    @property
    def fields(self) -> FieldSet:
        if self._fields is None:
            self._fields = frozenset(fs.from_fields_v1(self.raw["fieldsV1"]))
        return self._fields

    def touches(self, paths: FieldSet) -> bool:
        tree = self.raw["fieldsV1"]
        return any(fs.holds(tree, p) for p in paths)

    def entry(self) -> Entry:
        manager, operation, subresource = self.key
        return Entry(manager=manager, operation=operation,
                     api_version=str(self.raw.get("apiVersion") or ""),
                     time=str(self.raw.get("time") or ""), fields=self.fields,
                     subresource=subresource)  # fmt: skip


def stored_of(obj: Mapping[str, Any]) -> list[Stored]:
    """The object's managedFields entries (malformed ones skipped)."""
    return [Stored(raw) for raw in (obj.get("metadata") or {}).get("managedFields") or []
            if isinstance(raw, Mapping) and isinstance(raw.get("fieldsV1"), Mapping)]


def entries_of(obj: Mapping[str, Any]) -> list[Entry]:
    """The object's managedFields entries, parsed."""
    return [s.entry() for s in stored_of(obj)]


def _ordered(entries: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Apply entries first, then by time, then by manager (the server's order)."""
    return sorted(entries, key=lambda e: (e.get("operation") != APPLY, str(e.get("time") or ""),
                                          str(e.get("manager") or "")))  # fmt: skip


# ---------------------------------------------------------------- stamping


def _typing(rt: ResourceType, schema: crd_schema.Schema | None) -> Typing:
    return Typing(builtin=rt.builtin, schema=schema)


def _tracked(obj: Obj | None, *, rt: ResourceType, subresource: str | None) -> Obj | None:
    """The part of an object this write's manager can own."""
    if obj is None:
        return None
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    if "status" in rt.subresources:
        if subresource == "status":
            out = {"status": obj["status"]} if "status" in obj else {}
        else:
            out.pop("status", None)
    return out


def _clean(paths: FieldSet) -> FieldSet:
    """Without the server-set fields (and the metadata node itself)."""
    return frozenset(p for p in fs.without(paths, _STRIPPED) if p != ("f:metadata",))


def stamp(
    rt: ResourceType,
    old: Obj | None,
    new: Obj,
    *,
    now: str,
    schema: crd_schema.Schema | None,
    subresource: str | None = None,
    applied: Obj | None = None,
) -> Obj:
    """Set `new`'s managedFields from `old`'s after this write; returns `new` (an apply may have
    pruned fields from it). `applied` is the configuration of a server-side apply."""
    writer = current_writer()
    typing = _typing(rt, schema)
    stored = stored_of(old) if old is not None else []
    sub = subresource or ""
    before = _tracked(old, rt=rt, subresource=subresource) or {}
    if applied is not None:
        new = _apply(rt, [s.entry() for s in stored], before, new, applied, writer=writer,
                     typing=typing, subresource=subresource)  # fmt: skip
    after = _tracked(new, rt=rt, subresource=subresource) or {}
    diff = fs.compare(before, after, typing)
    meta = new.setdefault("metadata", {})
    if diff.same and applied is None:  # nothing the write's manager could own changed
        if stored:
            meta["managedFields"] = [s.raw for s in stored]
        else:
            meta.pop("managedFields", None)
        return new
    changed, removed = _clean(diff.changed), _clean(diff.removed)
    operation = APPLY if applied is not None else UPDATE
    key = (writer.manager, operation, sub)
    previous = next((s for s in stored if s.key == key), None)
    kept: list[Mapping[str, Any]] = []
    lost = changed | removed
    for entry in stored:
        if entry.key == key:
            continue
        if not entry.touches(removed if entry.key[2] != sub else lost):
            kept.append(entry.raw)  # untouched: kept as stored
            continue
        tree = fs.edited(entry.raw["fieldsV1"], remove=lost if entry.key[2] == sub else removed)
        if tree:
            kept.append({**entry.raw, "fieldsV1": tree})
    if applied is not None:
        mine = _config(rt, applied, typing, subresource=subresource)
        unmoved = previous is not None and diff.same and previous.fields == mine
        time = str(previous.raw.get("time") or now) if unmoved and previous is not None else now
        if mine:
            kept.append(Entry(manager=writer.manager, operation=operation,
                              api_version=rt.api_version, time=time, fields=mine,
                              subresource=sub).to_json())  # fmt: skip
    else:
        # the writer's entry: what it owned, less what it removed, plus what it set
        base = previous.raw["fieldsV1"] if previous is not None else {}
        tree = fs.edited(base, remove=removed, add=changed)
        if tree:
            kept.append({**(previous.raw if previous is not None else {}),
                         **Entry(manager=writer.manager, operation=operation,
                                 api_version=rt.api_version, time=now, fields=fs.EMPTY,
                                 subresource=sub).to_json(), "fieldsV1": tree})  # fmt: skip
    if kept:
        meta["managedFields"] = _ordered(kept)
    else:
        meta.pop("managedFields", None)
    return new


def _config(rt: ResourceType, applied: Obj, typing: Typing, *, subresource: str | None) -> FieldSet:
    """The fields an apply configuration sets."""
    tracked = _tracked(applied, rt=rt, subresource=subresource)
    return _clean(frozenset(fs.paths_of(tracked, typing, whole=False)))


def _apply(
    rt: ResourceType,
    entries: list[Entry],
    before: Obj,
    merged: Obj,
    applied: Obj,
    *,
    writer: Writer,
    typing: Typing,
    subresource: str | None,
) -> Obj:
    """Check an apply for conflicts, then drop what the manager no longer applies."""
    sub = subresource or ""
    config = _config(rt, applied, typing, subresource=subresource)
    after = _tracked(merged, rt=rt, subresource=subresource) or {}
    changed = _clean(fs.compare(before, after, typing).changed)
    conflicts: list[tuple[Entry, Path]] = []
    for entry in entries:
        if entry.manager == writer.manager or entry.subresource != sub:
            continue
        conflicts.extend((entry, p) for p in sorted(entry.fields & changed & config))
    if conflicts and not writer.force:
        raise _conflict_error(conflicts)
    last = next((e for e in entries if e.key == (writer.manager, APPLY, sub)), None)
    if last is None:
        return merged
    others = frozenset().union(*(e.fields for e in entries if e.manager != writer.manager
                                 and e.subresource == sub))  # fmt: skip
    dropped = last.fields - config - others
    for path in sorted(dropped, key=len, reverse=True):
        merged = fs.remove(merged, path)
    return merged


def _conflict_error(conflicts: list[tuple[Entry, Path]]) -> ApiError:
    """409 worded as the server words an apply conflict, one cause per field."""

    def who(entry: Entry) -> str:
        named = f'"{entry.manager}"'
        if entry.subresource:
            named += f' with subresource "{entry.subresource}"'
        return f"{named} using {entry.api_version}" if entry.operation == UPDATE else named

    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {who(e)}",
               "field": fs.dotted(p)} for e, p in conflicts]  # fmt: skip
    if len(conflicts) == 1:
        entry, path = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {who(entry)}: {fs.dotted(path)}"
    else:
        lines = []
        for manager in sorted({who(e) for e, _ in conflicts}):
            lines.append(f"conflicts with {manager}:")
            lines.extend(f"- {fs.dotted(p)}" for e, p in conflicts if who(e) == manager)
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, details={"causes": causes})
