"""The twin's mutating admission webhooks: calling the registered ones as kube-apiserver does.

`WebhookAdmission.admit_create` runs before a create takes the store's lock (store.py calls it for
every create, from a client over HTTP or from the twin's own operators and controllers), so a
slow webhook holds up only its own request. For the stored MutatingWebhookConfigurations, in
the server's order (configurations by name, webhooks in their order), it calls each webhook whose
rules, namespaceSelector and objectSelector match (webhook_match.py) with an `admission.k8s.io`
AdmissionReview (webhook_call.py) and:
- checks the answer (`response.uid` the request's, `patchType: JSONPatch` with a patch and only
  with one) and applies the base64 RFC 6902 patch to the object before the store validates,
  defaults and persists it;
- relays its `warnings` to the client (`Warning: 299` headers), also when the request fails;
- a denial (`allowed: false`) is the webhook's status with `admission webhook "<name>" denied the
  request: ` before its message, code 400 at least (v1.32's rule);
- a webhook that cannot be called, times out (`timeoutSeconds`, default 10) or answers unusably is
  skipped under `failurePolicy: Ignore` and fails the request under `Fail`: 500 InternalError,
  `Internal error occurred: failed calling webhook "<name>": <reason>`;
- a dry-run request is sent with `dryRun: true`; a webhook with side effects (`sideEffects` other
  than None/NoneOnDryRun) refuses it: 400 `admission webhook "<name>" does not support dry run`;
- `reinvocationPolicy: IfNeeded`: a webhook whose output a later webhook changed is called once
  more, after all the others.
Webhooks are never called for the admission configurations themselves (as the server exempts
them). Only CREATE is dispatched: the twin does not call webhooks on update, patch, delete or
connect, nor on a server-side apply that creates. It does not store anything.
"""

from __future__ import annotations

import base64
import binascii
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from agent.twin import patch as patching
from agent.twin import webhook_call
from agent.twin.apierror import ApiError
from agent.twin.resources import ResourceType, lookup
from agent.twin.webhook_configs import GROUP, MUTATING_CONFIGS
from agent.twin.webhook_match import (
    Attributes,
    Resource,
    matched_resource,
    namespace_matches,
    object_matches,
)
from agent.twin.writes import body_of, check_kind, namespace_for


class Objects(Protocol):
    """The store's reads the dispatcher uses (the store itself)."""

    def type_version(self, rt: ResourceType) -> int: ...

    def list_refs(self, rt: ResourceType) -> tuple[list[Obj], str, str | None]: ...

    def get_ref(self, rt: ResourceType, name: str, *, namespace: str | None = None) -> Obj: ...

log = logging.getLogger(__name__)
Obj = dict[str, Any]
NAMESPACES = lookup("namespaces")
SERVICES = lookup("services")
# Who the twin's own operators and controllers are, for a review's userInfo.
CONTROLLER_USER: Mapping[str, Any] = {"username": "system:twin:controller-manager",
                                      "groups": ["system:authenticated"]}
Post = Callable[..., Any]


class _CallFailedError(Exception):
    """A webhook call that failed: the failure policy decides (the text is the reason)."""


@dataclass
class _Call:
    """One webhook of one configuration, in dispatch order."""

    config: str
    hook: Mapping[str, Any]
    output: Obj | None = None  # the object just after this webhook's last call


@dataclass
class _Request:
    rt: ResourceType
    namespace: str
    user: Mapping[str, Any]
    dry_run: bool
    warnings: list[str] | None
    namespace_labels: Mapping[str, str] | None
    invoked: list[_Call] = field(default_factory=list)


def _internal(message: str) -> ApiError:
    text = f"Internal error occurred: {message}"
    return ApiError(500, "InternalError", text, details={"causes": [{"message": message}]})


def denial(webhook: str, status: Mapping[str, Any] | None) -> ApiError:
    """The server's answer to a webhook's `allowed: false`: its status, message prefixed."""
    status = status or {}
    by = f'admission webhook "{webhook}" denied the request'
    if status.get("message"):
        message = f"{by}: {status['message']}"
    elif status.get("reason"):
        message = f"{by}: {status['reason']}"
    else:
        message = f"{by} without explanation"
    code = status.get("code")
    code = code if isinstance(code, int) and code >= 400 else 400
    details = status.get("details") if isinstance(status.get("details"), dict) else None
    return ApiError(code, str(status.get("reason") or ""), message, details=details)


class WebhookAdmission:
    """Calls the store's registered mutating webhooks for a create; see the module docstring."""

    def __init__(self, store: Objects, *, post: Post = webhook_call.post) -> None:
        self._store = store
        self._post = post

    def _configs(self) -> list[Obj]:
        if not self._store.type_version(MUTATING_CONFIGS):
            return []
        configs, _, _ = self._store.list_refs(MUTATING_CONFIGS)
        return sorted(configs, key=lambda c: str(c["metadata"]["name"]))

    def _service(self, namespace: str, name: str) -> Obj | None:
        try:
            return self._store.get_ref(SERVICES, name, namespace=namespace)
        except ApiError:
            return None

    def admit_create(
        self,
        rt: ResourceType,
        obj: Mapping[str, Any],
        *,
        namespace: str | None,
        dry_run: bool,
        user: Mapping[str, Any] | None,
        warnings: list[str] | None,
    ) -> Mapping[str, Any]:
        """The object to create after the matching webhooks (`obj` itself when none match)."""
        if rt.group == GROUP:
            return obj
        configs = self._configs()
        if not configs:
            return obj
        body = body_of(obj)
        check_kind(rt, body)
        meta = body["metadata"]
        ns = namespace_for(rt, meta, namespace)
        labels: Mapping[str, str] | None = None
        if rt.namespaced:
            meta["namespace"] = ns
            try:
                ns_obj = self._store.get_ref(NAMESPACES, ns)
            except ApiError:
                return body  # the store answers the missing namespace
            labels = ns_obj["metadata"].get("labels") or {}
        request = _Request(rt, ns if rt.namespaced else "", user or CONTROLLER_USER, dry_run,
                           warnings, labels)
        calls = [_Call(str(c["metadata"]["name"]), h) for c in configs
                 for h in c.get("webhooks") or [] if isinstance(h, Mapping)]
        for call in calls:
            body = self._maybe_call(request, call, body)
        reinvoke = [c for c in request.invoked
                    if c.hook.get("reinvocationPolicy") == "IfNeeded" and c.output != body]
        for call in reinvoke:
            body = self._maybe_call(request, call, body, reinvocation=True)
        return body

    def _attributes(self, request: _Request, body: Obj) -> Attributes:
        rt = request.rt
        name = str(body["metadata"].get("name") or "")
        namespace = name if rt.key == NAMESPACES.key else request.namespace
        return Attributes("CREATE", Resource(rt.group, rt.version, rt.plural),
                          namespace=namespace, labels=body["metadata"].get("labels") or {})

    def _maybe_call(self, request: _Request, call: _Call, body: Obj, *,
                    reinvocation: bool = False) -> Obj:
        attrs = self._attributes(request, body)
        resource = matched_resource(call.hook, attrs)
        if resource is None or not namespace_matches(call.hook, attrs, request.namespace_labels):
            return body
        if not object_matches(call.hook, attrs):
            return body
        name = str(call.hook.get("name"))
        if request.dry_run and call.hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise ApiError(400, "BadRequest", f'admission webhook "{name}" does not support dry run')
        if not reinvocation:
            request.invoked.append(call)
        try:
            body = self._call(request, call, body, resource)
        except _CallFailedError as exc:
            if call.hook.get("failurePolicy", "Fail") != "Ignore":
                raise _internal(f'failed calling webhook "{name}": {exc}') from exc
            log.warning("Failed calling webhook, failing open %s: %s", name, exc)
        call.output = body
        return body

    def _review(self, request: _Request, call: _Call, body: Obj, resource: Resource) -> Obj:
        rt = request.rt
        kind = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        res = {"group": resource.group, "version": resource.version, "resource": resource.resource}
        options: Obj = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        if request.dry_run:
            options["dryRun"] = ["All"]
        review_request: Obj = {
            "uid": str(uuid.uuid4()), "kind": kind, "resource": res,
            "requestKind": kind,
            "requestResource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
            "operation": "CREATE", "userInfo": dict(request.user), "object": body,
            "oldObject": None, "dryRun": request.dry_run, "options": options,
        }
        name = body["metadata"].get("name")
        if name:
            review_request["name"] = name
        if request.namespace:
            review_request["namespace"] = request.namespace
        versions = [v for v in call.hook.get("admissionReviewVersions") or []
                    if v in ("v1", "v1beta1")]
        version = versions[0] if versions else "v1"
        return {"apiVersion": f"admission.k8s.io/{version}", "kind": "AdmissionReview",
                "request": review_request}

    def _call(self, request: _Request, call: _Call, body: Obj, resource: Resource) -> Obj:
        hook = call.hook
        client_config = hook.get("clientConfig") or {}
        review = self._review(request, call, body, resource)
        try:
            endpoint = webhook_call.resolve(client_config, self._service)
            answer = self._post(endpoint, review, ca_bundle=client_config.get("caBundle"),
                                timeout=float(hook.get("timeoutSeconds") or 10))
        except webhook_call.CallError as exc:
            raise _CallFailedError(str(exc)) from exc
        response = _verified(answer, review)
        for text in response.get("warnings") or []:
            if request.warnings is not None and isinstance(text, str):
                request.warnings.append(text)
        if not response.get("allowed"):
            raise denial(str(hook.get("name")), response.get("status"))
        patch = response.get("patch")
        if not patch:
            return body
        try:
            ops = patching_ops(patch)
        except ValueError as exc:
            raise _CallFailedError(f"received undecodable patch in webhook response: {exc}") from exc
        if not ops:
            return body
        try:
            patched = patching.json_patch(body, ops)
        except patching.PatchError as exc:
            raise _internal(str(exc)) from exc
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise _internal(f'admission webhook "{hook.get("name")}" returned an object that is '
                            "not a JSON object with metadata")
        return patched


def patching_ops(patch: Any) -> list[Any]:
    """The RFC 6902 operations of a response's base64 `patch`."""
    try:
        ops = orjson.loads(base64.b64decode(str(patch), validate=True))
    except (binascii.Error, orjson.JSONDecodeError) as exc:
        raise ValueError(str(exc)) from exc
    if not isinstance(ops, list):
        raise ValueError("a JSON patch must be an array of operations")
    return ops


def _verified(answer: Any, review: Mapping[str, Any]) -> Mapping[str, Any]:
    """The review's response, checked as the server checks it (else _CallFailedError)."""
    def bad(reason: str) -> _CallFailedError:
        return _CallFailedError(f"received invalid webhook response: {reason}")

    expected = str(review["apiVersion"])
    if not isinstance(answer, dict) or answer.get("kind") != "AdmissionReview" or (
            answer.get("apiVersion") != expected):
        got = f"{answer.get('apiVersion')}, Kind={answer.get('kind')}" if isinstance(
            answer, dict) else type(answer).__name__
        raise bad(f"expected webhook response of {expected}, Kind=AdmissionReview, got {got}")
    response = answer.get("response")
    if not isinstance(response, dict):
        raise bad("webhook response was absent")
    uid = review["request"]["uid"]
    if response.get("uid") != uid:
        raise bad(f'expected response.uid="{uid}", got "{response.get("uid") or ""}"')
    patch_type = response.get("patchType") or ""
    if response.get("patch") and not patch_type:
        raise bad("webhook returned response.patch but not response.patchType")
    if patch_type and not response.get("patch"):
        raise bad("webhook returned response.patchType but not response.patch")
    if patch_type and patch_type != "JSONPatch":
        raise bad(f'webhook returned invalid response.patchType of "{patch_type}"')
    return response
