"""Decodes the Kubernetes protobuf request bodies kubectl and client-go send to the twin.

Typed clients POST and PUT built-in objects as `application/vnd.kubernetes.protobuf`: the
`k8s\\x00` magic, a runtime.Unknown envelope (apiVersion, kind, the raw message), then the message
in the wire format of the upstream `generated.proto` files. `decode_object` turns such a body into
the object's JSON form for every kind in protobuf_schema.py (the twin's built-in kinds, Scale,
DeleteOptions), reading the field numbers from that table; `self_subject_access_review` reads the
SelfSubjectAccessReview of `kubectl auth can-i`. The twin answers in JSON, which clients accept.

As the real server reads protobuf into Go structs, a string left empty and a zero Time mean
"unset" and are dropped (defaults then apply). Zero numbers and false are kept: the wire does not
tell a Go pointer (where `replicas: 0` matters) from a plain value (where 0 means unset), and a
kept zero means the same to the twin either way. A kind missing from
the table raises `UnsupportedKindError` (the HTTP layer answers 415 naming the media type); a field
missing from the table or a malformed body raises `ProtobufError` (400). Called by the HTTP
handler (apihandler.py); it does not encode protobuf.
"""

from __future__ import annotations

import base64
import functools
import time
from collections.abc import Iterator
from typing import Any

import orjson

from agent.twin.protobuf_schema import SCHEMA

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

# API group -> the package prefix of its messages in protobuf_schema.py
_PACKAGES = {
    "": "core",
    "apps": "apps",
    "batch": "batch",
    "autoscaling": "autoscaling",
    "coordination.k8s.io": "coordination",
    "networking.k8s.io": "networking",
    "rbac.authorization.k8s.io": "rbac",
}
_WIRE_VARINT, _WIRE_FIXED64, _WIRE_BYTES, _WIRE_FIXED32 = 0, 1, 2, 5


class ProtobufError(ValueError):
    """A body that is not the protobuf message expected."""


class UnsupportedKindError(ProtobufError):
    """A protobuf body of a kind the twin cannot decode."""

    def __init__(self, api_version: str, kind: str) -> None:
        super().__init__(
            f"the twin cannot decode {CONTENT_TYPE} bodies of kind {kind or '?'} "
            f"({api_version or '?'}); send application/json"
        )


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def _iter_fields(data: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) in order: bytes for length-delimited, int for varints."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == _WIRE_VARINT:
            value, pos = _varint(data, pos)
            yield number, wire, value
        elif wire == _WIRE_BYTES:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError("truncated length-delimited field")
            yield number, wire, data[pos : pos + length]
            pos += length
        elif wire in (_WIRE_FIXED64, _WIRE_FIXED32):
            size = 8 if wire == _WIRE_FIXED64 else 4
            if pos + size > len(data):
                raise ProtobufError("truncated fixed-size field")
            yield number, wire, int.from_bytes(data[pos : pos + size], "little")
            pos += size
        else:
            raise ProtobufError(f"unsupported wire type {wire}")


def fields(data: bytes) -> dict[int, list[bytes | int]]:
    """Field number -> values (bytes for length-delimited, int for varints)."""
    out: dict[int, list[bytes | int]] = {}
    for number, _, value in _iter_fields(data):
        out.setdefault(number, []).append(value)
    return out


def _text(values: dict[int, list[bytes | int]], number: int) -> str:
    found = values.get(number)
    if not found or not isinstance(found[-1], bytes):
        return ""
    return found[-1].decode("utf-8", "replace")


def _message(values: dict[int, list[bytes | int]], number: int) -> dict[int, list[bytes | int]]:
    found = values.get(number)
    if not found or not isinstance(found[-1], bytes):
        return {}
    return fields(found[-1])


def unwrap(body: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, raw message) from a `k8s\\x00` runtime.Unknown envelope."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf magic prefix")
    unknown = fields(body[len(MAGIC) :])
    type_meta = _message(unknown, 1)
    raw = unknown.get(2, [b""])[-1]
    if not isinstance(raw, bytes):
        raise ProtobufError("runtime.Unknown.raw is not bytes")
    return _text(type_meta, 1), _text(type_meta, 2), raw


# --- the table-driven decoder ---------------------------------------------------------------------

Field = tuple[str, str, bool]  # JSON name, type code, repeated


@functools.cache
def _schema(message: str) -> dict[int, Field]:
    out: dict[int, Field] = {}
    for entry in SCHEMA[message].split(", "):
        number, name, code = entry.split(" ")
        out[int(number)] = (name, code.lstrip("*"), code.startswith("*"))
    return out


def message_name(api_version: str, kind: str) -> str | None:
    """The table's message for an apiVersion and kind, or None when the twin cannot decode it."""
    if kind == "DeleteOptions":
        return "meta.v1.DeleteOptions"
    group, _, version = api_version.rpartition("/")
    package = _PACKAGES.get(group)
    name = f"{package}.{version}.{kind}"
    return name if package is not None and name in SCHEMA else None


def decode_object(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object (apiVersion and kind from its envelope)."""
    api_version, kind, raw = unwrap(body)
    name = message_name(api_version, kind)
    if name is None:
        raise UnsupportedKindError(api_version, kind)
    obj = {"apiVersion": api_version, "kind": kind}
    obj.update(_decode(name, raw))
    return obj


def _decode(message: str, data: bytes) -> dict[str, Any]:
    schema = _schema(message)
    out: dict[str, Any] = {}
    for number, wire, value in _iter_fields(data):
        field = schema.get(number)
        if field is None:
            raise ProtobufError(f"field {number} of {message} is not known to the twin")
        name, code, repeated = field
        where = f"{message}.{name}"
        if code.startswith("{"):
            key, item = _map_entry(code[1:-1], _bytes(wire, value, where), where)
            out.setdefault(name, {})[key] = item
        elif repeated and code in ("i", "b") and wire == _WIRE_BYTES:
            packed = _bytes(wire, value, where)  # a packed repeated scalar
            pos, items = 0, out.setdefault(name, [])
            while pos < len(packed):
                item, pos = _varint(packed, pos)
                items.append(_scalar(code, _WIRE_VARINT, item, where))
        elif repeated:
            out.setdefault(name, []).append(_value(code, wire, value, where))
        else:
            decoded = _value(code, wire, value, where)
            if decoded is None or decoded == "":
                out.pop(name, None)  # unset, as the server's Go struct reads it
            else:
                out[name] = decoded
    return out


def _bytes(wire: int, value: bytes | int, where: str) -> bytes:
    if wire != _WIRE_BYTES or not isinstance(value, bytes):
        raise ProtobufError(f"{where}: expected a length-delimited field")
    return value


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _scalar(code: str, wire: int, value: bytes | int, where: str) -> Any:
    if code in ("i", "b"):
        if wire != _WIRE_VARINT or not isinstance(value, int):
            raise ProtobufError(f"{where}: expected a varint")
        return _signed(value) if code == "i" else bool(value)
    raw = _bytes(wire, value, where)
    if code == "y":
        return base64.b64encode(raw).decode()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtobufError(f"{where}: not UTF-8") from exc


def _value(code: str, wire: int, value: bytes | int, where: str) -> Any:
    if code in ("s", "i", "b", "y"):
        return _scalar(code, wire, value, where)
    inner = fields(_bytes(wire, value, where))
    if code in ("T", "U"):  # meta/v1 Time and MicroTime: seconds, nanos
        seconds = _int(inner, 1)
        nanos = _int(inner, 2)
        if seconds == 0 and nanos == 0:
            return None
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        return f"{stamp}.{nanos // 1000:06d}Z" if code == "U" else f"{stamp}Z"
    if code == "Q":  # resource.Quantity: its canonical string
        return _text(inner, 1)
    if code == "I":  # intstr.IntOrString: type 0 int, 1 string
        return _text(inner, 3) if _int(inner, 1) == 1 else _int(inner, 2)
    if code == "F":  # meta/v1 FieldsV1: raw JSON
        raw = inner.get(1, [b"{}"])[-1]
        try:
            return orjson.loads(raw if isinstance(raw, bytes) else b"{}")
        except orjson.JSONDecodeError as exc:
            raise ProtobufError(f"{where}: not JSON") from exc
    return _decode(code, _bytes(wire, value, where))


def _int(values: dict[int, list[bytes | int]], number: int) -> int:
    found = values.get(number)
    return _signed(found[-1]) if found and isinstance(found[-1], int) else 0


def _map_entry(code: str, entry: bytes, where: str) -> tuple[str, Any]:
    key: str = ""
    item: Any = b"" if code == "y" else ""
    found_item = False
    for number, wire, value in _iter_fields(entry):
        if number == 1:
            key = _scalar("s", wire, value, where)
        elif number == 2:
            item = _value(code, wire, value, where)
            found_item = True
    if not found_item:
        item = _scalar(code, _WIRE_BYTES, b"", where) if code in ("s", "y") else item
    return key, item


# --- SelfSubjectAccessReview (kubectl auth can-i) --------------------------------------------------


def self_subject_access_review(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf authorization.k8s.io/v1 SelfSubjectAccessReview."""
    _, kind, raw = unwrap(body)
    if kind and kind != "SelfSubjectAccessReview":
        raise ProtobufError(f"expected a SelfSubjectAccessReview, got {kind}")
    review = fields(raw)
    spec = _message(review, 2)
    out: dict[str, Any] = {"spec": {}}
    if 1 in spec:
        res = _message(spec, 1)
        out["spec"]["resourceAttributes"] = {
            "namespace": _text(res, 1),
            "verb": _text(res, 2),
            "group": _text(res, 3),
            "version": _text(res, 4),
            "resource": _text(res, 5),
            "subresource": _text(res, 6),
            "name": _text(res, 7),
        }
    if 2 in spec:
        non = _message(spec, 2)
        out["spec"]["nonResourceAttributes"] = {"path": _text(non, 1), "verb": _text(non, 2)}
    return out
