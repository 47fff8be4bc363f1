"""The workload-kind table: its readers along a descriptor's paths (table-driven), the lookups,
and the table checked against the twin, which plays the API server and the operators with its own
tables (a descriptor that names a plural, field or port the operators do not use fails here)."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.workload import (
    BATCH_JOB,
    DEPLOYMENT,
    JAX,
    MPI,
    OWNERS,
    PYTORCH,
    REPLICA_SET,
    TF,
    WORKLOADS,
    Conditions,
    JobKind,
    OwnerMove,
    PodCount,
    PodTemplates,
    Suspension,
    TemplateLayout,
    dig,
    launched_kind,
    managed_by_paths,
    nest,
    own_managers,
    owner_kind,
    workload,
    workload_named,
    workload_of_operator,
    workload_served,
)
from agent.twin.operator_kinds import KINDS as TWIN_TRAINING_KINDS
from agent.twin.resources import lookup

# JobSet's layout (jobset.x-k8s.io/v1alpha2), as the next kinds will describe it
REPLICATED_JOBS = PodTemplates(TemplateLayout.REPLICATED_JOBS, ("spec", "replicatedJobs"))
JOBSET_SUSPENSION = Suspension(
    suspend=("spec", "suspend"), managed_by=("spec", "managedBy"),
    own_managers=frozenset({"jobset.sigs.k8s.io/jobset-controller"}),
    mutable=frozenset({"metadata.labels", "metadata.annotations", "spec.nodeSelector",
                       "spec.tolerations", "spec.schedulingGates"}),
)  # fmt: skip


def test_every_training_kind_has_one_descriptor_and_names_are_unique() -> None:
    assert [w.kind for w in WORKLOADS] == [k for k in JobKind if k is not JobKind.GROUP]
    assert len({(w.group, w.plural) for w in WORKLOADS}) == len(WORKLOADS)
    assert len({o.kind for o in OWNERS}) == len({(o.group, o.plural) for o in OWNERS}) == len(OWNERS)
    with pytest.raises(KeyError):
        workload(JobKind.GROUP)


@pytest.mark.parametrize(
    ("templates", "obj", "expected"),
    [
        (PYTORCH.templates, {"spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1},
                                                              "Worker": {"replicas": 2}}}}, 3),
        (PYTORCH.templates, {"spec": {"pytorchReplicaSpecs": {"Master": {}, "Worker": {"replicas": 4}}}}, 5),
        (MPI.templates, {"spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1},
                                                      "Worker": {"replicas": 8}}}}, 9),
        (PYTORCH.templates, {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "2"}}}}, None),
        (PYTORCH.templates, {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 0}}}}, 0),
        (PYTORCH.templates, {"spec": {"pytorchReplicaSpecs": {"Worker": None}}}, None),  # no template
        (PYTORCH.templates, {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2}}}}, None),  # not its field
        (PYTORCH.templates, {}, None),
        (DEPLOYMENT.templates, {"spec": {"replicas": 3, "template": {}}}, 3),
        (DEPLOYMENT.templates, {"spec": {"template": {}}}, 1),
        (DEPLOYMENT.templates, {"spec": {"replicas": True, "template": {}}}, None),
        (DEPLOYMENT.templates, {"spec": {"replicas": 3}}, None),  # no template
        (REPLICA_SET.templates, {"spec": {"replicas": 2, "template": {}}}, 2),
        (BATCH_JOB.templates, {"spec": {"parallelism": 4, "template": {}}}, 4),
        (BATCH_JOB.templates, {"spec": {"parallelism": 4, "completions": 2, "template": {}}}, 2),
        (BATCH_JOB.templates, {"spec": {"template": {}}}, 1),
        (BATCH_JOB.templates, {"spec": {"parallelism": -1, "template": {}}}, None),
        (BATCH_JOB.templates, {"spec": {"completions": "x", "template": {}}}, None),
        # JobSet: replicas x the Job template's parallelism (at most its completions)
        (REPLICATED_JOBS, {"spec": {"replicatedJobs": [
            {"name": "launcher", "template": {"spec": {"template": {}}}},
            {"name": "node", "replicas": 2,
             "template": {"spec": {"parallelism": 4, "completions": 4, "template": {}}}},
        ]}}, 9),
        (REPLICATED_JOBS, {"spec": {"replicatedJobs": [
            {"name": "node", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 1}}},
        ]}}, 2),
        (REPLICATED_JOBS, {"spec": {"replicatedJobs": [{"name": "node", "replicas": -2}]}}, None),
        (REPLICATED_JOBS, {"spec": {"replicatedJobs": "node"}}, None),
    ],
)
def test_expected_pods(templates: PodTemplates, obj: dict[str, Any], expected: int | None) -> None:
    assert templates.expected_pods(obj) == expected


def test_templates_name_their_replica_and_path() -> None:
    job = {"spec": {"tfReplicaSpecs": {"Chief": {"template": {"metadata": {"labels": {"a": "1"}}}},
                                       "Worker": {"replicas": 2, "template": {}}, "PS": "bad"}}}
    assert [(t.replica, t.path, dict(t.template), t.count) for t in TF.templates.templates(job)] == [
        ("Chief", ("spec", "tfReplicaSpecs", "Chief", "template"), {"metadata": {"labels": {"a": "1"}}}, 1),
        ("Worker", ("spec", "tfReplicaSpecs", "Worker", "template"), {}, 2),
    ]
    jobset = {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"x": 1}}}}]}}
    (node,) = REPLICATED_JOBS.templates(jobset)
    assert (node.replica, node.path, dict(node.template)) == (
        "node", ("spec", "replicatedJobs", 0, "template", "spec", "template"), {"x": 1})
    assert dig(jobset, node.path) == {"x": 1}
    (single,) = DEPLOYMENT.templates.templates({"spec": {"template": {"y": 2}}})
    assert (single.replica, single.path, single.count) == ("template", ("spec", "template"), 1)
    assert PYTORCH.templates.field == "pytorchReplicaSpecs"
    assert BATCH_JOB.templates.count is PodCount.PARALLELISM


@pytest.mark.parametrize(
    ("suspension", "obj", "suspended", "manager"),
    [
        (PYTORCH.suspension, {"spec": {"runPolicy": {"suspend": True, "managedBy": "kueue.x-k8s.io/multikueue"}}},
         True, "kueue.x-k8s.io/multikueue"),
        (PYTORCH.suspension, {"spec": {"suspend": True, "managedBy": "x"}}, False, None),  # not its place
        (PYTORCH.suspension, {"spec": {"runPolicy": "bad"}}, False, None),
        (JOBSET_SUSPENSION, {"spec": {"suspend": True, "managedBy": "kueue.x-k8s.io/multikueue"}},
         True, "kueue.x-k8s.io/multikueue"),
        (BATCH_JOB.suspension, {"spec": {"suspend": False}}, False, None),
    ],
)
def test_suspension_reads_where_the_kind_keeps_it(
    suspension: Suspension | None, obj: dict[str, Any], suspended: bool, manager: str | None
) -> None:
    assert suspension is not None
    assert (suspension.suspended(obj), suspension.manager(obj)) == (suspended, manager)


def test_suspend_patches_and_what_may_change_while_suspended() -> None:
    assert PYTORCH.suspension.patch(True) == {"spec": {"runPolicy": {"suspend": True}}}
    assert JOBSET_SUSPENSION.patch(False) == {"spec": {"suspend": False}}
    assert nest(("a",), 1) == {"a": 1}
    # Kubeflow operators create pods from the template as it is on resume: any field may change
    assert all(w.suspension.may_change("spec.affinity") for w in WORKLOADS)
    assert JOBSET_SUSPENSION.may_change("spec.nodeSelector")
    assert not JOBSET_SUSPENSION.may_change("spec.affinity")


@pytest.mark.parametrize(
    ("conditions", "status", "finished"),
    [
        (PYTORCH.conditions, [{"type": "Running", "status": "True"}], None),
        (PYTORCH.conditions, [{"type": "Suspended", "status": "True"}, {"type": "Failed", "status": "True"}],
         "Failed"),
        (PYTORCH.conditions, [{"type": "Succeeded", "status": "False"}], None),
        (BATCH_JOB.conditions, [{"type": "Complete", "status": "True"}], "Complete"),
        (BATCH_JOB.conditions, [{"type": "Succeeded", "status": "True"}], None),
        (Conditions(suspended=None, finished=()), [{"type": "Failed", "status": "True"}], None),
        (PYTORCH.conditions, ["bad"], None),
    ],
)
def test_finished_conditions(conditions: Conditions, status: list[Any], finished: str | None) -> None:
    assert conditions.finished_as({"status": {"conditions": status}}) == finished


def test_lookups() -> None:
    assert workload_served("kubeflow.org", "v2beta1", "MPIJob") is MPI
    assert workload_served("kubeflow.org", "v2beta1", "PyTorchJob") is None
    assert workload_served("example.com", "v1", "PyTorchJob") is None
    assert workload_named("JAXJob") is JAX and workload_named("Job") is None
    assert workload_of_operator("mpi-operator") is MPI and workload_of_operator("x") is None
    assert launched_kind() is MPI and MPI.launcher_job == "-launcher"
    assert MPI.api_versions == ("kubeflow.org/v1", "kubeflow.org/v2beta1")
    assert owner_kind("ReplicaSet") is REPLICA_SET and REPLICA_SET.move is OwnerMove.THROUGH_OWNER
    assert owner_kind(REPLICA_SET.through or "") is DEPLOYMENT
    assert managed_by_paths() == (("spec", "runPolicy", "managedBy"), ("spec", "managedBy"))
    assert own_managers() == {"kubeflow.org/training-operator", "kubeflow.org/mpi-operator",
                              "kubernetes.io/job-controller"}


@pytest.mark.parametrize("kind", WORKLOADS, ids=lambda w: w.kind.value)
def test_descriptor_agrees_with_the_twins_api_server_and_operator(kind: Any) -> None:
    for version in kind.versions:
        served = lookup(kind.plural, group=kind.group, version=version)
        assert (served.kind, served.plural, served.version) == (kind.kind.value, kind.plural, version)
        operator = TWIN_TRAINING_KINDS[(version, kind.plural)]
        assert operator.kind == kind.kind.value
        assert operator.specs_field == kind.templates.field
        assert (operator.port_name, operator.default_port) == (
            kind.coordinator.port_name, kind.coordinator.default_port)
        assert operator.operator_name in kind.operators
        assert {t.lower() for t in kind.coordinator.replica_types} <= {
            t.lower() for t in operator.replica_types}


@pytest.mark.parametrize("owner", OWNERS, ids=lambda o: o.kind)
def test_owner_kinds_are_served_by_the_twin(owner: Any) -> None:
    served = lookup(owner.plural, group=owner.group, version=owner.version)
    assert (served.kind, served.plural) == (owner.kind, owner.plural)
