"""Fixtures of the command tests: the seed-blocked twin for `explain` and `whatif`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agent.twin import cluster as twin_cluster
from agent.twin import kubeconfig
from tests.twin import twin_fixtures as fixtures

ZONE_KEY = "netpol.example.com/zone"


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The seed-blocked twin (master in us-east-1b, workers in us-east-1a), its kubeconfig, a
    `kubectl get -o yaml` dump of it and a config naming its zone label."""
    tmp = tmp_path_factory.mktemp("explain")
    cluster = twin_cluster.TwinCluster(fixtures.fast("seed-blocked")).start()
    try:
        kube = kubeconfig.write(tmp / "kubeconfig", cluster.serve_api().url)

        def labelled() -> bool:
            pods = cluster.store.list(twin_cluster.lookup("pods"), namespace="ml")[0]
            return len([p for p in pods if ZONE_KEY in p["metadata"].get("labels", {})]) == 5

        assert cluster.wait_until(labelled, timeout=30)
        dump = tmp / "cluster.yaml"
        with dump.open("w") as out:
            subprocess.run(
                ["kubectl", "--kubeconfig", str(kube), "get",
                 "namespaces,nodes,pods,networkpolicies,ciliumnetworkpolicies", "-A", "-o", "yaml"],
                stdout=out, check=True, timeout=60, env={**os.environ, "KUBECONFIG": str(kube)},
            )  # fmt: skip
        config = tmp / "config.yaml"
        config.write_text(yaml.safe_dump({"pod_zone_label": ZONE_KEY}))
        yield {"kubeconfig": kube, "dump": dump, "config": config}
    finally:
        cluster.stop()
