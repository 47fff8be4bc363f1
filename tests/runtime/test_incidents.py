"""The incidents API over the real store (SQLite, migrated by Alembic), through the HTTP app."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from agent.approval.approvers import Authority
from agent.model.handover import Handover, SourceKind
from agent.model.incident import FindingRecord
from agent.model.lifecycle import EventKind, RemediationActionKind
from agent.runtime.http import build_app
from agent.runtime.incidents import StoreIncidents
from agent.runtime.metrics import AgentMetrics
from agent.runtime.server import HttpServer
from agent.settings import Settings
from agent.store.migrate import upgrade_on_start
from agent.store.repository import IncidentStore

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def finding(name: str, verdict: str, ns: str = "ml") -> dict[str, object]:
    return {
        "job": {"kind": "PyTorchJob", "namespace": ns, "name": name},
        "verdict": verdict,
        "zones": {"a": 3, "b": 1},
        "target_zone": "a" if verdict.startswith("zone_split") else None,
    }


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[httpx.Client, IncidentStore]]:
    settings = Settings(data_dir=str(tmp_path))
    settings = replace(settings, database=replace(settings.database, url=f"sqlite:///{tmp_path / 'zm.db'}"))
    store = upgrade_on_start(settings)
    for i, (name, verdict, ns) in enumerate(
        [("resnet", "zone_split_blocked", "ml"), ("bert", "policy_blocked", "nlp"), ("old", "zone_split_degraded", "ml")]
    ):
        store.record_finding(
            FindingRecord.from_finding(
                finding(name, verdict, ns), cluster="prod", detected_at=NOW - timedelta(days=10 * i)
            )
        )
    app = build_app(
        metrics=AgentMetrics(),
        readiness=lambda: {"database": store.ping()},
        incidents=StoreIncidents(store, cluster="prod", now=lambda: NOW, authority=Authority()),
    )
    server = HttpServer(app, host="127.0.0.1", port=0).start()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            yield c, store
    finally:
        server.stop()
        store.close()


@pytest.fixture
def client(served: tuple[httpx.Client, IncidentStore]) -> httpx.Client:
    return served[0]


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({}, ["resnet", "bert", "old"]),
        ({"job": "ml/resnet"}, ["resnet"]),
        ({"namespace": "ml"}, ["resnet", "old"]),
        ({"verdict": "policy_blocked"}, ["bert"]),
        ({"status": "open"}, ["resnet", "bert", "old"]),
        ({"since": "7d"}, ["resnet"]),
        ({"limit": "2"}, ["resnet", "bert"]),
    ],
)
def test_list_filters(client: httpx.Client, params: dict[str, str], names: list[str]) -> None:
    response = client.get("/api/incidents", params=params)
    assert response.status_code == 200, response.text
    assert [i["name"] for i in response.json()["incidents"]] == names


def test_show_and_errors(client: httpx.Client) -> None:
    first = client.get("/api/incidents", params={"job": "ml/resnet"}).json()["incidents"][0]
    detail = client.get(f"/api/incidents/{first['id']}").json()
    assert detail["incident"]["verdict"] == "zone_split_blocked"
    assert detail["diagnosis"]["zones"] == {"a": 3, "b": 1}
    assert [e["kind"] for e in detail["events"]] == ["detected"]
    assert client.get("/api/incidents/999").status_code == 404
    bad = client.get("/api/incidents", params={"status": "sleeping"})
    assert bad.status_code == 400 and "status: unknown value 'sleeping'" in bad.json()["error"]
    assert client.get("/readyz").json()["checks"] == {"database": True}


def test_detail_carries_the_proposed_fix(served: tuple[httpx.Client, IncidentStore]) -> None:
    client, store = served
    listed = {i["name"]: i["id"] for i in client.get("/api/incidents").json()["incidents"]}
    assert client.get(f"/api/incidents/{listed['bert']}").json()["proposed_fix"] is None
    plan = {"diff": "--- live\n+++ planned\n+zone: a", "target_zone": "a", "pods": 4,
            "preconditions": {"uid": "u1", "resource_version": "9", "verdict": "zone_split_blocked",
                              "placement": {"resnet-master-0": "b"}}}
    store.record_action(listed["resnet"], RemediationActionKind.PLAN, now=NOW, actor="zonemedic",
                        payload={"preview": True, "plan": plan, "zones": {"a": 3, "b": 1}},
                        message="co-locate the job in zone a", event=EventKind.PLAN_PREVIEWED)
    detail = client.get(f"/api/incidents/{listed['resnet']}").json()
    fix = detail["proposed_fix"]
    assert (fix["summary"], fix["diff"], fix["preview"], fix["refusal"]) == (
        "co-locate the job in zone a", plan["diff"], True, None)
    assert fix["preconditions"]["resource_version"] == "9" and fix["pods"] == 4
    assert detail["events"][-1]["kind"] == "plan_previewed"


def test_the_patch_route_hands_the_fix_over_in_each_format(
    served: tuple[httpx.Client, IncidentStore],
) -> None:
    client, store = served
    listed = {i["name"]: i["id"] for i in client.get("/api/incidents").json()["incidents"]}
    source = {"apiVersion": "apps/v1", "kind": "Deployment",
              "metadata": {"name": "coord", "namespace": "ml"},
              "spec": {"template": {"spec": {"nodeSelector": {"zone": "b"}}}}}
    handover = Handover("apps/v1", "Deployment", "ml", "coord",
                        {"spec": {"template": {"spec": {"nodeSelector": {"zone": "a"}}}}},
                        source, SourceKind.LAST_APPLIED)
    store.record_action(listed["resnet"], RemediationActionKind.PLAN, now=NOW, actor="zonemedic",
                        payload={"preview": True, "plan": {"diff": "d", "target_zone": "a",
                                                           "handovers": [handover.to_dict()]}},
                        message="co-locate", event=EventKind.PLAN_PREVIEWED)
    route = f"/api/incidents/{listed['resnet']}/patch"
    manifest = client.get(route, params={"format": "manifest"}).json()
    (fixed,) = [t for n, t in manifest["files"].items() if n.startswith("deployment-")]
    assert "zone: a" in fixed and "zone: b" not in fixed
    ops = client.get(route, params={"format": "json6902"}).json()["files"]
    assert "op: replace" in ops["zonemedic-deployment-coord.yaml"]
    default = client.get(route).json()
    assert default["format"] == "kustomize" and "kustomization.yaml" in default["files"]
    assert default["objects"] == [{"kind": "Deployment", "namespace": "ml", "name": "coord",
                                   "source": "last-applied"}]
    bad = client.get(route, params={"format": "helm"})
    assert bad.status_code == 400 and "format: unknown value 'helm'" in bad.json()["error"]
    assert client.get(f"/api/incidents/{listed['bert']}/patch").status_code == 404
    assert client.get("/api/incidents/999/patch").status_code == 404
