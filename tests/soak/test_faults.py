"""The soak's armed faults strike the write they name: `admission_refused` refuses the very patch
it records as struck, even when another patch of the agent's that arrived before the fault was
armed (a paused leader's held write) reaches admission while it is armed. On the twin's API
server as the agent's ServiceAccount, with the soak's `Faults` over a stand-in of the rig."""

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

from agent.settings import KubernetesSettings
from agent.sources.kubeapi import build_api_client
from agent.twin.access import Access, read_manifests
from agent.twin.cluster import TwinCluster
from agent.twin.faults import WriteRecord
from tests.remediation.harness import quick
from tests.soak.faults import DENY_WEBHOOK, Faults
from tests.soak.rig import DEPLOY, Rig
from tests.support.waiting import wait


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Access, client.CustomObjectsApi]]:
    documents = read_manifests([DEPLOY / "serviceaccount.yaml", DEPLOY / "rbac.yaml"],
                               namespace="zonemedic")  # fmt: skip
    with TwinCluster(quick("seed-blocked")) as cluster:
        access = cluster.serve_api_as(documents)
        path = access.kubeconfig(tmp_path / "agent.kubeconfig")
        api_client = build_api_client(KubernetesSettings(kubeconfig=str(path)))
        yield access, client.CustomObjectsApi(api_client)


def relabel(jobs: client.CustomObjectsApi, value: str) -> Any:
    """The agent's ServiceAccount patches the seed PyTorchJob (a real write)."""
    return jobs.patch_namespaced_custom_object(
        "kubeflow.org", "v1", "ml", "pytorchjobs", "llm-finetune",
        {"metadata": {"labels": {"soak-test": value}}},
    )  # fmt: skip


def test_admission_refused_refuses_the_write_it_struck_not_one_held_since_before(
    served: tuple[Access, client.CustomObjectsApi],
) -> None:
    access, jobs = served
    faults = Faults(cast(Rig, SimpleNamespace(access=access)), random.Random(7))
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
