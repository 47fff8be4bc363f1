"""`kubectl get` against the twin prints the columns a real v1.32 API server serves for each
built-in kind (server-side Tables): real kubectl as a subprocess, headers and cells compared."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from agent.twin.resources import lookup
from agent.twin.tables import human_duration
from tests.twin.apiserver_harness import Twin, running_twin

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


def stamp(seconds_ago: float) -> str:
    return datetime.fromtimestamp(time.time() - seconds_ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


TEMPLATE = {"metadata": {"labels": {"app": "lab"}},
            "spec": {"containers": [{"name": "head", "image": "lab:1"},
                                    {"name": "sidecar", "image": "proxy:2"}]}}


def _objects() -> list[tuple[str, dict[str, Any]]]:
    return [
        ("namespaces", {"metadata": {"name": "ml"}, "status": {"phase": "Active"}}),
        ("deployments", {
            "metadata": {"name": "lab-head", "namespace": "ml"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "lab", "role": "head"}},
                     "template": TEMPLATE},
            "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3,
                       "availableReplicas": 2},
        }),
        ("replicasets", {
            "metadata": {"name": "lab-head-5d8", "namespace": "ml"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "lab"}}, "template": TEMPLATE},
            "status": {"replicas": 3, "readyReplicas": 2},
        }),
        ("jobs", {
            "metadata": {"name": "lab-workers", "namespace": "ml"},
            "spec": {"completions": 4, "parallelism": 4, "template": TEMPLATE,
                     "selector": {"matchLabels": {"batch.kubernetes.io/job-name": "lab-workers"}}},
            "status": {"startTime": stamp(600), "succeeded": 1, "active": 3},
        }),
        ("jobs", {
            "metadata": {"name": "done", "namespace": "ml"},
            "spec": {"template": TEMPLATE},
            "status": {"startTime": stamp(900), "completionTime": stamp(780), "succeeded": 1,
                       "conditions": [{"type": "Complete", "status": "True"}]},
        }),
        ("events", {
            "metadata": {"name": "lab-head-x.17a", "namespace": "ml"},
            "involvedObject": {"kind": "Pod", "name": "lab-head-x", "namespace": "ml"},
            "reason": "FailedScheduling", "type": "Warning", "count": 3,
            "message": "0/4 nodes are available: 2 node(s) had untolerated taint.  ",
            "firstTimestamp": stamp(300), "lastTimestamp": stamp(30),
            "source": {"component": "default-scheduler"},
        }),
        ("services", {
            "metadata": {"name": "lab", "namespace": "ml"},
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
                     "selector": {"app": "lab"}, "ports": [{"port": 29500, "protocol": "TCP"}]},
        }),
        ("leases", {"metadata": {"name": "zonemedic-leader", "namespace": "ml"},
                    "spec": {"holderIdentity": "zonemedic-0"}}),
        ("networkpolicies", {"metadata": {"name": "stay-in-zone", "namespace": "ml"},
                             "spec": {"podSelector": {"matchLabels": {"app": "lab"}}}}),
        ("configmaps", {"metadata": {"name": "cfg", "namespace": "ml"}, "data": {"a": "1", "b": "2"}}),
        ("roles", {"metadata": {"name": "reader", "namespace": "ml"}, "rules": []}),
        ("rolebindings", {
            "metadata": {"name": "reader", "namespace": "ml"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "User", "name": "alice"},
                         {"kind": "ServiceAccount", "name": "agent", "namespace": "ml"}],
        }),
    ]


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    with running_twin(tmp_path_factory.mktemp("tables")) as t:
        for plural, obj in _objects():
            rt = lookup(plural)
            t.store.create(rt, obj, namespace=obj["metadata"].get("namespace"))
        yield t


def tables(out: str) -> list[list[list[str]]]:
    """kubectl's output, one table per kind (blank-line separated), rows split into cells."""
    blocks = [b for b in out.strip().split("\n\n") if b.strip()]
    return [[re.split(r"\s{2,}", line.strip()) for line in b.splitlines()] for b in blocks]


AGE = re.compile(r"^\d+s$")


def test_get_deploy_jobs_events_show_the_real_columns(twin: Twin) -> None:
    deploy, jobs, events = tables(twin.kubectl("get", "deploy,jobs,events", "-n", "ml").stdout)
    assert deploy[0] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    name, ready, updated, available, age = deploy[1]
    assert (name, ready, updated, available) == ("deployment.apps/lab-head", "2/3", "3", "2")
    assert AGE.match(age)
    assert jobs[0] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    by_name = {row[0]: row for row in jobs[1:]}
    assert by_name["job.batch/lab-workers"][1:3] == ["Running", "1/4"]
    assert by_name["job.batch/lab-workers"][3] == "10m"  # running for 10 minutes (to 11)
    assert by_name["job.batch/done"][1:4] == ["Complete", "1/1", "2m"]
    assert events[0] == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert re.match(r"^3\ds$", events[1][0])  # last seen 30 seconds ago (a slow machine: more)
    assert events[1][1:] == ["Warning", "FailedScheduling", "pod/lab-head-x",
                             "0/4 nodes are available: 2 node(s) had untolerated taint."]


def test_wide_columns_and_the_other_built_in_kinds(twin: Twin) -> None:
    [deploy] = tables(twin.kubectl("get", "deploy", "-n", "ml", "-o", "wide").stdout)
    assert deploy[0] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES",
                         "SELECTOR"]
    assert deploy[1][5:] == ["head,sidecar", "lab:1,proxy:2", "app=lab,role=head"]
    [jobs] = tables(twin.kubectl("get", "jobs", "-n", "ml", "-o", "wide").stdout)
    assert jobs[0][5:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    [events] = tables(twin.kubectl("get", "events", "-n", "ml", "-o", "wide").stdout)
    assert events[0] == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "SUBOBJECT", "SOURCE", "MESSAGE",
                         "FIRST SEEN", "COUNT", "NAME"]
    assert events[1][4:6] == ["default-scheduler",
                              "0/4 nodes are available: 2 node(s) had untolerated taint."]
    assert re.match(r"^5m(\d+s)?$", events[1][6])  # first seen 5 minutes ago
    assert events[1][7:] == ["3", "lab-head-x.17a"]  # (the empty SUBOBJECT cell: no column)
    expected = {
        "rs": (["NAME", "DESIRED", "CURRENT", "READY", "AGE"], ["lab-head-5d8", "3", "3", "2"]),
        "svc": (["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"],
                ["lab", "ClusterIP", "10.96.0.20", "<none>", "29500/TCP"]),
        "leases": (["NAME", "HOLDER", "AGE"], ["zonemedic-leader", "zonemedic-0"]),
        "netpol": (["NAME", "POD-SELECTOR", "AGE"], ["stay-in-zone", "app=lab"]),
        "cm": (["NAME", "DATA", "AGE"], ["cfg", "2"]),
        "rolebindings": (["NAME", "ROLE", "AGE"], ["reader", "Role/reader"]),
    }
    for kind, (header, cells) in expected.items():
        [table] = tables(twin.kubectl("get", kind, "-n", "ml").stdout)
        assert table[0] == header, kind
        assert table[1][:len(cells)] == cells and AGE.match(table[1][-1]), (kind, table[1])
    [roles] = tables(twin.kubectl("get", "roles", "-n", "ml").stdout)
    assert roles[0] == ["NAME", "CREATED AT"]  # the default table of a kind without a printer
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", roles[1][1])
    [bindings] = tables(twin.kubectl("get", "rolebindings", "-n", "ml", "-o", "wide").stdout)
    assert bindings[1][3:] == ["alice", "ml/agent"]  # USERS, (GROUPS empty), SERVICEACCOUNTS
    [namespaces] = tables(twin.kubectl("get", "ns", "ml").stdout)
    assert namespaces[0] == ["NAME", "STATUS", "AGE"] and namespaces[1][:2] == ["ml", "Active"]


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(-5, "<invalid>"), (-1, "0s"), (45, "45s"), (119, "119s"), (125, "2m5s"), (600, "10m"),
     (7500, "125m"), (12000, "3h20m"), (10 * 3600, "10h"), (53 * 3600, "2d5h"),
     (20 * 86400, "20d"), (800 * 86400, "2y70d"), (10 * 365 * 86400, "10y")],
)
def test_human_duration_is_kubernetes(seconds: float, shown: str) -> None:
    assert human_duration(seconds) == shown
