"""The workload-kind table: its readers along a descriptor's paths (table-driven), the lookups,
and the table checked against the twin, which plays the API server and the operators with its own
tables (a descriptor that names a plural, field or port the operators do not use fails here)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from agent.model.descriptor import (
    Conditions,
    OwnerMove,
    PodCount,
    PodTemplates,
    Suspension,
    dig,
    env_port,
    nest,
)
from agent.model.workload import (
    BATCH_JOB,
    DEPLOYMENT,
    INITIALIZERS,
    JAX,
    JOBSET,
    KUEUE,
    KUEUE_GROUP,
    KUEUE_KINDS,
    MPI,
    OWNERS,
    PYTORCH,
    REPLICA_SET,
    TF,
    TRAINING_RUNTIMES,
    TRAINJOB,
    WORKLOADS,
    JobKind,
    KueueKindName,
    kueue_kind_served,
    launched_kind,
    managed_by_paths,
    materialising,
    own_managers,
    owner_kind,
    workload,
    workload_named,
    workload_of_operator,
    workload_served,
)
from agent.twin import crds as twin_crds
from agent.twin import jobset_children as twin_jobset
from agent.twin import jobset_gang as twin_gang
from agent.twin import kueue_labels as twin_kueue
from agent.twin import trainjob_build as twin_trainer
from agent.twin.operator_kinds import KINDS as TWIN_TRAINING_KINDS
from agent.twin.resources import lookup

REPLICATED_JOBS = JOBSET.templates
JOBSET_SUSPENSION = JOBSET.suspension
KUBEFLOW_KINDS = tuple(w for w in WORKLOADS if w.group == "kubeflow.org")


def _rjob(name: str, *, replicas: int | None = None, parallelism: int | None = None,
          completions: int | None = None, step: str | None = None) -> dict[str, Any]:
    """A replicated job of a JobSet spec (a batch Job template run `replicas` times)."""
    job_spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": name}]}}}
    if parallelism is not None:
        job_spec["parallelism"] = parallelism
    if completions is not None:
        job_spec["completions"] = completions
    out: dict[str, Any] = {"name": name, "template": {"spec": job_spec}}
    if step is not None:
        out["template"]["metadata"] = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}}
    if replicas is not None:
        out["replicas"] = replicas
    return out


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
        # a TrainJob's JobSet: torch nodes (numNodes as parallelism = completions), initializers
        # outside the gang by name or by the Trainer's ancestor-step label
        (TRAINJOB.templates, {"spec": {"replicatedJobs": [
            _rjob("dataset-initializer", replicas=1), _rjob("model-initializer", replicas=1),
            _rjob("node", replicas=1, parallelism=4, completions=4)]}}, 4),
        (TRAINJOB.templates, {"spec": {"replicatedJobs": [
            _rjob("fetch-data", step="dataset-initializer"),
            _rjob("node", parallelism=3, completions=3)]}}, 3),
        # MPI: the launcher and the nodes
        (TRAINJOB.templates, {"spec": {"replicatedJobs": [
            _rjob("node", parallelism=2, completions=2), _rjob("launcher", step="trainer")]}}, 3),
        (TRAINJOB.templates, {"spec": {"replicatedJobs": [_rjob("dataset-initializer")]}}, None),
        (JOBSET.templates, {"spec": {"replicatedJobs": [_rjob("workers", replicas=4, parallelism=2),
                                                         _rjob("driver")]}}, 9),
        (JOBSET.templates, {"spec": {"replicatedJobs": [{"name": ["odd"], "replicas": 1}]}}, 1),
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
    trainjob_set = {"spec": {"replicatedJobs": [_rjob("model-initializer"), _rjob("node", parallelism=2)]}}
    assert [(t.replica, t.in_gang) for t in TRAINJOB.templates.templates(trainjob_set)] == [
        ("model-initializer", False), ("node", True)]
    assert [t.replica for t in TRAINJOB.templates.gang_templates(trainjob_set)] == ["node"]
    assert all(t.in_gang for t in TF.templates.templates(job))


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
        (TRAINJOB.suspension, {"spec": {"suspend": True, "managedBy": "trainer.kubeflow.org/trainjob-controller"}},
         True, "trainer.kubeflow.org/trainjob-controller"),
        (TRAINJOB.suspension, {"spec": {"runPolicy": {"suspend": True}}}, False, None),
        (JOBSET.suspension, {"spec": {"suspend": False}}, False, None),
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
    assert TRAINJOB.suspension.patch(True) == {"spec": {"suspend": True}}
    # Kubeflow operators create pods from the template as it is on resume: any field may change
    assert all(w.suspension.may_change("spec.affinity") for w in KUBEFLOW_KINDS)
    # the JobSet webhook: only Kueue's scheduling directives change while suspended, and a
    # TrainJob's runtime patches land in its JobSet
    for kind in (JOBSET, TRAINJOB):
        for field in ("metadata.labels", "metadata.annotations", "spec.nodeSelector",
                      "spec.tolerations", "spec.schedulingGates"):
            assert kind.suspension.may_change(field), (kind.kind, field)
        assert not kind.suspension.may_change("spec.affinity")
        assert not kind.suspension.may_change("spec.containers")
    assert JOBSET.suspension.own_managers == {"jobset.sigs.k8s.io/jobset-controller"}
    assert TRAINJOB.suspension.own_managers == {"trainer.kubeflow.org/trainjob-controller"}


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
        (TRAINJOB.conditions, [{"type": "Complete", "status": "True"}], "Complete"),
        (TRAINJOB.conditions, [{"type": "Completed", "status": "True"}], None),  # JobSet's word
        (TRAINJOB.conditions, [{"type": "Failed", "status": "True"}], "Failed"),
        (JOBSET.conditions, [{"type": "Completed", "status": "True"}], "Completed"),
        (JOBSET.conditions, [{"type": "Complete", "status": "True"}], None),  # the TrainJob's word
        (JOBSET.conditions, [{"type": "StartupPolicyCompleted", "status": "True"}], None),
        (JOBSET.conditions, [{"type": "Failed", "status": "False"}], None),
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
                              "kubernetes.io/job-controller", "jobset.sigs.k8s.io/jobset-controller",
                              "trainer.kubeflow.org/trainjob-controller"}
    assert workload_served("trainer.kubeflow.org", "v1alpha1", "TrainJob") is TRAINJOB
    assert workload_served("jobset.x-k8s.io", "v1alpha2", "JobSet") is JOBSET
    assert workload_served("jobset.x-k8s.io", "v1alpha1", "JobSet") is None
    assert workload_named("JobSet", group="kubeflow.org") is None
    assert materialising(JobKind.JOBSET) is TRAINJOB and materialising(JobKind.PYTORCH) is None
    assert TRAINJOB.materialised is JobKind.JOBSET and JOBSET.materialised is None
    assert JOBSET.pods_owned_by == TRAINJOB.pods_owned_by == BATCH_JOB.kind
    assert TRAINJOB.api_version == "trainer.kubeflow.org/v1alpha1"
    assert JOBSET.api_version == "jobset.x-k8s.io/v1alpha2"
    assert TRAINJOB.labels is JOBSET.labels  # a TrainJob's pods are its JobSet's


@pytest.mark.parametrize(
    ("kind", "rule"),
    [
        # torch TrainJob: rank 0 of `node` on PET_MASTER_PORT (29500); MPI: the launcher
        (TRAINJOB, ("node", 29500, None, "launcher")),
        # JobSet: spec.coordinator, else `node`, else the first replicated job
        (JOBSET, ("node", 29500, ("spec", "coordinator"), "launcher")),
        (PYTORCH, ("master", 23456, None, None)),
        (MPI, ("launcher", 22, None, None)),
    ],
    ids=lambda v: getattr(getattr(v, "kind", None), "value", "rule"),
)
def test_coordinator_rules(kind: Any, rule: tuple[Any, ...]) -> None:
    c = kind.coordinator
    launcher = c.launcher.replica_type if c.launcher is not None else None
    assert (c.replica_types[0], c.default_port, c.declared, launcher) == rule
    assert c.worker_zero is (kind.group == "kubeflow.org" and kind is not MPI)


@pytest.mark.parametrize("kind", KUBEFLOW_KINDS, ids=lambda w: w.kind.value)
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


@pytest.mark.parametrize("kind", [TRAINJOB, JOBSET], ids=lambda w: w.kind.value)
def test_jobset_kinds_agree_with_the_twins_api_server_and_controllers(kind: Any) -> None:
    (version,) = kind.versions
    served = lookup(kind.plural, group=kind.group, version=version)
    assert (served.kind, served.plural, served.version) == (kind.kind.value, kind.plural, version)
    labels = kind.labels
    assert (labels.job_name, labels.replica_type, labels.replica_index, labels.global_index) == (
        twin_jobset.JOBSET_NAME, twin_jobset.REPLICATED_JOB, twin_jobset.JOB_INDEX,
        twin_jobset.JOB_GLOBAL_INDEX)
    assert labels.completion_index == twin_gang.COMPLETION_INDEX
    assert kind.coordinator.default_port == twin_gang.DEFAULT_PORT == twin_trainer.TRAINER_PORT
    assert kind.coordinator.launcher is not None
    assert kind.coordinator.launcher.replica_type == twin_gang.LAUNCHER
    assert kind.coordinator.replica_types == (twin_gang.NODE,)
    assert kind.templates.outside == frozenset(twin_gang.INITIALIZERS)
    assert kind.templates.outside_label == twin_gang.ANCESTOR
    assert JOBSET.api_version == twin_jobset.GROUP_VERSION
    assert TRAINJOB.api_version == twin_trainer.API_VERSION
    assert frozenset(twin_trainer.INITIALIZERS) == INITIALIZERS


@pytest.mark.parametrize("kind", KUEUE_KINDS, ids=lambda k: k.kind.value)
def test_kueue_kinds_agree_with_the_twins_kueue(kind: Any) -> None:
    served = lookup(kind.plural, group=kind.group)
    assert (served.kind, served.api_version, served.namespaced) == (
        kind.kind.value, kind.api_version, kind.namespaced)
    assert kueue_kind_served(kind.group, kind.versions[0], kind.kind.value) is kind
    assert kueue_kind_served(kind.group, "v9", kind.kind.value) is None


def test_kueue_annotations_agree_with_the_twins_kueue() -> None:
    assert (KUEUE.queue_label, KUEUE.topology_annotation, KUEUE.preferred_annotation,
            KUEUE.unconstrained_annotation, KUEUE.group_annotation) == (
        twin_kueue.QUEUE_LABEL, twin_kueue.REQUIRED_TOPOLOGY, twin_kueue.PREFERRED_TOPOLOGY,
        twin_kueue.UNCONSTRAINED_TOPOLOGY, twin_kueue.PODSET_GROUP_NAME)


def test_own_managers_agree_with_the_twins_controllers() -> None:
    assert JOBSET.suspension.own_managers == {twin_jobset.CONTROLLER_NAME}
    assert TRAINJOB.suspension.own_managers == {twin_crds.TRAINJOB_CONTROLLER}


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings, with their line."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}  # fmt: skip
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs]


def test_the_kinds_are_written_only_in_the_table_and_the_twin() -> None:
    """Every kind's name (TrainJob's runtimes and Kueue's kinds too), plurals, API groups and label
    domain (Kueue's annotation domain: `KUEUE` holds its names) appear in the product's code (docstrings aside) only here and in the twin: every other layer reads them.
    A sentence told to a person (a string with a space) may name a kind in words; it may not
    write a plural, a group or a label."""
    # Kueue's kinds too, but `Workload(s)`, `Topology` and `topologies`: common words
    kueue = [k for k in KUEUE_KINDS if k.kind not in (KueueKindName.WORKLOAD, KueueKindName.TOPOLOGY)]
    names = {*(w.kind.value for w in WORKLOADS), *(kind for _, kind in TRAINING_RUNTIMES),
             *(k.kind.value for k in kueue)}
    keys = {*(w.plural for w in WORKLOADS), *(w.group for w in WORKLOADS),
            *(w.labels.job_name.split("/")[0] for w in WORKLOADS), *(k.plural for k in kueue),
            KUEUE_GROUP}

    def written(text: str) -> bool:
        return any(k in text for k in keys) or (" " not in text and any(n in text for n in names))

    root = Path(__file__).resolve().parents[2] / "agent"
    found = [f"{path.relative_to(root)}:{line}: {text!r}"
             for path in sorted(root.rglob("*.py"))
             if path.relative_to(root).parts[0] != "twin" and path != root / "model" / "workload.py"
             for line, text in _code_strings(path) if written(text)]
    assert found == []


@pytest.mark.parametrize(
    ("env", "port"),
    [
        ([{"name": "PET_MASTER_PORT", "value": "29500"}], 29500),
        ([{"name": "OTHER", "value": "1"}, {"name": "MASTER_PORT", "value": "3389"}], 3389),
        # the first one set wins, whichever of the names it is (the twin's and torchrun's reading)
        ([{"name": "MASTER_PORT", "value": "1234"}, {"name": "PET_MASTER_PORT", "value": "29500"}], 1234),
        ([{"name": "MASTER_PORT", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}], None),
        ([{"name": "MASTER_PORT", "value": "0"}], None),
        ([{"name": "MASTER_PORT", "value": "65536"}], None),
        ([{"name": "MASTER_PORT", "value": "²"}], None),
        (["junk", {"name": ["MASTER_PORT"], "value": "1"}], None),
    ],
)
def test_env_port(env: list[Any], port: int | None) -> None:
    template = {"spec": {"containers": [{"name": "init"}, {"name": "node", "env": env}]}}
    assert env_port(template, JOBSET.coordinator.port_env) == port
    assert env_port(template, ()) is None
