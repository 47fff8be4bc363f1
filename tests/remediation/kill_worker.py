"""A Remediator process the kill tests SIGKILL at a given point.

Usage: python -m tests.remediation.kill_worker KUBECONFIG DB_URL INCIDENT_ID POINT [--cordon-after-suspend] [--lab]
POINT is a step (`suspended`: it kills itself right after that step is recorded) or
`wrote:VERB:KIND[#N]` (right after the server answered the first, or the N-th, real write of that
kind, before its step is recorded, e.g. `wrote:delete:Job`, `wrote:patch:TrainJob#2`). It kills itself with SIGKILL (no cleanup, no flush). With
--cordon-after-suspend it first cordons the target zone's nodes when the suspend is recorded (so
the remediation rolls back); with --lab it diagnoses the lab's generic group. Prints the final
status if it is never killed.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import replace
from datetime import timedelta

from kubernetes import client

from agent.remediation.remediator import Remediator
from agent.remediation.run import Step
from agent.remediation.writer import Write
from agent.runtime.rediagnosis import ApiRediagnosis
from agent.settings import DatabaseSettings, DiagnosisSettings, KubernetesSettings
from agent.sources.kubeapi import KubeApi, build_api_client
from agent.store.repository import open_store
from tests.remediation.harness import FAST, GROUPS, ZONE


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

    point, _, nth = kill_at.partition("#")
    seen: list[Write] = []

    def on_write(write: Write) -> None:
        if write.dry_run or point != f"wrote:{write.verb.value}:{write.kind}":
            return
        seen.append(write)
        if len(seen) == int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)

    settings = replace(FAST, schedule_timeout=timedelta(seconds=1.5))
    diagnosis = GROUPS if "--lab" in flags else DiagnosisSettings()
    remediator = Remediator(api, store, diagnose=ApiRediagnosis(api, diagnosis), settings=settings,
                            on_step=on_step, on_write=on_write)  # fmt: skip
    print(remediator.run(int(raw_id)).value, flush=True)


if __name__ == "__main__":
    main()
