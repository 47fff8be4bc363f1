"""API errors of the twin: the HTTP code and `kind: Status` the real API server answers.

`ApiError` is raised by the twin's store, authorizer and HTTP layer and turned into a Status body by
the HTTP layer; the constructors below build the errors whose wording clients match on (NotFound,
Conflict, AlreadyExists, Invalid, BadRequest, Expired). This module does not decide when an error
applies; its callers do.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    return ApiError(
        422,
        "Invalid",
        f'{rt.kind} "{name}" is invalid: {field}: {message}'
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
