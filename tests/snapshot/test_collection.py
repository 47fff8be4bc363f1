"""Building a Snapshot from several files: dispatch on kind, warnings, precedence, error context."""

from __future__ import annotations

import pytest

from agent.errors import SnapshotError
from agent.model.workload import JobKind
from agent.snapshot.collection import parse_objects, parse_snapshot
from tests.support.objects import as_list, namespace, node, pod, training_job, zone_only


def test_dispatches_every_supported_kind() -> None:
    items = [
        node("n1", "zone-a", gpus=8),
        namespace("ml", team="x"),
        pod("p", node_name="n1"),
        zone_only("zone-a"),
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "np", "namespace": "ml"},
            "spec": {"podSelector": {}},
        },
        {
            "apiVersion": "cilium.io/v2",
            "kind": "CiliumClusterwideNetworkPolicy",
            "metadata": {"name": "ccnp"},
            "spec": {"endpointSelector": {}, "ingress": [{}]},
        },
        *(
            training_job(k, f"j-{k.lower()}")
            for k in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")
        ),
        training_job("MPIJob", "mpi2", api_version="kubeflow.org/v2beta1"),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ml"},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "rs", "namespace": "ml"},
        },
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b", "namespace": "ml"}},
    ]
    snap = parse_snapshot([("all.json", as_list(items))])
    state = snap.state
    assert list(state.nodes) == ["n1"]
    assert state.namespaces["ml"].labels["team"] == "x"
    assert [p.name for p in state.pods] == ["p"]
    assert sorted(p.id for p in snap.policies) == [
        "CiliumClusterwideNetworkPolicy/ccnp",
        "CiliumNetworkPolicy/ml/zone-a-only",
        "NetworkPolicy/ml/np",
    ]
    assert len(state.job_objects) == 7
    assert state.job_objects[(JobKind.MPI, "ml", "mpi2")].api_version == "kubeflow.org/v2beta1"
    assert set(state.owned_objects) == {
        ("Deployment", "ml", "d"),
        ("ReplicaSet", "ml", "rs"),
        ("Job", "ml", "b"),
    }
    assert snap.warnings == ()


def test_unknown_kinds_warn_once_per_kind() -> None:
    items = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
        {"apiVersion": "kubeflow.org/v2beta1", "kind": "PyTorchJob", "metadata": {"name": "x"}},
        # the Trainer's runtimes are in the README's dump: known, not read, no warning
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
         "metadata": {"name": "torch-distributed"}},
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
         "metadata": {"name": "mine", "namespace": "ml"}},
    ]
    snap = parse_snapshot([("x.json", as_list(items))])
    assert snap.warnings == (
        "skipped 1 object(s) of unsupported kind kubeflow.org/v2beta1 PyTorchJob",
        "skipped 2 object(s) of unsupported kind v1 ConfigMap",
        "skipped 1 object(s) of unsupported kind v1 Service",
    )


def test_later_files_win_and_files_combine() -> None:
    first = as_list([node("n1", "zone-a", gpus=8), pod("p", node_name="n1")])
    second = as_list([pod("p", node_name="n2"), node("n2", "zone-b", gpus=8)])
    snap = parse_snapshot([("a.json", first), ("b.json", second)])
    assert [p.node_name for p in snap.state.pods] == ["n2"]
    assert sorted(snap.state.nodes) == ["n1", "n2"]


@pytest.mark.parametrize(
    ("items", "error", "message"),
    [
        (
            [node("n", "z", gpus=8), {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "ml"}}],
            SnapshotError,
            r"^s\.json: item 1 \(Pod\): metadata\.name: required$",
        ),
        (
            [
                pod("p", labels={"a": "b"})
                | {"metadata": {"name": "p", "namespace": "ml", "labels": {"a": 1}}}
            ],
            SnapshotError,
            r"^s\.json: item 0 \(Pod ml/p\): metadata\.labels\.a: expected a string value, got int$",
        ),
        (
            [{"kind": "Pod", "metadata": {"name": "p"}}],
            SnapshotError,
            r"^s\.json: item 0 \(Pod p\): apiVersion: missing",
        ),
    ],
)
def test_errors_name_file_and_item(
    items: list[dict[str, object]], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        parse_snapshot([("s.json", as_list(items))])


def test_an_unreadable_policy_is_a_warning_naming_it_and_the_field_not_an_error() -> None:
    bad = {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"name": "bad", "namespace": "ml"},
        "spec": {"endpointSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
    }
    good = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "good", "namespace": "ml"},
        "spec": {"podSelector": {}},
    }
    snapshot = parse_snapshot([("s.json", as_list([node("n", "z", gpus=8), bad, good]))])
    assert [p.id for p in snapshot.policies] == ["NetworkPolicy/ml/good"]
    [lost] = snapshot.unreadable
    assert (lost.id, lost.field) == (
        "CiliumNetworkPolicy/ml/bad",
        "spec.endpointSelector.matchExpressions[0].operator",
    )
    assert "unknown operator 'Near'" in lost.problem
    assert any(
        "CiliumNetworkPolicy/ml/bad" in w and "matchExpressions[0].operator" in w
        for w in snapshot.warnings
    )


def test_decoded_objects_parse_as_the_same_objects_in_a_file() -> None:
    items = [
        node("n1", "zone-a"),
        namespace("ml", team="x"),
        pod("p", node_name="n1"),
        zone_only("zone-a"),
        training_job("PyTorchJob", "j"),
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "x", "namespace": "a"}},
    ]
    from_file = parse_snapshot([("api", as_list(items))])
    assert parse_objects(items, source="api") == from_file
    assert from_file.warnings == ("skipped 1 object(s) of unsupported kind apps/v1 DaemonSet",)


def test_a_bad_decoded_object_is_named_by_its_source_and_index() -> None:
    bad = pod("p", node_name="n1")
    bad["spec"]["containers"] = "none"
    with pytest.raises(SnapshotError, match=r"^api: item 1 \(Pod ml/p\): "):
        parse_objects([node("n1", "zone-a"), bad], source="api")
