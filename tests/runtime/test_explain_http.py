"""`GET /api/explain` under real uvicorn over the real pipeline's view of its cache: the same
answer as the diagnosis, the API token's check, and 400 / 503 answers that name the problem."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from agent.runtime.explainer import LiveExplainer
from agent.runtime.http import build_app
from agent.runtime.metrics import AgentMetrics
from agent.runtime.server import HttpServer
from tests.runtime.world import World

MASTER, WORKER = "train/gpt-small-master-0", "train/gpt-small-worker-0"
TOKEN = "s3cret-token"
FLOW = {"from": WORKER, "to": MASTER, "port": "23456/TCP"}


def serve(world: World, token: str | None, ready: list[bool]) -> HttpServer:
    explainer = LiveExplainer(world.pipeline.parsed_view, settings=world.parts.settings.diagnosis,
                              ready=lambda: ready[0])  # fmt: skip
    app = build_app(metrics=AgentMetrics(), readiness=lambda: {}, api_token=token,
                    explainer=explainer)  # fmt: skip
    return HttpServer(app, host="127.0.0.1", port=0).start()


@pytest.fixture
def ready() -> list[bool]:
    return [True]


@pytest.fixture
def open_api(world: World, ready: list[bool]) -> Iterator[httpx.Client]:
    server = serve(world, None, ready)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            yield client
    finally:
        server.stop()


@pytest.fixture
def token_api(world: World, ready: list[bool]) -> Iterator[httpx.Client]:
    server = serve(world, TOKEN, ready)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            yield client
    finally:
        server.stop()


def test_the_explanation_is_the_diagnosis(world: World, open_api: httpx.Client) -> None:
    (finding,) = world.pipeline.diagnose()
    assert finding.verdict.value == "zone_split_blocked"
    answer = open_api.get("/api/explain", params=FLOW)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["allowed"], body["denied_at"]) == (False, ["ingress"])
    ingress = body["hops"][1]
    assert (ingress["verdict"], ingress["hubble"], ingress["policies"]) == (
        "default_deny", "POLICY_DENIED", ["CiliumNetworkPolicy/train/zone-b-only"])
    assert body["identities"]["from"]["zone_label"] == {"zone": "zone-a"}
    denied = finding.to_dict()["denied_flows"]
    assert denied
    for flow in denied:  # every flow the diagnosis denies, explained: the same hop and policies
        params = {"from": f"train/{flow['from_pod']}", "to": f"train/{flow['to_pod']}",
                  "port": f"{flow['port']}/{flow['protocol']}"}
        explained = open_api.get("/api/explain", params=params).json()
        first = next(h for h in explained["hops"] if h["verdict"] != "allowed")
        assert explained["allowed"] is False
        assert (first["hop"], first["verdict"], first["policies"]) == (
            flow["hop"], flow["reason"], flow["policies"])
    same_zone = open_api.get("/api/explain", params={**FLOW, "from": "train",
                                                     "from_labels": "zone=zone-b"})
    assert same_zone.json()["allowed"] is True


def test_the_token_is_required_when_set(token_api: httpx.Client) -> None:
    missing = token_api.get("/api/explain", params=FLOW)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert missing.json() == {"error": "missing or wrong bearer token"}
    wrong = token_api.get("/api/explain", params=FLOW, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    right = token_api.get("/api/explain", params=FLOW, headers={"Authorization": f"Bearer {TOKEN}"})
    assert right.status_code == 200 and right.json()["allowed"] is False


BAD = {
    "unknown parameter": ({**FLOW, "verbose": "1"},
                          "unknown query parameter 'verbose' (known: from, to, port, from_labels, "
                          "to_labels, from_service_account, to_service_account)"),
    "unknown pod": ({**FLOW, "to": "train/nope"}, "no pod train/nope in the cluster"),
    "bad port": ({**FLOW, "port": "0"}, "port: '0' is not a port (or range) within 1-65535"),
    "bad protocol": ({**FLOW, "port": "80/gre"},
                     "port: unknown protocol 'gre' (TCP, UDP, SCTP or ANY)"),
    "malformed labels": ({**FLOW, "from": "train", "from_labels": "zone"},
                         "from-labels: expected KEY=VALUE, got 'zone'"),
    "no destination": ({"from": WORKER, "port": "1"},
                       "to: give NAMESPACE/POD (or NAMESPACE with --to-labels)"),
}


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_parameters_are_400_naming_them(
    case: tuple[dict[str, str], str], open_api: httpx.Client
) -> None:
    params, message = case
    answer = open_api.get("/api/explain", params=params)
    assert (answer.status_code, answer.json()) == (400, {"error": message})


def test_before_the_caches_are_synced_it_is_503(open_api: httpx.Client, ready: list[bool]) -> None:
    ready[0] = False
    answer = open_api.get("/api/explain", params=FLOW)
    assert (answer.status_code, answer.json()) == (
        503, {"error": "caches are not synced yet; retry later"})


def test_it_is_read_only(open_api: httpx.Client) -> None:
    assert open_api.post("/api/explain", params=FLOW).status_code == 405
