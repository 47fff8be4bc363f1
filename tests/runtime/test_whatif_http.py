"""`POST /api/whatif` under real uvicorn over the real pipeline's view of its cache: the blast
radius of a change, the same answer as the what-if computed from scratch, the jobs found once per
cache generation, the API token's check, and 400 / 413 / 503 answers that name the problem."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest
import yaml

from agent.diagnosis.whatif import Cluster, blast_radius
from agent.runtime.http import build_app
from agent.runtime.metrics import AgentMetrics
from agent.runtime.server import HttpServer
from agent.runtime.whatif import MAX_BODY, LiveWhatIf, changed_cluster, parse_change
from tests.runtime.world import POLICY, World, gpt_pod

TOKEN = "s3cret-token"
DELETE = {"delete": "CiliumNetworkPolicy/train/zone-b-only"}
OPEN_POLICY = {**POLICY, "spec": {"endpointSelector": {"matchLabels": {"zone": "zone-b"}},
                                  "ingress": [{"fromEndpoints": [{}]}]}}  # fmt: skip


def serve(world: World, token: str | None, ready: list[bool]) -> tuple[HttpServer, LiveWhatIf]:
    whatif = LiveWhatIf(world.pipeline.held_view, settings=world.parts.settings.diagnosis,
                        ready=lambda: ready[0])  # fmt: skip
    app = build_app(metrics=AgentMetrics(), readiness=lambda: {}, api_token=token, whatif=whatif)
    return HttpServer(app, host="127.0.0.1", port=0).start(), whatif


@pytest.fixture
def ready() -> list[bool]:
    return [True]


@pytest.fixture
def served(world: World, ready: list[bool]) -> Iterator[tuple[httpx.Client, LiveWhatIf]]:
    server, whatif = serve(world, None, ready)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield client, whatif
    finally:
        server.stop()


@pytest.fixture
def open_api(served: tuple[httpx.Client, LiveWhatIf]) -> httpx.Client:
    return served[0]


@pytest.fixture
def token_api(world: World, ready: list[bool]) -> Iterator[httpx.Client]:
    server, _ = serve(world, TOKEN, ready)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        server.stop()


def _from_scratch(world: World, body: bytes) -> dict[str, object]:
    """The what-if computed without anything held, on the same view (the CLI's path)."""
    state, policies, _, _ = world.pipeline.held_view()
    after = changed_cluster(state, policies, parse_change(body))
    return blast_radius(Cluster(state, policies), after,
                        settings=world.parts.settings.diagnosis).to_dict()  # fmt: skip


def test_deleting_the_blocking_policy_changes_the_job(world: World,
                                                      open_api: httpx.Client) -> None:  # fmt: skip
    (finding,) = world.pipeline.diagnose()
    assert finding.verdict.value == "zone_split_blocked"
    answer = open_api.post("/api/whatif", json=DELETE)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["jobs"] == [{"job": "PyTorchJob/train/gpt-small", "before": "zone_split_blocked",
                             "after": body["jobs"][0]["after"]}]  # fmt: skip
    assert body["jobs"][0]["after"] != "zone_split_blocked"
    required = [f for f in body["flows"] if f["flow"] == "required"]
    assert required and all(f["before"]["allowed"] is False and f["after"]["allowed"] is True
                            for f in required)  # fmt: skip
    assert all(f["before"]["policies"] == ["CiliumNetworkPolicy/train/zone-b-only"]
               for f in required)  # fmt: skip
    assert body == _from_scratch(world, orjson.dumps(DELETE))
    # nothing in the cluster changed: the diagnosis still sees the policy
    (again,) = world.pipeline.diagnose()
    assert again.verdict.value == "zone_split_blocked"


def test_a_policy_applied_as_yaml(world: World, open_api: httpx.Client) -> None:
    text = yaml.safe_dump(OPEN_POLICY).encode()
    answer = open_api.post("/api/whatif", content=text,
                           headers={"Content-Type": "application/yaml"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [j["before"] for j in body["jobs"]] == ["zone_split_blocked"]
    assert body == _from_scratch(world, text)
    same = open_api.post("/api/whatif", content=yaml.safe_dump(POLICY).encode())
    assert same.json()["jobs"] == [] and same.json()["flows"] == []


def test_deleting_a_pod(world: World, open_api: httpx.Client) -> None:
    change = {"delete": ["Pod/train/gpt-small-worker-0"]}
    answer = open_api.post("/api/whatif", json=change)
    assert answer.status_code == 200, answer.text
    assert answer.json() == _from_scratch(world, orjson.dumps(change))


def test_the_jobs_are_found_once_per_cache_generation(
    world: World, served: tuple[httpx.Client, LiveWhatIf]
) -> None:
    client, whatif = served
    for _ in range(3):
        assert client.post("/api/whatif", json=DELETE).status_code == 200
    assert whatif.found_last == 1
    world.load("pods", [gpt_pod("gpt-small-worker-0", "worker", "gpu-b1", "zone-b")])
    after = client.post("/api/whatif", json=DELETE)
    assert after.status_code == 200 and whatif.found_last == 2
    assert after.json() == _from_scratch(world, orjson.dumps(DELETE))


def test_the_token_is_required_when_set(token_api: httpx.Client) -> None:
    missing = token_api.post("/api/whatif", json=DELETE)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    wrong = token_api.post("/api/whatif", json=DELETE, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    right = token_api.post("/api/whatif", json=DELETE,
                           headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
    assert right.status_code == 200 and right.json()["jobs"]


BAD = {
    "empty": (b"", 'give a change: policy objects (YAML or JSON) to apply, or '
                   '{"delete": "KIND/NS/NAME"}'),
    "unknown field": (b'{"remove": "x"}',
                      "unknown field 'remove' (known: delete; or policy objects to apply)"),
    "move": (b'{"move": "train/gpt-small", "zone": "zone-b"}',
             "move: the agent does not move jobs in a what-if; run `zonemedic whatif --move "
             "NS/NAME --zone Z`"),
    "bad kind to delete": (b'{"delete": "Deployment/train/x"}',
                           "delete: cannot delete a 'Deployment' (kinds: NetworkPolicy, "
                           "CiliumNetworkPolicy, CiliumClusterwideNetworkPolicy, Pod)"),
    "bad target shape": (b'{"delete": "NetworkPolicy/train"}',
                         "delete: expected NetworkPolicy/NAMESPACE/NAME, got "
                         "'NetworkPolicy/train'"),
    "not a string": (b'{"delete": 3}', 'delete: expected "KIND/NS/NAME" or a list of them'),
    "absent object": (b'{"delete": "NetworkPolicy/train/nope"}',
                      "delete: no NetworkPolicy/train/nope in the cluster"),
    "absent pod": (b'{"delete": "Pod/train/nope"}', "delete: no Pod/train/nope in the cluster"),
    "not a policy": (b"kind: Pod\nmetadata: {name: x}\n",
                     "body: cannot apply a 'Pod': the what-if applies policies (NetworkPolicy, "
                     "CiliumNetworkPolicy, CiliumClusterwideNetworkPolicy)"),
    "no kind": (b"metadata: {name: x}\n", "body: item 0: missing or invalid `kind`"),
    "duplicate key": (b'{"delete": "a", "delete": "b"}', 'body: duplicate key "delete" in an object'),
}


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_bodies_are_400_naming_the_problem(
    case: tuple[bytes, str], open_api: httpx.Client
) -> None:
    body, message = case
    answer = open_api.post("/api/whatif", content=body)
    assert (answer.status_code, answer.json()) == (400, {"error": message})


def test_a_body_past_the_limit_is_413(open_api: httpx.Client) -> None:
    answer = open_api.post("/api/whatif", content=b"#" * (MAX_BODY + 1))
    assert answer.status_code == 413
    assert answer.json() == {"error": f"body too large ({MAX_BODY + 1} bytes, limit {MAX_BODY})"}


def test_before_the_caches_are_synced_it_is_503(open_api: httpx.Client, ready: list[bool]) -> None:
    ready[0] = False
    answer = open_api.post("/api/whatif", json=DELETE)
    assert (answer.status_code, answer.json()) == (
        503, {"error": "caches are not synced yet; retry later"})


def test_it_takes_no_get(open_api: httpx.Client) -> None:
    assert open_api.get("/api/whatif").status_code == 405
