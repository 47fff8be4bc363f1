"""What a client may hold of the agent's HTTP server: time, size and concurrency bounds.

Who calls it: `agent.runtime.server.HttpServer` puts them around every app it serves. uvicorn
bounds the size of a request head still arriving (`h11_max_incomplete_event_size`: 400), the idle
time between two requests of a connection (`timeout_keep_alive`) and the connections it serves at
once (`limit_concurrency`: past it every request is answered 503); it times neither a request's
head nor its body, and takes a head of any size that arrives in one piece. So:

- `DeadlineH11Protocol` (the h11 protocol, with one more timer): a connection that is not inside
  a request the app is handling must complete its next request head within `header_timeout` of
  its first byte (of connecting, for the first request): a client that trickles its headers is
  answered 408 and closed, one that keeps sending the body of a request already answered is
  closed.
- `RequestLimits` (ASGI middleware): a request head (target and headers) larger than
  `max_header_bytes` is answered 431 and the connection closed; the whole body of a request must
  arrive within
  `body_timeout` of its head, else the read raises `ReadDeadlineError` (answered 408 by the app,
  and the connection closed); at most `max_requests` requests are in the app at once, past that a
  request is answered 503 at once (`Retry-After`), except the health and readiness probes
  (`EXEMPT`), which always reach the app: a flood of slow requests cannot make the kubelet
  restart a healthy agent.

What it does not do: rate-limit per client, or bound what a handler does once it has its body.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from agent.errors import InputError
from agent.settings import HttpSettings

log = logging.getLogger(__name__)

EXEMPT = frozenset({"/healthz", "/readyz"})
_TIMED_OUT_BODY = b"the request head did not arrive in time\n"
TIMED_OUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
             b"content-length: %d\r\nconnection: close\r\n\r\n%s"
             % (len(_TIMED_OUT_BODY), _TIMED_OUT_BODY))

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class HttpLimits:
    """The bounds of one server (`http.*` settings; the defaults are theirs)."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive: float = 5.0
    max_requests: int = 100
    max_connections: int = 1000
    max_header_bytes: int = 16 * 1024

    @classmethod
    def of(cls, http: HttpSettings) -> HttpLimits:
        return cls(
            header_timeout=http.header_timeout.total_seconds(),
            body_timeout=http.body_timeout.total_seconds(),
            keep_alive=http.keep_alive_timeout.total_seconds(),
            max_requests=http.max_requests,
            max_connections=http.max_connections,
            max_header_bytes=http.max_header_bytes,
        )


class ReadDeadlineError(InputError):
    """A request body that did not arrive within the server's body timeout (answered 408)."""


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, with a deadline on every request head (see the module docstring).
    `header_timeout` is set on a subclass per server (`protocol_class`)."""

    header_timeout: ClassVar[float] = 10.0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            self._disarm()
        elif self.cycle is not None and not self.cycle.response_complete:
            self._disarm()  # the app has the request: its body has the body deadline
        else:
            self._arm()  # a head on its way (or the body of an answered request): be quick

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _too_slow(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or (
            self.cycle is not None and not self.cycle.response_complete
        ):
            return
        log.info("closing a connection whose request head did not arrive in time",
                 extra={"client": f"{self.client[0]}:{self.client[1]}" if self.client else None,
                        "seconds": self.header_timeout})
        if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            self.transport.write(TIMED_OUT)  # a head never completed: say why before closing
        self.transport.close()


def protocol_class(limits: HttpLimits) -> type[DeadlineH11Protocol]:
    """The h11 protocol with `limits.header_timeout` (one class per server)."""
    return type("BoundedH11Protocol", (DeadlineH11Protocol,),
                {"header_timeout": limits.header_timeout})


class RequestLimits:
    """ASGI middleware: the body deadline and the cap on requests in the app at once."""

    def __init__(self, app: ASGIApp, limits: HttpLimits) -> None:
        self.app = app
        self.limits = limits
        self.in_flight = 0  # read and changed on the event loop only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") + sum(
            len(name) + len(value) + 4 for name, value in scope.get("headers") or ())
        if size > self.limits.max_header_bytes:
            await _refuse(send, 431, f"the request head is larger than "
                                     f"{self.limits.max_header_bytes} bytes")
            return
        exempt = scope["path"] in EXEMPT
        if not exempt and self.in_flight >= self.limits.max_requests:
            await _refuse(send, 503, f"the agent is handling {self.limits.max_requests} "
                                     "requests already; retry", retry_after=True)
            return
        if not exempt:
            self.in_flight += 1
        try:
            await self.app(scope, self._bounded(receive), send)
        finally:
            if not exempt:
                self.in_flight -= 1

    def _bounded(self, receive: Receive) -> Receive:
        timeout = self.limits.body_timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        done = False

        async def bounded() -> Message:
            nonlocal done
            if done:  # the body is in: later reads wait for the disconnect, untimed
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise ReadDeadlineError(
                    f"the request body did not arrive within {timeout:g}s") from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                done = True
            return message

        return bounded


async def _refuse(send: Send, status: int, error: str, *, retry_after: bool = False) -> None:
    """Answer `status` with `{"error": ...}` and close the connection."""
    body = json.dumps({"error": error}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    if retry_after:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
