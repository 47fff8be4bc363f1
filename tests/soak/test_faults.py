"""The soak's armed faults strike the write they name: `admission_refused` refuses the very patch
it records as struck, even when another patch of the agent's that arrived before the fault was
armed (a paused leader's held write) reaches admission while it is armed; armed for a group, it
refuses the real CREATE of the worker Job recreated from the plan (not its dry run, not the
original's re-creation), so the agent's remediation recreates the original and ends rolled back.
On the twin's API server as the agent's ServiceAccount, with the soak's `Faults` over a stand-in
of the rig."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from agent.model.lifecycle import IncidentStatus, RemediationActionKind
from agent.remediation.group_steps import RECREATED_ANNOTATION
from agent.settings import KubernetesSettings
from agent.sources.kubeapi import build_api_client
from agent.store.repository import IncidentStore
from agent.twin.access import Access, read_manifests
from agent.twin.cluster import TwinCluster
from agent.twin.faults import WriteRecord
from tests.remediation.harness import (
    GROUPS,
    LAB,
    NS,
    add_zone_b_workers,
    approved_incident,
    lab_job,
    quick,
    running_lab,
)
from tests.soak.faults import DENY_WEBHOOK, Faults
from tests.soak.rig import DEPLOY, Rig
from tests.support.waiting import wait


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Access, client.CustomObjectsApi, TwinCluster]]:
    documents = read_manifests([DEPLOY / "serviceaccount.yaml", DEPLOY / "rbac.yaml"],
                               namespace="zonemedic")  # fmt: skip
    with TwinCluster(quick("seed-blocked")) as cluster:
        access = cluster.serve_api_as(documents)
        path = access.kubeconfig(tmp_path / "agent.kubeconfig")
        api_client = build_api_client(KubernetesSettings(kubeconfig=str(path)))
        yield access, client.CustomObjectsApi(api_client), cluster


def relabel(jobs: client.CustomObjectsApi, value: str) -> Any:
    """The agent's ServiceAccount patches the seed PyTorchJob (a real write)."""
    return jobs.patch_namespaced_custom_object(
        "kubeflow.org", "v1", "ml", "pytorchjobs", "llm-finetune",
        {"metadata": {"labels": {"soak-test": value}}},
    )  # fmt: skip


def test_admission_refused_refuses_the_write_it_struck_not_one_held_since_before(
    served: tuple[Access, client.CustomObjectsApi, TwinCluster],
) -> None:
    access, jobs, cluster = served
    faults = Faults(cast(Rig, SimpleNamespace(access=access, cluster=cluster)), random.Random(7))
    faults.admissions = 1  # the next admission refusal armed is a PyTorchJob patch's
    arrived, release = threading.Event(), threading.Event()

    def hold(_record: WriteRecord) -> None:  # a paused leader: its write waits before admission
        arrived.set()
        release.wait(30)

    access.server.faults.on_write(hold, resource="pytorchjobs", verb="patch", landed=False)
    held: list[Any] = []
    thread = threading.Thread(target=lambda: held.append(_answer(lambda: relabel(jobs, "held"))))
    thread.start()
    try:
        wait(arrived.is_set, timeout=30, what="the held patch at the API server")
        faults.deck, faults.dealt = ["admission_refused"], True
        assert faults.inject() == "admission_refused"
    finally:
        release.set()
        thread.join(30)
    assert not isinstance(held[0], ApiException), held[0]  # it landed: not the struck write
    assert faults.struck == []
    refused = _answer(lambda: relabel(jobs, "struck"))
    assert isinstance(refused, ApiException) and refused.status == 403, refused
    assert DENY_WEBHOOK in str(refused.body)
    assert [(s.kind, s.name, s.verb) for s in faults.struck] == [
        ("admission_refused", "llm-finetune", "patch")]
    assert not isinstance(_answer(lambda: relabel(jobs, "after")), ApiException)  # once only


def _answer(call: Any) -> Any:
    try:
        return call()
    except ApiException as exc:
        return exc


def test_admission_refused_for_a_group_refuses_the_recreated_jobs_create_and_it_rolls_back(
    tmp_path: Path, store: IncidentStore
) -> None:
    """The lab's group with a second worker Job in zone-b: its remediation deletes that Job and
    creates it from the plan. Armed, the fault lets through the agent's dry runs and a CREATE
    that is not the planned Job's, refuses the planned CREATE (struck: create of that Job), and
    the remediation recreates the original and ends rolled back, the workers there again."""
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        assert lab.cluster.api is not None
        add_zone_b_workers(lab)
        incident_id = approved_incident(lab, store, ref=LAB)
        # the user the agent's client is served as (it created that Job)
        user = SimpleNamespace(name=lab.cluster.api.accounting.writes()[-1].user)
        rig = SimpleNamespace(access=SimpleNamespace(server=lab.cluster.api, user=user),
                              cluster=lab.cluster)
        faults = Faults(cast(Rig, rig), random.Random(7))
        faults.deck, faults.dealt = ["admission_refused"], True
        assert faults.inject() == "admission_refused"
        batch = client.BatchV1Api(lab.api.api_client)
        other = {"metadata": {"name": "not-the-plans", "annotations": {
            RECREATED_ANNOTATION: f"incident/{incident_id}/original"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "registry.example.com/x:1"}]}}}}  # fmt: skip
        batch.create_namespaced_job(NS, other)  # the agent's, but not a planned Job: let through
        assert faults.struck == []
        status = lab.remediator(store).run(incident_id)
        detail = store.get_incident(incident_id)
        reason = detail.events[-1].detail["reason"]
        assert status is IncidentStatus.ROLLED_BACK, reason
        assert reason.startswith("creating Job ml-lab/llm-workers-b was refused: "), reason
        assert DENY_WEBHOOK in reason, reason
        assert [(s.kind, s.namespace, s.name, s.verb) for s in faults.struck] == [
            ("admission_refused", NS, "llm-workers-b", "create")]
        dry_run = [a for a in detail.actions if a.kind is RemediationActionKind.DRY_RUN]
        assert [a.succeeded for a in dry_run] == [True]  # the dry runs were let through
        found = lab_job(lab, "llm-workers-b")
        assert found is not None  # the original is back
        assert found["metadata"]["annotations"][RECREATED_ANNOTATION] == (
            f"incident/{incident_id}/original")
        assert not faults.refuse_create and faults.armed is None  # struck once, disarmed
