"""The `admission.k8s.io/v1` AdmissionReview the API server posts, and the one it is answered with.

Who calls it: `agent.admission.webhook` (parse the body, answer); the tests and the bench build
requests with `review_request`. Pure: JSON bytes in, typed request out; a response dict out.
What it does not do: decide anything, or read the cluster.

A request: `request{uid, kind{group, version, kind}, resource, namespace, name, operation,
userInfo, object, dryRun}` (the API server sets `name` only when the object has one: a
`generateName` object has it empty; `object.metadata.name` is read as well). The answer:
`response{uid (the request's), allowed: true, patchType: JSONPatch, patch (base64 of the RFC 6902
array), warnings[]}`. A webhook that places jobs never refuses one: every answer is `allowed`.
A body that is not such a review is `ReviewError` (the server answers 400 and says why).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from agent.errors import InputError

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_WARNING = 400  # characters of one warning (kube-apiserver truncates longer ones)


class ReviewError(InputError):
    """The body is not an `admission.k8s.io/v1` AdmissionReview request; the message says why."""


@dataclass(frozen=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass(frozen=True)
class AdmissionRequest:
    """One admission request, as the webhook needs it."""

    uid: str
    kind: GroupVersionKind
    namespace: str
    name: str
    operation: str
    object: Mapping[str, Any]
    dry_run: bool
    user: str


def parse_review(body: bytes) -> AdmissionRequest:
    """The request of an AdmissionReview body; `ReviewError` names what is wrong."""
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"the body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise ReviewError("the body is not a JSON object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise ReviewError(f"expected apiVersion {API_VERSION} kind {KIND}, got apiVersion "
                          f"{review.get('apiVersion')!r} kind {review.get('kind')!r}")  # fmt: skip
    request = review.get("request")
    if not isinstance(request, dict):
        raise ReviewError("request: expected an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid: expected a non-empty string")
    kind = request.get("kind")
    if not isinstance(kind, dict) or not all(isinstance(kind.get(k), str) for k in ("group", "version", "kind")):
        raise ReviewError("request.kind: expected {group, version, kind} strings")
    obj = request.get("object")
    if not isinstance(obj, dict):
        raise ReviewError("request.object: expected an object")
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = request.get("name") or meta.get("name") or ""
    namespace = request.get("namespace") or meta.get("namespace") or ""
    user = request.get("userInfo")
    username = user.get("username") if isinstance(user, dict) else None
    return AdmissionRequest(
        uid=uid, kind=GroupVersionKind(kind["group"], kind["version"], kind["kind"]),
        namespace=str(namespace), name=str(name), operation=str(request.get("operation") or ""),
        object=obj, dry_run=request.get("dryRun") is True,
        user=str(username) if isinstance(username, str) else "",
    )  # fmt: skip


def response(
    uid: str, *, patch: Sequence[Mapping[str, Any]] = (), warnings: Sequence[str] = ()
) -> dict[str, Any]:
    """The AdmissionReview answer: allowed, the JSON patch when there is one, the warnings."""
    body: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        body["patchType"] = "JSONPatch"
        body["patch"] = base64.b64encode(orjson.dumps(list(patch))).decode("ascii")
    shown = [w if len(w) <= MAX_WARNING else w[: MAX_WARNING - 3] + "..." for w in warnings]
    if shown:
        body["warnings"] = shown
    return {"apiVersion": API_VERSION, "kind": KIND, "response": body}


def review_request(
    obj: Mapping[str, Any], *, uid: str, group: str, version: str, kind: str, resource: str,
    namespace: str, dry_run: bool = False, operation: str = "CREATE",
) -> dict[str, Any]:  # fmt: skip
    """An AdmissionReview request as kube-apiserver sends it (for tests and the bench)."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "request": {
            "uid": uid, "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "namespace": namespace, "name": meta.get("name", ""), "operation": operation,
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
            "object": dict(obj), "oldObject": None, "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }  # fmt: skip
