"""The HTTP app under real uvicorn on a free loopback port: health, readiness, metrics, the
Alertmanager webhook's status codes, and the incidents API's auth and filters."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agent.errors import ConfigError, InputError
from agent.model.job import JobRef
from agent.model.workload import JobKind
from agent.runtime.alerts import AlertReceiver
from agent.runtime.http import IncidentFilter, build_app, parse_filters
from agent.runtime.metrics import AgentMetrics
from agent.runtime.server import HttpServer
from agent.runtime.webhook_credentials import WebhookCredentials
from agent.settings import AlertmanagerSettings, BasicAuthSettings
from agent.sources.alertmanager import Alert

RESNET = JobRef(JobKind.PYTORCH, "ml", "resnet")


class Incidents:
    """A two-row incident table standing in for the store's repository (merged separately)."""

    def __init__(self) -> None:
        self.seen: list[IncidentFilter] = []

    def list_incidents(self, filters: IncidentFilter) -> list[dict[str, Any]]:
        self.seen.append(filters)
        rows = [{"id": 1, "verdict": "zone_split_blocked"}, {"id": 2, "verdict": "healthy"}]
        return [r for r in rows if filters.verdict in (None, r["verdict"])][: filters.limit]

    def get_incident(self, incident_id: int) -> dict[str, Any] | None:
        return {"id": 1, "timeline": []} if incident_id == 1 else None


class World:
    def __init__(self) -> None:
        self.ready = {"caches": False, "database": True}
        self.handed: list[tuple[str, list[JobRef]]] = []
        self.accepting = True
        self.metrics = AgentMetrics()
        self.incidents = Incidents()

    def on_alert(self, alert: Alert, jobs: list[JobRef]) -> bool:
        if not self.accepting:
            return False
        self.handed.append((alert.name, jobs))
        return True


def _app(world: World, token: str | None,
         webhook_credentials: WebhookCredentials | None = None) -> Any:
    receiver = AlertReceiver(
        jobs_named=lambda ns, n: [RESNET] if (ns, n) == ("ml", "resnet") else [],
        job_of_pod=lambda ns, p: RESNET if p.startswith("resnet-") else None,
        ready=lambda: world.ready["caches"],
        on_alert=world.on_alert,
        on_outcome=lambda o: world.metrics.alerts.labels(outcome=o).inc(),
    )
    return build_app(
        metrics=world.metrics,
        readiness=lambda: dict(world.ready),
        alerts=receiver,
        incidents=world.incidents,
        api_token=token,
        webhook_credentials=webhook_credentials,
    )


@pytest.fixture
def served() -> Iterator[tuple[World, httpx.Client]]:
    world = World()
    server = HttpServer(_app(world, None), host="127.0.0.1", port=0).start()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            yield world, client
    finally:
        server.stop()


def _hook(*alerts: dict[str, Any]) -> bytes:
    return orjson.dumps({"version": "4", "status": "firing", "alerts": list(alerts)})


ALERT = {"labels": {"alertname": "TrainingJobGPUUtilizationDrop", "namespace": "ml", "created_by_name": "resnet"}, "startsAt": "t1", "fingerprint": "f1"}


def test_health_readiness_and_metrics(served: tuple[World, httpx.Client]) -> None:
    world, client = served
    assert client.get("/healthz").json() == {"status": "ok"}
    not_ready = client.get("/readyz")
    assert not_ready.status_code == 503
    assert not_ready.json()["checks"] == {"caches": False, "database": True}
    world.ready["caches"] = True
    assert client.get("/readyz").status_code == 200
    world.metrics.set_leader(True)
    text = client.get("/metrics").text
    assert "zonemedic_leader 1.0" in text
    assert "zonemedic_detection_latency_seconds_bucket" in text


def test_alertmanager_status_codes(served: tuple[World, httpx.Client]) -> None:
    world, client = served
    bad = client.post("/alertmanager", content=b"{nope")
    assert bad.status_code == 400 and "not JSON" in bad.json()["error"]
    twice = client.post("/alertmanager", content=b'{"alerts": [], "alerts": [{"labels": {}}]}')
    assert (twice.status_code, twice.json()) == (400, {"error": 'body: duplicate key "alerts" in an object'})
    latin1 = client.post("/alertmanager", content='{"alerts": [{"labels": {"a": "é"}}]}'.encode("latin-1"))
    assert latin1.status_code == 400 and latin1.json()["error"].startswith("body: not UTF-8")
    assert client.post("/alertmanager", content=_hook(ALERT)).status_code == 503  # not synced: retry
    world.ready["caches"] = True
    ok = client.post("/alertmanager", content=_hook(ALERT, {"labels": {"alertname": "X", "namespace": "ml", "pod": "resnet-worker-0"}}, {"labels": {"alertname": "Y"}}))
    assert ok.status_code == 200
    assert ok.json() == {"accepted": 2, "duplicates": 0, "unmapped": 1, "jobs": [str(RESNET)]}
    again = client.post("/alertmanager", content=_hook(ALERT))
    assert again.json()["duplicates"] == 1
    assert [name for name, _ in world.handed] == ["TrainingJobGPUUtilizationDrop", "X", "Y"]
    world.accepting = False
    fresh = dict(ALERT, fingerprint="f2")
    assert client.post("/alertmanager", content=_hook(fresh)).status_code == 503
    world.accepting = True
    assert client.post("/alertmanager", content=_hook(fresh)).json()["accepted"] == 1  # not lost
    assert 'zonemedic_alertmanager_alerts_total{outcome="duplicate"} 1.0' in client.get("/metrics").text


WEBHOOK_TOKEN = "am-t0ken"
BASIC = "Basic " + base64.b64encode(b"alertmanager:pa:ss").decode()


@pytest.mark.parametrize(("configured", "headers", "status"), [
    ("bearer", {}, 401),
    ("bearer", {"Authorization": f"Bearer {WEBHOOK_TOKEN}x"}, 401),
    ("bearer", {"Authorization": f"Bearer {WEBHOOK_TOKEN[:-1]}"}, 401),
    ("bearer", {"Authorization": BASIC}, 401),  # basic auth is not configured
    ("bearer", {"Authorization": f"Bearer {WEBHOOK_TOKEN}"}, 200),
    ("bearer", {"Authorization": f"bearer  {WEBHOOK_TOKEN}"}, 200),
    ("basic", {"Authorization": BASIC}, 200),  # a ':' in the password is the password's
    ("basic", {"Authorization": "Basic " + base64.b64encode(b"alertmanager:wrong").decode()}, 401),
    ("basic", {"Authorization": "Basic " + base64.b64encode(b"other:pa:ss").decode()}, 401),
    ("basic", {"Authorization": "Basic " + base64.b64encode(b"alertmanagerpa:ss").decode()}, 401),
    ("basic", {"Authorization": "Basic !!!not-base64"}, 401),
    ("basic", {"Authorization": f"Bearer {WEBHOOK_TOKEN}"}, 401),
    ("both", {"Authorization": f"Bearer {WEBHOOK_TOKEN}"}, 200),
    ("both", {"Authorization": BASIC}, 200),
    ("both", {"Authorization": "Digest x"}, 401),
])
def test_the_webhook_takes_alertmanagers_credentials_and_nothing_else(
    tmp_path: Path, configured: str, headers: dict[str, str], status: int
) -> None:
    (tmp_path / "token").write_text(WEBHOOK_TOKEN + "\n")
    (tmp_path / "password").write_text("pa:ss")
    settings = AlertmanagerSettings(
        bearer_token_file=str(tmp_path / "token") if configured in ("bearer", "both") else None,
        basic_auth=BasicAuthSettings("alertmanager", str(tmp_path / "password"))
        if configured in ("basic", "both") else None,
    )
    world = World()
    world.ready["caches"] = True
    server = HttpServer(_app(world, None, WebhookCredentials.of(settings)), host="127.0.0.1",
                        port=0).start()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            answer = client.post("/alertmanager", content=_hook(ALERT), headers=headers)
    finally:
        server.stop()
    assert answer.status_code == status, answer.text
    if status == 401:
        challenge = answer.headers["www-authenticate"]
        assert ("Bearer" in challenge) is (configured != "basic")
        assert ("Basic" in challenge) is (configured != "bearer")
        assert answer.json() == {"error": "missing or wrong credentials for the Alertmanager webhook"}
        assert world.handed == []  # nothing opened, nothing posted
    else:
        assert [name for name, _ in world.handed] == ["TrainingJobGPUUtilizationDrop"]


@pytest.mark.parametrize(("content", "problem"), [
    (None, "cannot read"), ("", "is empty"), ("\n  \n", "is empty"),
])
def test_an_unreadable_webhook_secret_stops_start_up_naming_the_key(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=f"^alertmanager.bearer_token_file: .*{problem}"):
        WebhookCredentials.of(AlertmanagerSettings(bearer_token_file=str(path)))


def test_incidents_api_on_loopback_without_token(served: tuple[World, httpx.Client]) -> None:
    world, client = served
    listed = client.get("/api/incidents", params={"verdict": "healthy", "since": "7d", "job": "ml/resnet", "limit": "5"})
    assert listed.status_code == 200
    assert listed.json() == {"incidents": [{"id": 2, "verdict": "healthy"}]}
    assert world.incidents.seen[-1] == IncidentFilter(job_namespace="ml", job_name="resnet", verdict="healthy", since=timedelta(days=7), limit=5)
    assert client.get("/api/incidents/1").json() == {"id": 1, "timeline": []}
    assert client.get("/api/incidents/9").status_code == 404
    assert client.get("/api/incidents/x").status_code == 400
    bad = client.get("/api/incidents", params={"since": "soon"})
    assert bad.status_code == 400 and "since" in bad.json()["error"]


def _asgi_get(app: Any, path: str, *, client: tuple[str, int], headers: dict[str, str] | None = None) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=client)
        async with httpx.AsyncClient(transport=transport, base_url="http://agent") as c:
            return await c.get(path, headers=headers)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("token", "peer", "headers", "status"),
    [
        (None, "127.0.0.1", None, 200),
        (None, "10.1.2.3", None, 403),  # no token configured: never open to the network
        ("s3cret", "10.1.2.3", None, 401),
        ("s3cret", "10.1.2.3", {"Authorization": "Bearer nope"}, 401),
        ("s3cret", "10.1.2.3", {"Authorization": "Bearer s3cret"}, 200),
        ("s3cret", "127.0.0.1", None, 401),  # a token, once set, applies to everyone
    ],
)
def test_incidents_api_auth(token: str | None, peer: str, headers: dict[str, str] | None, status: int) -> None:
    response = _asgi_get(_app(World(), token), "/api/incidents", client=(peer, 5000), headers=headers)
    assert response.status_code == status


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"job": "resnet"}, "job: expected NAMESPACE/NAME"),
        ({"limit": "0"}, "limit: must be from 1 to 1000, got 0"),
        ({"limit": "abc"}, "limit: expected a whole number from 1 to 1000"),
        ({"limit": "²"}, "limit: expected a whole number from 1 to 1000, got '²'"),
        ({"limit": "٨٠"}, "limit: expected a whole number from 1 to 1000, got '٨٠'"),
        ({"limit": "9" * 400}, "limit: expected a whole number from 1 to 1000, got '99999"),
        ({"since": "99999999999d"}, "since: at most 3650d"),
        ({"since": "inf"}, "since: expected a duration"),
        ({"since": "nan"}, "since: expected a duration"),
        ({"since": "٧d"}, "since: expected a duration"),
        ({"colour": "red"}, "unknown query parameter 'colour'"),
    ],
)
def test_bad_filters(params: dict[str, str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_filters(params)


class FailingIncidents(Incidents):
    """An incident table whose look-up of one incident fails with a bug (a deliberate 500)."""

    def get_incident(self, incident_id: int) -> dict[str, Any] | None:
        raise RuntimeError("a bug deep in the store: secret=hunter2")


def test_an_unhandled_error_is_a_500_without_a_stack_trace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    world.incidents = FailingIncidents()
    server = HttpServer(_app(world, None), host="127.0.0.1", port=0).start()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            response = client.get("/api/incidents/1")
    finally:
        server.stop()
    assert response.status_code == 500
    assert response.json() == {"error": "internal error (logged by the agent)"}
    for leak in ("Traceback", "RuntimeError", "hunter2", ".py"):
        assert leak not in response.text
    assert any(r.exc_info and "hunter2" in str(r.exc_info[1]) for r in caplog.records)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/api/incidents/x", "incident id: expected a whole number"),
        ("/api/incidents/0", "incident id: must be from 1 to 2147483647, got 0"),
        ("/api/incidents/2147483648", "incident id: must be from 1 to 2147483647, got 2147483648"),
        ("/api/incidents/%C2%B2", "incident id: expected a whole number from 1 to 2147483647, got '²'"),
        ("/api/incidents/%D9%A8%D9%A0", "incident id: expected a whole number from 1 to 2147483647, got '٨٠'"),
        ("/api/incidents/" + "9" * 30, "incident id: expected a whole number from 1 to 2147483647"),
        ("/api/incidents/99999999999999999999", "incident id: expected a whole number"),
        ("/api/incidents?since=99999999999d", "since: at most 3650d"),
        ("/api/incidents?limit=1e3", "limit: expected a whole number"),
    ],
)
def test_client_mistakes_are_400_naming_the_field(
    served: tuple[World, httpx.Client], path: str, message: str
) -> None:
    _, client = served
    response = client.get(path)
    assert response.status_code == 400
    assert message in response.json()["error"]


def _raw_exchange(url: str, head: bytes, chunks: Iterator[bytes]) -> tuple[bytes, int]:
    """Send `head`, then `chunks` until the server answers; (the answer, chunks sent)."""
    host, port = url.removeprefix("http://").split(":")
    sent = 0
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head)
        sock.setblocking(False)
        answer = b""
        deadline = time.monotonic() + 10
        for chunk in chunks:
            with contextlib.suppress(BlockingIOError):
                answer += sock.recv(65536)
            if answer:
                break
            sock.setblocking(True)
            try:
                sock.sendall(chunk)
            except OSError:  # the server answered and closed
                break
            sock.setblocking(False)
            sent += 1
        sock.setblocking(True)
        while not _complete(answer) and time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    return answer, sent


def _complete(answer: bytes) -> bool:
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return len(body) >= length


def test_webhook_refuses_a_large_body_from_content_length_without_reading_it(
    served: tuple[World, httpx.Client],
) -> None:
    world, client = served
    world.ready["caches"] = True
    head = (
        b"POST /alertmanager HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n"
        b"Content-Length: 209715200\r\n\r\n"
    )
    # no body byte is sent at all: the answer must come from the header alone
    answer, _ = _raw_exchange(str(client.base_url).rstrip("/"), head, iter(()))
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"body too large (209715200 bytes, limit 4194304)" in answer
    assert world.handed == []


def test_webhook_stops_reading_a_chunked_body_past_the_limit(
    served: tuple[World, httpx.Client],
) -> None:
    world, client = served
    world.ready["caches"] = True
    head = (
        b"POST /alertmanager HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    mib = 1024 * 1024
    chunk = f"{mib:x}\r\n".encode() + b" " * mib + b"\r\n"
    answer, sent = _raw_exchange(str(client.base_url).rstrip("/"), head, iter([chunk] * 200))
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"more than 4194304 bytes" in answer
    assert sent < 200  # answered long before the 200 MiB were sent
    assert world.handed == []


def test_webhook_label_nested_300_deep_is_a_400(served: tuple[World, httpx.Client]) -> None:
    world, client = served
    world.ready["caches"] = True
    deep = b"[" * 300 + b"]" * 300
    body = b'{"alerts": [{"labels": {"alertname": "X", "namespace": "ml", "x": ' + deep + b"}}]}"
    response = client.post("/alertmanager", content=body)
    assert response.status_code == 400
    assert "alerts[0].labels.x: expected a string" in response.json()["error"]


def _asgi_request(app: Any, method: str, path: str, *, headers: dict[str, str] | None = None) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=("10.1.2.3", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://agent") as c:
            return await c.request(method, path, headers=headers)

    return asyncio.run(go())


def _with_write_route(token: str | None, calls: list[str]) -> Any:
    async def note(request: Request) -> Response:
        calls.append(request.path_params["incident_id"])
        return JSONResponse({"noted": True})

    return build_app(
        metrics=AgentMetrics(),
        readiness=dict,
        api_token=token,
        write_routes=[Route("/api/incidents/{incident_id}/note", note, methods=["POST"])],
    )


@pytest.mark.parametrize(
    ("token", "headers", "status", "called"),
    [
        (None, None, 404, False),  # no token configured: the write endpoint does not exist
        (None, {"Authorization": "Bearer anything"}, 404, False),
        ("s3cret", None, 401, False),
        ("s3cret", {"Authorization": "Bearer wrong"}, 401, False),
        ("s3cret", {"Authorization": "Basic s3cret"}, 401, False),
        ("s3cret", {"Authorization": "Bearer s3cret"}, 200, True),
    ],
)
def test_write_endpoints_need_the_token_and_do_not_exist_without_one(
    token: str | None, headers: dict[str, str] | None, status: int, called: bool
) -> None:
    calls: list[str] = []
    response = _asgi_request(_with_write_route(token, calls), "POST", "/api/incidents/7/note", headers=headers)
    assert response.status_code == status
    assert calls == (["7"] if called else [])


_PARAM_TEXT = st.text(alphabet="0123456789٨²-+.eE/ admhsinf%&=?#\x00", max_size=30)


@settings(max_examples=150, deadline=None)
@given(
    params=st.dictionaries(
        st.sampled_from(["job", "namespace", "status", "verdict", "since", "limit", "x"]),
        _PARAM_TEXT, max_size=4,
    ),
    incident=_PARAM_TEXT,
)
def test_fuzz_client_input_is_never_a_5xx(params: dict[str, str], incident: str) -> None:
    app = _app(World(), None)

    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://agent") as c:
            return [
                await c.get("/api/incidents", params=params),
                await c.get("/api/incidents/" + quote(incident, safe="")),
            ]

    for response in asyncio.run(go()):
        assert response.status_code in (200, 307, 400, 404), response.text  # 307: trailing slash
        assert "Traceback" not in response.text
