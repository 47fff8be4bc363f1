"""The HTTP server's bounds, over raw sockets against real uvicorn: a client that trickles its
request head, sends nothing, trickles a body (read or not), sends an oversized head or stays idle
is answered and closed within the bound; a flood of slow requests past `max_requests` is 503
while /healthz and /readyz still answer."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import replace

import httpx
import orjson
import pytest

from agent.runtime.alerts import AlertReceiver
from agent.runtime.http import build_app
from agent.runtime.limits import HttpLimits
from agent.runtime.metrics import AgentMetrics
from agent.runtime.server import HttpServer
from tests.support.waiting import wait

LIMITS = HttpLimits(header_timeout=0.5, body_timeout=0.8, keep_alive=1.0, max_requests=4,
                    max_connections=50, max_header_bytes=4096)
# the flood's slow bodies must outlast the request that meets the limit, on a busy machine too
FLOOD_LIMITS = replace(LIMITS, body_timeout=3.0)
HOOK = orjson.dumps({"alerts": [{"labels": {"alertname": "X"}}]})


def serve(limits: HttpLimits) -> Iterator[HttpServer]:
    receiver = AlertReceiver(jobs_named=lambda ns, n: [], job_of_pod=lambda ns, p: None,
                             ready=lambda: True, on_alert=lambda alert, jobs: True)
    app = build_app(metrics=AgentMetrics(), readiness=lambda: {"database": True}, alerts=receiver)
    running = HttpServer(app, host="127.0.0.1", port=0, limits=limits).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def server() -> Iterator[HttpServer]:
    yield from serve(LIMITS)


@pytest.fixture
def flood_server() -> Iterator[HttpServer]:
    yield from serve(FLOOD_LIMITS)


def connect(server: HttpServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.settimeout(10)
    return sock


def trickle_until_closed(sock: socket.socket, data: bytes, *, every: float = 0.05,
                         limit: float = 8.0) -> tuple[bytes, float]:
    """Send `data` a byte at a time, every `every` seconds, reading what the server answers,
    until it closes the connection; (the answer, seconds until closed). The server never closing
    within `limit` fails."""
    started = time.monotonic()
    answer = b""
    sock.settimeout(every)
    for i in range(int(limit / every)):
        try:
            if i < len(data):
                sock.sendall(data[i:i + 1])
            chunk = sock.recv(65536)
            if not chunk:
                return answer, time.monotonic() - started
            answer += chunk
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return answer, time.monotonic() - started
    raise AssertionError(f"the server kept the connection open for {limit}s: {answer!r}")


def test_a_trickled_request_head_is_answered_408_and_closed(server: HttpServer) -> None:
    head = b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + b"x-slow: " + b"a" * 2000 + b"\r\n\r\n"
    with connect(server) as sock:
        answer, seconds = trickle_until_closed(sock, head)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert b"the request head did not arrive in time" in answer
    assert LIMITS.header_timeout - 0.1 < seconds < LIMITS.header_timeout + 2


def test_a_connection_that_sends_nothing_is_closed(server: HttpServer) -> None:
    with connect(server) as sock:
        answer, seconds = trickle_until_closed(sock, b"")
    assert answer.startswith(b"HTTP/1.1 408") and seconds < LIMITS.header_timeout + 2


def test_a_trickled_body_is_answered_408_and_closed(server: HttpServer) -> None:
    head = (b"POST /alertmanager HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(HOOK))
    with connect(server) as sock:
        sock.sendall(head)
        answer, seconds = trickle_until_closed(sock, HOOK, every=0.1)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"the request body did not arrive within 0.8s" in answer
    assert seconds < LIMITS.body_timeout + 2


def test_the_unread_body_of_an_answered_request_is_not_a_way_to_stay(server: HttpServer) -> None:
    head = b"GET /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\n\r\n"
    with connect(server) as sock:
        sock.sendall(head)
        answer, seconds = trickle_until_closed(sock, b"z" * 5000)
    assert answer.startswith(b"HTTP/1.1 200 ")  # answered; then closed despite the trickle
    assert b"408" not in answer
    assert seconds < LIMITS.header_timeout + 2


def test_an_oversized_head_is_refused_and_an_idle_connection_closes(server: HttpServer) -> None:
    big = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 8192 + b"\r\n\r\n"
    with connect(server) as sock:  # in one piece: 431 (uvicorn would take it)
        sock.sendall(big)
        answer, _ = trickle_until_closed(sock, b"")
    assert answer.startswith(b"HTTP/1.1 431 ") and b"larger than 4096 bytes" in answer
    with connect(server) as sock:  # still arriving past the limit: uvicorn's 400
        sock.sendall(big[:6000])
        answer, _ = trickle_until_closed(sock, b"")
    assert answer.startswith(b"HTTP/1.1 400 ")
    with connect(server) as sock:  # keep-alive: one request, then silence
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        answer, seconds = trickle_until_closed(sock, b"")
    assert answer.startswith(b"HTTP/1.1 200 ") and seconds < LIMITS.keep_alive + 2


def test_a_flood_past_the_limit_is_503_while_health_answers(flood_server: HttpServer) -> None:
    server = flood_server
    head = (b"POST /alertmanager HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(HOOK))
    flood = [connect(server) for _ in range(LIMITS.max_requests)]
    try:
        for sock in flood:
            sock.sendall(head + HOOK[:3])  # in the app, waiting for the rest of the body
        wait(lambda: server.in_flight == LIMITS.max_requests, timeout=5,
             what="the flood's requests in the app")
        with httpx.Client(base_url=server.url, timeout=5) as client:
            busy = client.post("/alertmanager", content=HOOK)
            assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
            assert "handling 4 requests already" in busy.json()["error"]
            for path in ("/healthz", "/readyz"):
                assert client.get(path).status_code == 200
            # the flood's bodies never come: their deadline frees the slots
            wait(lambda: server.in_flight == 0, timeout=FLOOD_LIMITS.body_timeout + 5,
                 what="the flood timed out")
            assert client.post("/alertmanager", content=HOOK).status_code == 200
    finally:
        for sock in flood:
            sock.close()
