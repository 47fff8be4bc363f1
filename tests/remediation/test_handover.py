"""The hand-over on the twin: each format, applied the way its owner applies it (`kubectl apply
--dry-run=server` of the manifest, `kubectl kustomize` of the base with the patch), yields the
fixed object; `zonemedic incidents patch` and the plan carry them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.cli import main
from agent.model.handover import HELM_HINT, KUSTOMIZATION, PatchFormat, SourceKind, files
from agent.model.incident import FindingRecord
from agent.model.lifecycle import RemediationActionKind
from agent.model.workload import JobKind
from agent.remediation.plan import LiveObjects, Plan, Target
from agent.remediation.planner import plan_remediation
from agent.remediation.preview_action import preview_action
from agent.remediation.template import TemplateState
from agent.twin.resources import lookup
from tests.remediation.builders import finding, group_live
from tests.remediation.harness import migrated_template, new_store
from tests.twin.apiserver_harness import Twin, running_twin

DEPLOYMENTS = lookup("deployments", group="apps")
JOBS = lookup("jobs", group="batch")


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[Twin]:
    with running_twin(tmp_path / "twin") as t:
        t.kubectl("create", "namespace", "ml")
        yield t


def manifest_of(obj: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in obj.items() if k != "status"}
    out["metadata"] = {k: v for k, v in obj["metadata"].items()
                       if k in ("name", "namespace", "labels")}
    if out["kind"] == "Job":
        out["spec"] = {k: v for k, v in out["spec"].items() if k != "selector"}
        labels = out["spec"]["template"]["metadata"]["labels"]
        out["spec"]["template"]["metadata"]["labels"] = {
            k: v for k, v in labels.items() if "controller-uid" not in k and "job-name" not in k}
    return out


def planned(twin: Twin) -> tuple[Plan, dict[str, dict[str, Any]]]:
    """The lab group applied to the twin with kubectl (the coordinator) or created by another
    client (the worker Job); planned from what the twin holds."""
    base = group_live()
    manifests = {w["metadata"]["name"]: manifest_of(w) for w in base.workloads
                 if w["metadata"]["name"] in ("coordinator", "workers-b")}
    # the worker Job is a Helm release's (as `helm install` labels it); the coordinator is not
    workers = manifests["workers-b"]["metadata"]
    workers.setdefault("labels", {})["app.kubernetes.io/managed-by"] = "Helm"
    workers.setdefault("annotations", {})["meta.helm.sh/release-name"] = "lab-workers"
    twin.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifests["coordinator"]))
    twin.kubectl("create", "-f", "-", stdin=yaml.safe_dump(manifests["workers-b"]))
    live_objects = [twin.store.get(DEPLOYMENTS, "coordinator", namespace="ml"),
                    twin.store.get(JOBS, "workers-b", namespace="ml")]
    workloads = [w for w in base.workloads if w["metadata"]["name"] not in manifests]
    live = LiveObjects(job=None, pods=base.pods, nodes=base.nodes, bound_pods=base.bound_pods,
                       workloads=[*workloads, *live_objects])
    plan = plan_remediation(finding(JobKind.GROUP, name="lab"), live, mirror_keys=("zone",))
    assert isinstance(plan, Plan), plan
    return plan, manifests


def server_dry_run(twin: Twin, text: str) -> list[dict[str, Any]]:
    out = json.loads(twin.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-",
                                  stdin=text).stdout)
    return list(out["items"]) if out.get("kind") == "List" else [out]


def target(plan: Plan, name: str) -> Target:
    return next(t for t in plan.targets if t.name == name)


def test_the_plan_hands_over_against_the_last_applied_manifest_or_the_live_object(
    twin: Twin,
) -> None:
    plan, _ = planned(twin)
    by_name = {h.name: h for h in plan.handovers}
    assert set(by_name) == {"coordinator", "workers-b"}
    assert by_name["coordinator"].source_kind is SourceKind.LAST_APPLIED
    assert by_name["workers-b"].source_kind is SourceKind.LIVE
    assert (by_name["coordinator"].helm, by_name["workers-b"].helm) == (None, "lab-workers")
    assert "managedFields" not in by_name["workers-b"].source["metadata"]
    assert Plan.from_dict(plan.to_dict()).handovers == plan.handovers


def test_the_fixed_manifest_applies_as_the_fixed_object(twin: Twin) -> None:
    plan, _ = planned(twin)
    coordinator = tuple(h for h in plan.handovers if h.name == "coordinator")
    made = files(coordinator, PatchFormat.MANIFEST)
    assert set(made) == {"deployment-coordinator.yaml"}  # not a Helm release's: no values hint
    text = made["deployment-coordinator.yaml"]
    (applied,) = server_dry_run(twin, text)
    assert target(plan, "coordinator").state_of(applied) is TemplateState.PLANNED
    live = twin.store.get(DEPLOYMENTS, "coordinator", namespace="ml")
    assert target(plan, "coordinator").state_of(live) is TemplateState.ORIGINAL, "a dry run"


@pytest.mark.parametrize("fmt", [PatchFormat.KUSTOMIZE, PatchFormat.JSON6902])
def test_kustomize_with_the_patch_builds_the_fixed_object(
    twin: Twin, tmp_path: Path, fmt: PatchFormat
) -> None:
    plan, manifests = planned(twin)
    (tmp_path / "k").mkdir()
    made = files(plan.handovers, fmt)
    for name, text in made.items():
        if name not in (KUSTOMIZATION, HELM_HINT):
            (tmp_path / "k" / name).write_text(text)
    resources = []
    for h in plan.handovers:  # the owner's manifests: what the patch was made against
        path = f"{h.kind.lower()}-{h.name}-base.yaml"
        (tmp_path / "k" / path).write_text(yaml.safe_dump(dict(h.source)))
        resources.append(path)
    entries = yaml.safe_load(made[KUSTOMIZATION])
    (tmp_path / "k" / KUSTOMIZATION).write_text(yaml.safe_dump({"resources": resources,
                                                                **entries}))
    built = twin.kubectl("kustomize", str(tmp_path / "k")).stdout
    objects = {o["metadata"]["name"]: o for o in server_dry_run(twin, built)}
    for name in ("coordinator", "workers-b"):
        assert target(plan, name).state_of(objects[name]) is TemplateState.PLANNED, name
    containers = [o["spec"]["template"]["spec"]["containers"]
                  for o in (manifests["coordinator"], objects["coordinator"])]
    assert containers[0] == containers[1], "nothing but the fix changed"


def test_incidents_patch_prints_each_format(twin: Twin, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    plan, _ = planned(twin)
    store, url = new_store(migrated_template(tmp_path), tmp_path)
    try:
        now = datetime(2026, 12, 3, 10, tzinfo=UTC)
        split = finding(JobKind.GROUP, name="lab")
        doc = {**split.to_dict(), "job": {"kind": "Group", "namespace": "ml", "name": "lab"}}
        incident = store.record_finding(FindingRecord.from_finding(doc, cluster="prod",
                                                                   detected_at=now)).incident
        recorded = preview_action(plan, zones=split.zones, target_zone="zone-a")
        store.record_action(incident.id, RemediationActionKind.PLAN, now=now, actor="zonemedic",
                            payload=recorded.payload, message=recorded.message)
    finally:
        store.close()
    assert main(["incidents", "patch", str(incident.id), "--format", "json6902", "--output",
                 "json", "--database", url]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["format"] == "json6902" and KUSTOMIZATION in out["files"]
    assert {o["name"]: o["source"] for o in out["objects"]} == {"coordinator": "last-applied",
                                                                "workers-b": "live"}
    assert main(["incidents", "patch", str(incident.id), "--database", url]) == 0
    text = capsys.readouterr().out
    assert "# file: zonemedic-deployment-coordinator.yaml" in text
    assert "helm-values-hint.yaml" in text and "topology.kubernetes.io/zone: zone-a" in text
    # the hint for the Helm release's Job only: the coordinator is kubectl apply's
    hint = text[text.index("# file: helm-values-hint.yaml"):]
    assert "# Job ml/workers-b" in hint and "release lab-workers's chart" in hint
    assert "Deployment ml/coordinator" not in hint
    assert main(["incidents", "patch", str(incident.id), "--format", "helm",
                 "--database", url]) == 2
    assert "--format: expected one of manifest, kustomize, json6902" in capsys.readouterr().err
