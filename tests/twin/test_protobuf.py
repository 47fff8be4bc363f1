"""Decoding kubectl's protobuf SelfSubjectAccessReview body."""

from __future__ import annotations

import pytest

from agent.twin.protobuf import MAGIC, ProtobufError, self_subject_access_review


def _field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([(number << 3) | 2, len(payload)]) + payload


def _string(number: int, text: str) -> bytes:
    return _field(number, text.encode())


def envelope(kind: str, raw: bytes) -> bytes:
    type_meta = _string(1, "authorization.k8s.io/v1") + _string(2, kind)
    return MAGIC + _field(1, type_meta) + _field(2, raw)


def test_resource_attributes() -> None:
    attrs = _string(1, "ml") + _string(2, "delete") + _string(3, "kubeflow.org") + \
        _string(5, "pytorchjobs") + _string(7, "bert")
    body = envelope("SelfSubjectAccessReview", _field(2, _field(1, attrs)))
    review = self_subject_access_review(body)
    assert review["spec"]["resourceAttributes"] == {
        "namespace": "ml", "verb": "delete", "group": "kubeflow.org", "version": "",
        "resource": "pytorchjobs", "subresource": "", "name": "bert"}


def test_non_resource_attributes() -> None:
    body = envelope("SelfSubjectAccessReview",
                    _field(2, _field(2, _string(1, "/metrics") + _string(2, "get"))))
    assert self_subject_access_review(body)["spec"]["nonResourceAttributes"] == {
        "path": "/metrics", "verb": "get"}


@pytest.mark.parametrize(
    "body",
    [b'{"json": true}', MAGIC + b"\x0a\x05ab", envelope("Pod", b"")],
)
def test_malformed_bodies(body: bytes) -> None:
    with pytest.raises(ProtobufError):
        self_subject_access_review(body)
