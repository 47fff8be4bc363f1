"""API errors of the twin: the HTTP code and `kind: Status` the real API server answers.

`ApiError` is raised by the twin's store, authorizer and HTTP layer and turned into a Status body by
the HTTP layer; the constructors below build the errors whose wording clients match on (NotFound,
Conflict, AlreadyExists, Invalid, BadRequest, Expired), the field errors of a validation
(`FieldProblem`, `invalid_fields`) and an admission webhook's denial as kube-apiserver relays it
(`webhook_denied`, `webhook_forbidden`). This module does not decide when an error applies; its
callers do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.twin.resources import ResourceType

Obj = dict[str, Any]


class ApiError(Exception):
    """An API error with the HTTP code and Status reason the real server would answer."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details) if details else None
        self.retry_after = retry_after
        # the server's warnings for the request, sent with the error (`Warning` headers)
        self.warnings: list[str] = []

    def status(self) -> Obj:
        """The `kind: Status` object the HTTP layer sends."""
        out: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details = dict(self.details or {})
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            out["details"] = details
        return out


def qualified(rt: ResourceType) -> str:
    """`plural.group` as the server names a resource in messages (`plural` for the core group)."""
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def details(rt: ResourceType, name: str) -> Obj:
    return {"name": name, "group": rt.group, "kind": rt.plural}


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{qualified(rt)} "{name}" not found', details=details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{qualified(rt)} "{name}" already exists', details=details(rt, name)
    )


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(rt)} "{name}": {why}',
        details=details(rt, name),
    )


def invalid(rt: ResourceType, name: str, field: str, message: str) -> ApiError:
    found = details(rt, name)
    found["kind"] = rt.kind
    found["causes"] = [{"reason": "FieldValueInvalid", "message": message, "field": field}]
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind  # errors.NewInvalid's GroupKind
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {field}: {message}'
        if name
        else f"{qualified(rt)} is invalid: {field}: {message}",
        details=found,
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def unsupported_media_type(message: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", message)


# --- field errors, as apimachinery's field.Error and errors.NewInvalid word them -------------

_FIELD_TYPES = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueRequired": "Required value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueTooLong": "Too long",
    "FieldValueDuplicate": "Duplicate value",
    "InternalError": "Internal error",
}


@dataclass(frozen=True)
class FieldProblem:
    """One `field.Error`: its path ("" prints as <nil>), type, detail and, for an invalid value,
    the value as Go prints it (`"text"` for a string)."""

    field: str
    type: str
    detail: str
    value: str | None = None

    def body(self) -> str:
        """`ErrorBody()`: `Invalid value: "x": detail`, `Forbidden: detail`, ..."""
        head = _FIELD_TYPES.get(self.type, self.type)
        if self.value is not None:
            head = f"{head}: {self.value}"
        return f"{head}: {self.detail}" if self.detail else head

    def text(self) -> str:
        return f"{self.field or '<nil>'}: {self.body()}"


def aggregate(messages: Sequence[str]) -> str:
    """An error aggregate's text: the one message, or `[a, b]` (repeats once)."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def invalid_fields(group: str, kind: str, name: str, problems: Sequence[FieldProblem]) -> ApiError:
    """`errors.NewInvalid`: 422 Invalid, `Kind.group "name" is invalid: <errors>`, one cause each."""
    qualified_kind = f"{kind}.{group}" if group else kind
    causes = [{"reason": p.type, "message": p.body(), "field": p.field or "<nil>"}
              for p in problems]  # fmt: skip
    return ApiError(
        422,
        "Invalid",
        f'{qualified_kind} "{name}" is invalid: {aggregate([p.text() for p in problems])}',
        details={"name": name, "group": group, "kind": kind, "causes": causes},
    )


def webhook_denied(webhook: str, denial: ApiError) -> ApiError:
    """What kube-apiserver answers when a webhook denies a request: the webhook's status (code
    at least 400) with `admission webhook "<name>" denied the request: ` before its message."""
    return ApiError(
        max(denial.code, 400),
        denial.reason,
        f'admission webhook "{webhook}" denied the request: {denial.message}',
        details=denial.details,
    )


def webhook_forbidden(webhook: str, message: str) -> ApiError:
    """A webhook that denied with a plain error (controller-runtime's `Denied`): 403 Forbidden."""
    return webhook_denied(webhook, ApiError(403, "Forbidden", message))
