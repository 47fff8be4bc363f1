"""`JobKey`: how sources name a training job (kind, namespace, name) before the core sees it.

Used by the Kubernetes cache's indexes, the Prometheus source (per-job utilization) and the
Alertmanager mapping. Plain data; the core's own `JobRef` is built from it by the runtime glue.
"""

from __future__ import annotations

from typing import NamedTuple


class JobKey(NamedTuple):
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"
