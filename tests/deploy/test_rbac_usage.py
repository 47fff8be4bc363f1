"""The shipped ClusterRole against what the agent really does: every Kubernetes request of a
representative end-to-end run, made as the agent's ServiceAccount with exactly deploy/base's RBAC,
is audited by the twin (user, verb, API group, resource, allowed) and compared with the rules.

The run: the full agent (`Agent`, leader election on its Lease in `zonemedic`, watches, sweep, the
zone-split playbook, the remediation executor, Slack through the fake Slack) on `seed-blocked`,
approved by a click and remediated to `resolved`; then the generic-group remediation of `lab` with
a worker Job outside the zone (Deployment rollout, Job recreated) run by the Remediator, each
other Kubeflow kind, and a TrainJob (the Trainer's CRD read, its own runtime patch) and a JobSet;
the agent on the Kueue scenario (Kueue's objects read, the split job diagnosed through them) and
that job re-placed through Kueue by the Remediator (its Workload read, deactivated, deleted). Nothing it
used may be outside the rules (no 403 either), and every (verb, group, resource) the rules grant
must have been used: a grant nobody uses is a grant to remove."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.fakes.slack import FakeSlack
from agent.model.incident import IncidentQuery
from agent.model.job import JobRef
from agent.model.lifecycle import IncidentStatus
from agent.model.workload import JobKind
from agent.settings import AdmissionSettings, Settings
from agent.twin.faults import AuditEntry
from agent.twin.resources import lookup
from agent.twin.scenario import Scenario
from tests.remediation.harness import (
    FAST,
    GROUPS,
    LAB,
    NS,
    ZONE,
    approved_incident,
    bound,
    deploy_rbac,
    migrated_template,
    new_store,
    pods,
    quick,
    running_lab,
)
from tests.support.agent_rig import approve_from_slack, running_agent
from tests.support.waiting import wait

Triple = tuple[str, str, str]  # verb, API group, resource[/subresource]


def granted(documents: Iterable[Mapping[str, Any]]) -> set[Triple]:
    """Every (verb, group, resource) the Roles and ClusterRoles grant (no wildcards allowed)."""
    out: set[Triple] = set()
    for doc in documents:
        if doc.get("kind") not in ("Role", "ClusterRole"):
            continue
        for rule in doc.get("rules") or ():
            for part in ("verbs", "apiGroups", "resources"):
                assert "*" not in rule[part], f"a wildcard in {doc['metadata']['name']}: {rule}"
            out |= {(verb, group, resource) for verb in rule["verbs"]
                    for group in rule["apiGroups"] for resource in rule["resources"]}
    return out


def used(entries: Iterable[AuditEntry], user: str) -> dict[Triple, bool]:
    out: dict[Triple, bool] = {}
    for e in entries:
        if e.user != user:
            continue
        resource = f"{e.resource}/{e.subresource}" if e.subresource else e.resource
        key = (e.verb, e.group, resource)
        out[key] = out.get(key, True) and e.allowed
    return out


def _admission(settings: Settings) -> Settings:
    """The admission webhook on with the agent's own certificate (its CA patched into its own
    configuration at start: the webhook's one write), on a free loopback port."""
    return replace(settings, admission=AdmissionSettings(enabled=True, host="127.0.0.1", port=0))


def agent_run(tmp_path: Path) -> tuple[list[AuditEntry], str]:
    """The full agent on seed-blocked as the ServiceAccount, approved from Slack, resolved; its
    admission webhook on (its own certificate: the CA patched in at start)."""
    with FakeSlack(users={"U1": "alice"}) as slack, running_agent(
        tmp_path, "seed-blocked", slack=slack, rbac=True, executor=True, settings_change=_admission,
    ) as rig:
        store = rig.store
        wait(rig.agent.elector.is_leader, timeout=60, what="the lease")
        _, incident = approve_from_slack(rig, slack, timeout=60)
        wait(lambda: store.get_incident(incident).incident.status is IncidentStatus.RESOLVED,
             timeout=60, what="the incident resolved")
    # read once the agent has stopped: its stop (the lease released) is audited too
    assert rig.access is not None and rig.user is not None
    return list(rig.access.server.accounting.audited()), rig.user


def lab_run(tmp_path: Path) -> list[AuditEntry]:
    """The generic group `lab` remediated as the ServiceAccount: the coordinator's Deployment
    rolled out and a worker Job outside the zone recreated."""
    store, _ = new_store(migrated_template(tmp_path), tmp_path)
    try:
        with running_lab(tmp_path, "lab", diagnosis=GROUPS, rbac=True) as lab:
            admin = lab.cluster.store  # the test's own setup goes to the store, not through RBAC
            # the lab's own pods placed first: a worker of `llm-workers` (nodeSelector gpu=true)
            # still pending when the zone-b GPU node appears may land there, and the group then
            # has no single zone that allows every flow
            assert lab.cluster.wait_until(lambda: bound(lab) == {"zone-a": 4, "zone-b": 1},
                                          timeout=60), bound(lab)
            gpu_node = {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": "gpu-b-0", "labels": {ZONE: "zone-b", "gpu": "true",
                                              "kubernetes.io/hostname": "gpu-b-0"}},
                "spec": {}, "status": {"allocatable": {"cpu": "48", "memory": "512Gi", "pods": "110",
                                                       "nvidia.com/gpu": "8"},
                                       "capacity": {"cpu": "48", "memory": "512Gi", "pods": "110",
                                                    "nvidia.com/gpu": "8"}}}  # fmt: skip
            admin.create(lookup("nodes"), gpu_node)
            admin.create(lookup("jobs", group="batch"), {
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "llm-workers-b", "namespace": NS,
                             "labels": {"app": "llm-pretrain"}},
                "spec": {"parallelism": 2, "completions": 2, "template": {
                    "metadata": {"labels": {"app": "llm-pretrain", "role": "worker",
                                            "zone": "zone-b"}},
                    "spec": {"restartPolicy": "OnFailure",
                             "nodeSelector": {"gpu": "true", ZONE: "zone-b"},
                             "containers": [{"name": "main", "image": "registry.example.com/x:1",
                                             "resources": {
                                                 "requests": {"cpu": "4", "memory": "16Gi",
                                                              "nvidia.com/gpu": "1"},
                                                 "limits": {"nvidia.com/gpu": "1"}}}]}}},
            }, namespace=NS)
            assert lab.cluster.wait_until(lambda: len(pods(lab)) == 7 and all(
                p["spec"].get("nodeName") for p in pods(lab)), timeout=15)
            incident_id = approved_incident(lab, store, ref=LAB)
            settings = replace(FAST, schedule_timeout=timedelta(seconds=1.5))
            status = lab.remediator(store, settings=settings).run(incident_id)
            assert status is IncidentStatus.RESOLVED
            assert lab.cluster.api is not None
            return list(lab.cluster.api.accounting.audited())
    finally:
        store.close()


# The seed-blocked job rewritten as each other Kubeflow kind: (kind, specs key, replica types for
# the seed's Master and Worker, the kind's port name and number).
OTHER_KINDS = {
    JobKind.TF: ("tfReplicaSpecs", "Chief", "Worker", "tfjob-port", 2222),
    JobKind.XGBOOST: ("xgbReplicaSpecs", "Master", "Worker", "xgboostjob-port", 9999),
    JobKind.PADDLE: ("paddleReplicaSpecs", "Master", "Worker", "master", 36543),
    JobKind.MPI: ("mpiReplicaSpecs", "Launcher", "Worker", "ssh", 22),
    JobKind.JAX: ("jaxReplicaSpecs", None, "Worker", "jaxjob-port", 6666),
}


def as_kind(kind: JobKind) -> Scenario:
    """seed-blocked with its PyTorchJob rewritten as `kind` (same pods, zones and policies)."""
    key, master, worker, port_name, port = OTHER_KINDS[kind]
    base = quick("seed-blocked")
    objects = []
    for obj in base.objects:
        if obj.get("kind") != "PyTorchJob":
            objects.append(obj)
            continue
        job = copy.deepcopy(obj)
        job["kind"] = kind.value
        specs = job["spec"].pop("pytorchReplicaSpecs")
        renamed = {}
        if master is not None:
            renamed[master] = specs["Master"]
        else:  # workers only: GPU-less ones that tolerate the GPU taint spread over both zones
            specs["Worker"]["replicas"] += specs["Master"]["replicas"]
            for container in specs["Worker"]["template"]["spec"]["containers"]:
                container["resources"] = {"requests": {"cpu": "4", "memory": "8Gi"}}
        renamed[worker] = specs["Worker"]
        for spec in renamed.values():
            for container in spec["template"]["spec"]["containers"]:
                container["ports"] = [{"name": port_name, "containerPort": port}]
        job["spec"][key] = renamed
        objects.append(job)
    return replace(base, objects=objects)


def kind_run(tmp_path: Path, kind: JobKind) -> list[AuditEntry]:
    """seed-blocked as another Kubeflow kind, remediated by the Remediator as the
    ServiceAccount (its re-reads and patches of that kind)."""
    store, _ = new_store(migrated_template(tmp_path), tmp_path)
    try:
        with running_lab(tmp_path, as_kind(kind), rbac=True) as lab:
            ref = JobRef(kind, "ml", "llm-finetune")
            incident_id = approved_incident(lab, store, ref=ref)
            status = lab.remediator(store).run(incident_id)
            detail = store.get_incident(incident_id)
            assert status is IncidentStatus.RESOLVED, [dict(e.detail) for e in detail.events]
            assert lab.cluster.api is not None
            return list(lab.cluster.api.accounting.audited())
    finally:
        store.close()


def kueue_run(tmp_path: Path) -> tuple[list[AuditEntry], str]:
    """The full agent on the Kueue scenario as the ServiceAccount: Kueue's queues, flavors,
    Topologies and Workloads listed and watched, the split job diagnosed through them."""
    with FakeSlack(users={"U1": "alice"}) as slack, running_agent(
        tmp_path, "kueue", slack=slack, rbac=True, leader_election=False
    ) as rig:
        store = rig.store
        wait(lambda: any(i.diagnosis.get("kueue") for i in (
            store.get_incident(s.id) for s in store.list_incidents(IncidentQuery(limit=5)).incidents
        )), timeout=60, what="the Kueue job's incident")  # fmt: skip
    assert rig.access is not None and rig.user is not None
    return list(rig.access.server.accounting.audited()), rig.user


def kueue_fix_run(tmp_path: Path) -> list[AuditEntry]:
    """The Kueue job of the Kueue scenario re-placed through Kueue by the Remediator as the
    ServiceAccount (its Workload read, deactivated and deleted, the job's templates annotated)."""
    store, _ = new_store(migrated_template(tmp_path), tmp_path)
    try:
        with running_lab(tmp_path, "kueue", rbac=True) as lab:
            ref = JobRef(JobKind.PYTORCH, "ml", "llm-finetune")
            incident_id = approved_incident(lab, store, ref=ref)
            status = lab.remediator(store).run(incident_id)
            assert status is IncidentStatus.RESOLVED
            assert lab.cluster.api is not None
            return list(lab.cluster.api.accounting.audited())
    finally:
        store.close()


# A TrainJob (the Trainer's CRD read, its own runtime patch) and a JobSet (its templates), each
# remediated by the Remediator as the ServiceAccount.
TRAINER_RUNS = [("trainjob", JobRef(JobKind.TRAINJOB, "ml", "llm-pretrain")),
                ("jobset", JobRef(JobKind.JOBSET, "ml", "pytorch-ddp"))]  # fmt: skip


def trainer_run(tmp_path: Path, scenario: str, ref: JobRef) -> list[AuditEntry]:
    store, _ = new_store(migrated_template(tmp_path), tmp_path)
    try:
        with running_lab(tmp_path, scenario, rbac=True) as lab:
            incident_id = approved_incident(lab, store, ref=ref)
            status = lab.remediator(store).run(incident_id)
            detail = store.get_incident(incident_id)
            assert status is IncidentStatus.RESOLVED, [dict(e.detail) for e in detail.events]
            assert lab.cluster.api is not None
            return list(lab.cluster.api.accounting.audited())
    finally:
        store.close()


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[Triple, bool], set[Triple]]:
    entries, user = agent_run(tmp_path_factory.mktemp("agent"))
    queued, queued_user = kueue_run(tmp_path_factory.mktemp("kueue"))
    assert queued_user == user
    entries += queued
    entries += kueue_fix_run(tmp_path_factory.mktemp("kueue-fix"))
    entries += lab_run(tmp_path_factory.mktemp("lab"))
    for kind in OTHER_KINDS:
        entries += kind_run(tmp_path_factory.mktemp(kind.value), kind)
    for scenario, ref in TRAINER_RUNS:
        entries += trainer_run(tmp_path_factory.mktemp(scenario), scenario, ref)
    return used(entries, user), granted(deploy_rbac())


def test_nothing_used_is_outside_the_cluster_role(
    audit: tuple[dict[Triple, bool], set[Triple]],
) -> None:
    seen, rules = audit
    denied = sorted(t for t, allowed in seen.items() if not allowed)
    assert denied == [], f"requests RBAC refused: {denied}"
    assert sorted(set(seen) - rules) == []


def test_nothing_granted_is_unused(audit: tuple[dict[Triple, bool], set[Triple]]) -> None:
    seen, rules = audit
    unused = sorted(rules - set(seen))
    assert unused == [], "\n".join(map(str, unused)) + "\nused: " + "\n".join(map(str, sorted(seen)))
