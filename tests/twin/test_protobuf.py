"""Decoding kubectl's protobuf SelfSubjectAccessReview body."""

from __future__ import annotations

import pytest

from agent.twin.protobuf import (
    MAGIC,
    ProtobufError,
    UnsupportedKindError,
    decode_object,
    self_subject_access_review,
)


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


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def msg(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def num(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def text(number: int, value: str) -> bytes:
    return msg(number, value.encode())


def entry(number: int, key: str, value: bytes) -> bytes:
    return msg(number, text(1, key) + value)


def wrap(api_version: str, kind: str, raw: bytes) -> bytes:
    return MAGIC + msg(1, text(1, api_version) + text(2, kind)) + msg(2, raw)


def test_a_deployment_decodes_to_its_json_form() -> None:
    meta = (text(1, "web") + text(2, "") + text(3, "demo")
            + entry(11, "app", text(2, "web")) + msg(8, num(1, 0)))  # fmt: skip
    container = (text(1, "nginx") + text(2, "nginx:1") + text(3, "serve") + text(3, "")
                 + msg(8, entry(2, "cpu", msg(2, text(1, "500m"))))
                 + msg(6, num(3, 8080) + text(4, "TCP")))  # fmt: skip
    template = msg(1, entry(11, "app", text(2, "web"))) + msg(2, msg(2, container)
                                                              + num(4, 30) + text(3, ""))  # fmt: skip
    rolling = msg(1, num(1, 0) + num(2, 1)) + msg(2, num(1, 1) + text(3, "25%"))
    strategy = text(1, "RollingUpdate") + msg(2, rolling)
    spec = (num(1, 0) + msg(2, entry(1, "app", text(2, "web"))) + msg(3, template)
            + msg(4, strategy))  # fmt: skip
    created = msg(8, num(1, 1_700_000_000))
    body = wrap("apps/v1", "Deployment", msg(1, meta + created) + msg(2, spec) + msg(3, b""))
    assert decode_object(body) == {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "demo", "labels": {"app": "web"},
                     "creationTimestamp": "2023-11-14T22:13:20Z"},
        "spec": {
            "replicas": 0,  # a zero count is kept; empty strings and zero times are unset
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "containers": [{"name": "nginx", "image": "nginx:1", "command": ["serve", ""],
                                "resources": {"requests": {"cpu": "500m"}},
                                "ports": [{"containerPort": 8080, "protocol": "TCP"}]}],
                "terminationGracePeriodSeconds": 30}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxUnavailable": 1, "maxSurge": "25%"}},
        },
        "status": {},
    }  # fmt: skip


def test_secret_bytes_are_base64_and_rbac_empty_groups_are_kept() -> None:
    secret = wrap("v1", "Secret", msg(1, text(1, "s")) + entry(2, "a", msg(2, b"\x00b"))
                  + text(3, "Opaque"))  # fmt: skip
    assert decode_object(secret)["data"] == {"a": "AGI="}
    rule = text(1, "get") + text(2, "") + text(3, "pods")
    role = decode_object(wrap("rbac.authorization.k8s.io/v1", "Role",
                              msg(1, text(1, "r")) + msg(2, rule)))  # fmt: skip
    assert role["rules"] == [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]


def test_negative_numbers_and_micro_times() -> None:
    lease = wrap("coordination.k8s.io/v1", "Lease", msg(2, text(1, "me") + num(2, -1)
                                                        + msg(4, num(1, 1_700_000_000) + num(2, 5_000))))  # fmt: skip
    assert decode_object(lease)["spec"] == {
        "holderIdentity": "me", "leaseDurationSeconds": -1,
        "renewTime": "2023-11-14T22:13:20.000005Z"}  # fmt: skip


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        (wrap("apps/v1", "StatefulSet", b""), UnsupportedKindError,
         "cannot decode application/vnd.kubernetes.protobuf bodies of kind StatefulSet"),
        (wrap("kubeflow.org/v1", "PyTorchJob", b""), UnsupportedKindError, "kind PyTorchJob"),
        (wrap("v1", "ConfigMap", num(99, 1)), ProtobufError,
         "field 99 of core.v1.ConfigMap is not known"),
        (wrap("v1", "ConfigMap", num(1, 1)), ProtobufError,
         "core.v1.ConfigMap.metadata: expected a length-delimited field"),
        (wrap("v1", "ConfigMap", msg(1, msg(1, b"\xff"))), ProtobufError, "not UTF-8"),
        (wrap("v1", "ConfigMap", b"\x0a\x10ab"), ProtobufError, "truncated"),
    ],
)
def test_what_cannot_be_decoded_is_named(body: bytes, error: type, message: str) -> None:
    with pytest.raises(error) as err:
        decode_object(body)
    assert message in str(err.value)
