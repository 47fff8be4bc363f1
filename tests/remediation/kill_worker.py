"""A Remediator process the kill tests SIGKILL right after it records a given step.

Usage: python -m tests.remediation.kill_worker KUBECONFIG DB_URL INCIDENT_ID STEP [--cordon-after-suspend]
It kills itself (SIGKILL: no cleanup, no flush) from the Remediator's step callback once STEP is
recorded; with --cordon-after-suspend it first cordons the target zone's nodes when the suspend is
recorded (so the remediation rolls back). Prints the final status if it is never killed.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import replace
from datetime import timedelta

from kubernetes import client

from agent.remediation.execute import Remediator, Step
from agent.runtime.rediagnosis import ApiRediagnosis
from agent.settings import DatabaseSettings, DiagnosisSettings, KubernetesSettings
from agent.sources.kubeapi import KubeApi, build_api_client
from agent.store.repository import open_store
from tests.remediation.harness import FAST, ZONE


def main() -> None:
    kubeconfig, url, raw_id, kill_at, *flags = sys.argv[1:]
    api = KubeApi(build_api_client(KubernetesSettings(kubeconfig=kubeconfig)))
    store = open_store(DatabaseSettings(write_retry=timedelta(seconds=5)), url=url)
    core = client.CoreV1Api(api.api_client)

    def on_step(step: Step) -> None:
        if step is Step.SUSPENDED and "--cordon-after-suspend" in flags:
            for node in core.list_node().items:
                if node.metadata.labels.get(ZONE) == "us-east-1a":
                    core.patch_node(node.metadata.name, {"spec": {"unschedulable": True}},
                                    _content_type="application/merge-patch+json")  # fmt: skip
        if step.value == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    settings = replace(FAST, schedule_timeout=timedelta(seconds=1.5))
    remediator = Remediator(api, store, diagnose=ApiRediagnosis(api, DiagnosisSettings()),
                            settings=settings, on_step=on_step)  # fmt: skip
    print(remediator.run(int(raw_id)).value, flush=True)


if __name__ == "__main__":
    main()
