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


def entries_of(obj: Mapping[str, Any]) -> list[Entry]:
    """The object's managedFields entries (malformed ones skipped)."""
    out = []
    for raw in (obj.get("metadata") or {}).get("managedFields") or []:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("fieldsV1"), Mapping):
            continue
        out.append(Entry(manager=str(raw.get("manager") or ""),
                         operation=str(raw.get("operation") or UPDATE),
                         api_version=str(raw.get("apiVersion") or ""),
                         time=str(raw.get("time") or ""),
                         fields=frozenset(fs.from_fields_v1(raw["fieldsV1"])),
                         subresource=str(raw.get("subresource") or "")))  # fmt: skip
    return out


def _ordered(entries: list[Entry]) -> list[Obj]:
    """Apply entries first, then by time, then by manager (the server's order)."""
    ordered = sorted(entries, key=lambda e: (e.operation != APPLY, e.time, e.manager))
    return [e.to_json() for e in ordered]


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
    entries = entries_of(old) if old is not None else []
    sub = subresource or ""
    before = _tracked(old, rt=rt, subresource=subresource) or {}
    if applied is not None:
        new = _apply(rt, entries, before, new, applied, writer=writer, typing=typing,
                     subresource=subresource)  # fmt: skip
    after = _tracked(new, rt=rt, subresource=subresource) or {}
    diff = fs.compare(before, after, typing)
    changed, removed = _clean(diff.changed), _clean(diff.removed)
    operation = APPLY if applied is not None else UPDATE
    key = (writer.manager, operation, sub)
    previous = next((e for e in entries if e.key == key), None)
    kept: list[Entry] = []
    for entry in entries:
        if entry.key == key:
            continue
        taken = entry.fields - removed
        if entry.subresource == sub:
            taken = taken - changed
        if taken:
            kept.append(entry if taken == entry.fields else _with(entry, taken))
    if applied is not None:
        mine = _config(rt, applied, typing, subresource=subresource)
    else:
        mine = ((previous.fields if previous else fs.EMPTY) - removed) | changed
    if mine:
        moved = previous is None or not diff.same or previous.fields != mine
        kept.append(Entry(manager=writer.manager, operation=operation,
                          api_version=rt.api_version,
                          time=now if moved or previous is None else previous.time,
                          fields=mine, subresource=sub))  # fmt: skip
    meta = new.setdefault("metadata", {})
    if kept:
        meta["managedFields"] = _ordered(kept)
    else:
        meta.pop("managedFields", None)
    return new


def _config(rt: ResourceType, applied: Obj, typing: Typing, *, subresource: str | None) -> FieldSet:
    """The fields an apply configuration sets."""
    tracked = _tracked(applied, rt=rt, subresource=subresource)
    return _clean(frozenset(fs.paths_of(tracked, typing, whole=False)))


def _with(entry: Entry, fields: FieldSet) -> Entry:
    return Entry(manager=entry.manager, operation=entry.operation, api_version=entry.api_version,
                 time=entry.time, fields=fields, subresource=entry.subresource)  # fmt: skip


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
