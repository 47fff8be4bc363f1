"""Scenario files and the large-cluster generator: shapes, model parameters, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.twin.crds import TrainerRelease
from agent.twin.scenario import ScenarioError, load_scenario, parse_scenario, scenario_names

ZONE = "topology.kubernetes.io/zone"


def test_packaged_scenarios_are_listed_and_load() -> None:
    assert {"seed-degraded", "seed-blocked", "healthy"} <= set(scenario_names())
    for name in scenario_names():
        scenario = load_scenario(name)
        assert scenario.nodes and scenario.objects


@pytest.mark.parametrize(
    ("name", "policies", "zone_label"),
    [
        ("seed-degraded", 0, None),
        ("seed-blocked", 2, "netpol.example.com/zone"),
        ("healthy", 0, None),
    ],
)
def test_seed_scenarios_shape(name: str, policies: int, zone_label: str | None) -> None:
    scenario = load_scenario(name)
    gpu = [n for n in scenario.nodes if "nvidia.com/gpu" in n["status"]["allocatable"]]
    cpu = [n for n in scenario.nodes if n not in gpu]
    assert {n["metadata"]["labels"][ZONE] for n in gpu} == {"us-east-1a"}
    assert {n["metadata"]["labels"][ZONE] for n in cpu} == {"us-east-1b"}
    assert all(t["key"] == "nvidia.com/gpu" for n in gpu for t in n["spec"]["taints"])
    kinds = [o["kind"] for o in scenario.objects]
    assert kinds.count("CiliumNetworkPolicy") == policies
    assert kinds.count("PyTorchJob") == 1
    assert scenario.model.pod_zone_label == zone_label


def test_lab_shape() -> None:
    scenario = load_scenario("lab")
    gpu = [n for n in scenario.nodes if "nvidia.com/gpu" in n["status"]["allocatable"]]
    cpu = [n for n in scenario.nodes if n not in gpu]
    assert {n["metadata"]["labels"][ZONE] for n in gpu} == {"zone-a"}
    assert {n["metadata"]["labels"][ZONE] for n in cpu} == {"zone-b"}
    assert all(n["metadata"]["labels"]["gpu"] == "true" for n in gpu)
    assert all(n["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present",
                                        "effect": "NoSchedule"}] for n in gpu)  # fmt: skip
    kinds = sorted(o["kind"] for o in scenario.objects)
    assert kinds == ["CiliumNetworkPolicy"] * 3 + ["Deployment", "Job"]
    assert scenario.model.pod_zone_label is None  # the zone label is written in the templates
    (group,) = scenario.groups
    assert group.as_config() == {
        "name": "llm-pretrain", "namespace": "ml-lab", "selector": {"app": "llm-pretrain"},
        "coordinator": {"role": "coordinator"}, "workers": {"role": "worker"}, "ports": [29500],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("name", "release", "kinds", "gpu_zones"),
    [
        ("trainjob", TrainerRelease.V2_3, ["ClusterTrainingRuntime", "TrainJob"],
         {"us-east-1a", "us-east-1b"}),
        ("trainjob-mpi", TrainerRelease.V2_2,
         ["CiliumNetworkPolicy", "CiliumNetworkPolicy", "ClusterTrainingRuntime", "TrainJob"],
         {"us-east-1a"}),
        ("jobset", TrainerRelease.V2_3, ["JobSet"], {"us-east-1a", "us-east-1b"}),
    ],
)
def test_training_stack_scenarios(
    name: str, release: TrainerRelease, kinds: list[str], gpu_zones: set[str]
) -> None:
    scenario = load_scenario(name)
    assert scenario.trainer_release is release
    assert sorted(o["kind"] for o in scenario.objects) == kinds
    gpu = [n for n in scenario.nodes if "nvidia.com/gpu" in n["status"]["allocatable"]]
    assert {n["metadata"]["labels"][ZONE] for n in gpu} == gpu_zones


def test_the_trainer_release_defaults_to_the_latest() -> None:
    assert load_scenario("seed-degraded").trainer_release is TrainerRelease.V2_3


def test_generator_parameters() -> None:
    scenario = load_scenario("generated:nodes=12,zones=4,jobs=3,workers=2,policies=1,seed=5")
    assert len(scenario.nodes) == 12
    assert len({n["metadata"]["labels"][ZONE] for n in scenario.nodes}) == 4
    jobs = [o for o in scenario.objects if o["kind"] == "PyTorchJob"]
    assert len(jobs) == 3
    assert all(j["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2 for j in jobs)
    assert sum(o["kind"] == "CiliumNetworkPolicy" for o in scenario.objects) == 3  # one per team
    again = load_scenario("generated:nodes=12,zones=4,jobs=3,workers=2,policies=1,seed=5")
    assert again.objects == scenario.objects


def test_model_parameters_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(
        "model:\n  pod_start_seconds: 0.5\n  inter_zone: {rtt_ms: 4, gbps: 8}\n"
        "  training: {compute_seconds: 2}\n"
        "nodes:\n  - {name: 'n-{i}', count: 3, zone: z1, gpus: 2}\n"
    )
    scenario = load_scenario(str(path))
    assert scenario.name == "mine"
    assert [n["metadata"]["name"] for n in scenario.nodes] == ["n-0", "n-1", "n-2"]
    assert scenario.model.pod_start_seconds == 0.5
    assert scenario.model.zones.inter.rtt_seconds == pytest.approx(0.004)
    assert scenario.model.zones.inter.bandwidth_bytes_per_second == pytest.approx(1e9)
    assert scenario.model.training.compute_seconds == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"model": {"speed": 2}}, "model.speed: unknown key"),
        ({"model": {"pod_start_seconds": "soon"}}, "model.pod_start_seconds: expected a number"),
        ({"model": {"inter_zone": {"gbps": 0}}}, "model.inter_zone.gbps: must be positive"),
        ({"nodes": [{"name": "n"}]}, "nodes[0]: a node group needs a name"),
        ({"nodes": [{"name": "n", "zone": "z", "count": 2}]}, "node names repeat"),
        ({"nodes": [{"name": "n", "zone": "z", "gpu": 1}]}, "nodes[0].gpu: unknown key"),
        ({"objects": [{"kind": "Pod"}]}, "objects[0]: needs apiVersion, kind and metadata.name"),
        ({"zones": ["a"]}, "zones: unknown key"),
        ({"trainer_release": "v2.0"}, "trainer_release: unknown Kubeflow Trainer release 'v2.0' "
         "(known: v2.1, v2.2, v2.3)"),
        ({"groups": {"name": "g"}}, "groups: expected a list of groups"),
        ({"groups": [{"name": "g", "namespace": "n", "selector": {"a": "b"}, "workers": {"r": "w"}}]},
         "groups[0].coordinator: expected a non-empty mapping of labels"),
        ({"groups": [{"name": "g", "selector": {"a": "b"}}]}, "groups[0].namespace: required"),
        ({"groups": [{"name": "g", "namespace": "n", "selector": {"a": "b"}, "coordinator": {"r": "c"},
                      "workers": {"r": "w"}, "ports": ["http"]}]},
         "groups[0].ports: expected a list of port numbers"),
        ({"groups": [{"name": "g", "namespace": "n", "selector": {"a": "b"}, "coordinator": {"r": "c"},
                      "workers": {"r": "w"}, "port": 1}]}, "groups[0].port: unknown key"),
    ],
)
def test_bad_scenarios_name_the_problem(data: dict, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data, name="bad", where="bad.yaml")
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nope", "unknown scenario 'nope'"),
        ("generated:nodes=0", "nodes is out of range"),
        ("generated:racks=3", "bad parameter 'racks=3'"),
    ],
)
def test_bad_names(name: str, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        load_scenario(name)
    assert message in str(err.value)


@pytest.mark.parametrize(("value", "frameworks"), [
    (True, ("kubeflow.org/pytorchjob", "kubeflow.org/tfjob", "kubeflow.org/xgboostjob",
            "kubeflow.org/paddlejob", "kubeflow.org/jaxjob", "kubeflow.org/mpijob", "batch/job",
            "jobset.x-k8s.io/jobset", "trainer.kubeflow.org/trainjob")),
    ({"frameworks": ["batch/job"]}, ("batch/job",)),
])  # fmt: skip
def test_kueue_runs_when_the_scenario_says_so(value: object, frameworks: tuple[str, ...]) -> None:
    scenario = parse_scenario({"kueue": value}, name="k", where="k.yaml")
    assert scenario.kueue is not None and scenario.kueue.frameworks == frameworks
    assert parse_scenario({}, name="k", where="k.yaml").kueue is None
    assert load_scenario("kueue").kueue is not None
    assert load_scenario("seed-degraded").kueue is None


@pytest.mark.parametrize(("value", "message"), [
    ({"frameworks": ["ray.io/rayjob"]}, "k.yaml: kueue.frameworks: unknown integration "
                                        "'ray.io/rayjob' (known: kubeflow.org/pytorchjob"),
    ({"frameworks": "batch/job"}, "k.yaml: kueue.frameworks: expected a list of integration names"),
    ({"manageJobsWithoutQueueName": True}, "k.yaml: kueue.manageJobsWithoutQueueName: unknown key"),
    ("yes", "k.yaml: kueue: expected a mapping, got str"),
])  # fmt: skip
def test_a_bad_kueue_setting_names_the_problem(value: object, message: str) -> None:
    with pytest.raises(ScenarioError) as refused:
        parse_scenario({"kueue": value}, name="k", where="k.yaml")
    assert str(refused.value).startswith(message)
