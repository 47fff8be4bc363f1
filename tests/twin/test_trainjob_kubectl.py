"""kubectl v1.32 against a twin running the Trainer: `get` with the printer columns the CRDs
declare, `describe`, the CRDs themselves, server-side field validation (strict and warn) and the
patch types a custom resource accepts."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import yaml

from agent.twin import kubeconfig
from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from tests.support.waiting import wait as wait_for
from tests.twin.apiserver_harness import Twin
from tests.twin.twin_fixtures import fast, pods, wait

AGE = re.compile(r"^\d+s$")


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    tmp = tmp_path_factory.mktemp("trainjob-kubectl")
    with TwinCluster(fast("trainjob")) as cluster:
        server = cluster.serve_api()
        path = kubeconfig.write(tmp / "kubeconfig", server.url)
        wait(cluster, lambda: len([p for p in pods(cluster) if p["status"].get("phase")
                                   == "Running"]) == 4, timeout=20)
        yield Twin(cluster.store, server, path, tmp / "kubecache")


def rows(out: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in out.strip().splitlines()]


def test_get_shows_the_crd_printer_columns(twin: Twin) -> None:
    out = twin.kubectl("get", "trainjobs,jobsets,trainingruntimes,clustertrainingruntimes", "-A")
    blocks = [rows(b) for b in out.stdout.strip().split("\n\n")]
    trainjobs, jobsets, cluster_runtimes = blocks  # no namespaced TrainingRuntime exists
    assert trainjobs[0] == ["NAMESPACE", "NAME", "STATE", "AGE"]
    # a TrainJob that never was suspended, completed or failed has no condition: STATE is empty
    assert trainjobs[1][:2] == ["ml", "trainjob.trainer.kubeflow.org/llm-pretrain"]
    assert AGE.match(trainjobs[1][2])
    assert jobsets[0] == ["NAMESPACE", "NAME", "TERMINALSTATE", "RESTARTS", "COMPLETED",
                          "SUSPENDED", "AGE"]
    assert jobsets[1][:4] == ["ml", "jobset.jobset.x-k8s.io/llm-pretrain", "0", "false"]
    assert cluster_runtimes[0] == ["NAMESPACE", "NAME", "AGE"]
    assert cluster_runtimes[1][0] == \
        "clustertrainingruntime.trainer.kubeflow.org/torch-distributed-with-dataset"
    assert "No resources found" in twin.kubectl("get", "trainingruntimes", "-A").stderr


def test_state_is_the_last_condition_type_and_suspended_the_spec_field(twin: Twin) -> None:
    twin.kubectl("patch", "trainjob", "llm-pretrain", "-n", "ml", "--type=merge",
                 "-p", '{"spec":{"suspend":true}}')
    try:
        def shown() -> tuple[list[str], list[str]] | None:
            trainjob = rows(twin.kubectl("get", "trainjob", "-n", "ml").stdout)[1]
            jobset = rows(twin.kubectl("get", "jobset", "-n", "ml").stdout)[1]
            return (trainjob, jobset) if trainjob[1] == "Suspended" else None

        _, jobset = wait_for(shown, timeout=10, what="STATE Suspended")
        # empty TERMINALSTATE and COMPLETED cells: RESTARTS 0, SUSPENDED true, AGE
        assert jobset[:3] == ["llm-pretrain", "0", "true"] and AGE.match(jobset[3])
    finally:
        twin.kubectl("patch", "trainjob", "llm-pretrain", "-n", "ml", "--type=merge",
                     "-p", '{"spec":{"suspend":false}}')
    resumed = wait_for(lambda: rows(twin.kubectl("get", "jobset", "-n", "ml").stdout)[1][2]
                       == "false", timeout=10, what="SUSPENDED false")
    assert resumed
    # the TrainJob's last condition is still Suspended (status False): STATE shows its type
    assert rows(twin.kubectl("get", "trainjob", "-n", "ml").stdout)[1][1] == "Suspended"


def test_describe_trainjob_and_jobset(twin: Twin) -> None:
    out = twin.kubectl("describe", "trainjob", "llm-pretrain", "-n", "ml").stdout
    assert "API Version:  trainer.kubeflow.org/v1alpha1" in out
    assert "Kind:         TrainJob" in out
    assert "Jobs Status:" in out and "Num Nodes:  4" in out
    out = twin.kubectl("describe", "jobset", "llm-pretrain", "-n", "ml").stdout
    assert "Replicated Jobs Status:" in out and "Kind:         JobSet" in out


def test_the_crds_are_served(twin: Twin) -> None:
    names = twin.kubectl("get", "crd", "-o", "name").stdout.split()
    assert {"customresourcedefinition.apiextensions.k8s.io/trainjobs.trainer.kubeflow.org",
            "customresourcedefinition.apiextensions.k8s.io/jobsets.jobset.x-k8s.io"} <= set(names)
    crd = yaml.safe_load(twin.kubectl("get", "crd", "trainjobs.trainer.kubeflow.org",
                                      "-o", "yaml").stdout)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert "runtimePatches" in spec["properties"]  # the scenario serves Trainer v2.3
    assert spec["properties"]["runtimePatches"]["x-kubernetes-list-map-keys"] == ["manager"]


TRAINJOB = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: old-style, namespace: ml}
spec:
  suspend: true
  runtimeRef: {name: torch-distributed-with-dataset}
  podTemplateOverrides:
  - targetJobs: [{name: node}]
    spec: {nodeSelector: {topology.kubernetes.io/zone: us-east-1a}}
"""


def test_field_validation_strict_refuses_and_warn_prunes(twin: Twin) -> None:
    strict = twin.kubectl("apply", "-f", "-", stdin=TRAINJOB, check=False)
    assert strict.returncode == 1
    assert ('Error from server (BadRequest): error when creating "STDIN": TrainJob in version '
            '"v1alpha1" cannot be handled as a TrainJob: strict decoding error: unknown field '
            '"spec.podTemplateOverrides"') in strict.stderr
    warned = twin.kubectl("apply", "--validate=warn", "-f", "-", stdin=TRAINJOB)
    assert 'Warning: unknown field "spec.podTemplateOverrides"' in warned.stderr
    stored = twin.store.get(lookup("trainjobs"), "old-style", namespace="ml")
    assert "podTemplateOverrides" not in stored["spec"]
    twin.kubectl("delete", "trainjob", "old-style", "-n", "ml")


def test_patch_types_of_a_custom_resource(twin: Twin) -> None:
    strategic = twin.kubectl("patch", "trainjob", "llm-pretrain", "-n", "ml", "--type=strategic",
                             "-p", '{"metadata":{"labels":{"a":"b"}}}', check=False)
    assert strategic.returncode == 1
    assert strategic.stderr.startswith(
        "error: application/strategic-merge-patch+json is not supported by "
        "trainer.kubeflow.org/v1alpha1, Kind=TrainJob: the body of the request was in an unknown "
        "format - accepted media types include: application/json-patch+json, "
        "application/merge-patch+json, application/apply-patch+yaml")
    immutable = twin.kubectl("patch", "trainjob", "llm-pretrain", "-n", "ml", "--type=merge",
                             "-p", '{"spec":{"trainer":{"numNodes":2}}}', check=False)
    assert immutable.returncode == 1
    assert ('The TrainJob "llm-pretrain" is invalid: spec.trainer: Invalid value: "object": '
            "field is immutable") in immutable.stderr
    twin.kubectl("label", "trainjob", "llm-pretrain", "-n", "ml", "team=research")


def test_kubectl_relays_the_jobset_webhooks_refusal(twin: Twin) -> None:
    affinity = ('{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":'
                '{"nodeSelectorTerms":[{"matchExpressions":[{"key":"topology.kubernetes.io/zone",'
                '"operator":"In","values":["us-east-1a"]}]}]}}}')
    refused = twin.kubectl(
        "patch", "jobset", "llm-pretrain", "-n", "ml", "--type=json", "-p",
        '[{"op":"add","path":"/spec/replicatedJobs/1/template/spec/template/spec/affinity",'
        f'"value":{affinity}}}]', check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        'The JobSet "llm-pretrain" is invalid: spec.replicatedJobs: Invalid value: '
        "[]v1alpha2.ReplicatedJob{...}: field is immutable")
