"""Bounded request bodies: read at most an endpoint's limit of bytes, refuse the rest unread.

Who calls it: every HTTP endpoint that takes a body (`agent.runtime.http`: the Alertmanager
webhook and the decision API; `agent.chatops.slack`: `/slack/events`). A declared
`Content-Length` above the limit is refused before a byte is read; a chunked (or lying) body is
refused as soon as it passes the limit. Free of any web framework: it takes the declared length
and the body's chunks.

What it does not do: time the reading (the HTTP server's read deadline does) or parse the body.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from agent.errors import InputError
from agent.parsing.numbers import parse_int


class BodyTooLargeError(InputError):
    """A request body is larger than the endpoint takes (answered 413, the rest left unread)."""


async def read_bounded(declared: str | None, chunks: AsyncIterator[bytes], *, limit: int) -> bytes:
    """The body whose `Content-Length` header is `declared` (None: not given), at most `limit`
    bytes; `BodyTooLargeError` past it, `InputError` for a `Content-Length` that is no number."""
    if declared is not None:
        size = parse_int(declared, field="Content-Length")
        if size > limit:
            raise BodyTooLargeError(f"body too large ({size} bytes, limit {limit})")
    parts: list[bytes] = []
    total = 0
    async for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise BodyTooLargeError(f"body too large (more than {limit} bytes)")
        parts.append(chunk)
    return b"".join(parts)
