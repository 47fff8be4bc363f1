"""Decodes the one Kubernetes protobuf request body kubectl sends to the twin.

kubectl's typed clients POST some objects as `application/vnd.kubernetes.protobuf` (the
`k8s\\x00` magic, a runtime.Unknown envelope, then the message). The twin answers in JSON (the
client accepts both), but must read that body: today only SelfSubjectAccessReview, from
`kubectl auth can-i`. Called by apiserver.py; it does not encode protobuf.
"""

from __future__ import annotations

from typing import Any

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


class ProtobufError(ValueError):
    """A body that is not the protobuf message expected."""


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


def fields(data: bytes) -> dict[int, list[bytes | int]]:
    """Field number -> values (bytes for length-delimited, int for varints)."""
    out: dict[int, list[bytes | int]] = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.setdefault(number, []).append(value)
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError("truncated length-delimited field")
            out.setdefault(number, []).append(data[pos : pos + length])
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
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
