"""The whole twin in one object: store, controllers, dataplane, training runtime, metrics, clock.

Built by `zonemedic twin up`, the end-to-end tests, the benchmarks and the demo. `TwinCluster`
wires the API server's `Store` to the scheduler, kubelet, training operator, batch Job and
Deployment controllers, the JobSet and Kubeflow Trainer controllers and their webhooks (for the
scenario's Trainer release, whose CRDs it installs), Kueue (when the scenario runs it), the
dataplane (with Cilium's drop event emitter), the training runtime and the metrics endpoint, then
seeds the scenario's nodes, namespaces and objects through the store (so every controller sees them
as watch events, like a real cluster's). `--speed` scales every model duration. It does not serve the Kubernetes HTTP API
itself: `cluster.serve_api()` starts the API helper's `ApiServer` on the same store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agent.twin import admission_jobset, admission_trainjob
from agent.twin.access import Access, serve_as_service_account
from agent.twin.apierror import ApiError
from agent.twin.apiserver import ApiServer
from agent.twin.clock import TwinClock
from agent.twin.dataplane import Dataplane, PolicyCompiler
from agent.twin.dataplane_policy import compile_policies
from agent.twin.dropevents import DropEventEmitter
from agent.twin.exporter import MetricsServer, TwinCollector
from agent.twin.gc import DanglingCollector
from agent.twin.gitops_sync import INSTANCE_LABEL, GitOpsSync
from agent.twin.gitops_sync import MANAGER as GITOPS_MANAGER
from agent.twin.kubelet import Kubelet
from agent.twin.kueue import Kueue
from agent.twin.managed_fields import acting_as
from agent.twin.operator_batchjob import JobController, template_admission
from agent.twin.operator_deployment import DeploymentController
from agent.twin.operator_jobset import JobSetController
from agent.twin.operator_training import TrainingOperator
from agent.twin.operator_trainjob import TrainJobController
from agent.twin.resources import UnknownResourceError, by_kind, lookup
from agent.twin.scenario import Scenario, ScenarioError
from agent.twin.scheduler import Scheduler
from agent.twin.store import Store
from agent.twin.training_runtime import TrainingRuntime

log = logging.getLogger(__name__)


class TwinCluster:
    def __init__(
        self,
        scenario: Scenario,
        *,
        speed: float = 1.0,
        store: Store | None = None,
        metrics_port: int = 0,
        compiler: PolicyCompiler = compile_policies,
    ) -> None:
        self.scenario = scenario
        self.clock = TwinClock(speed)
        release = scenario.trainer_release
        self.store = store if store is not None else Store(trainer_release=release)
        if store is not None:
            self.store.install_crds(release)
        self.store.add_admission(lookup("jobs", group="batch"), template_admission)
        admission_jobset.register(self.store)
        admission_trainjob.register(self.store, release=release)
        model = scenario.model
        self.scheduler = Scheduler(self.store, clock=self.clock, seed=scenario.seed)
        self.kubelet = Kubelet(
            self.store,
            clock=self.clock,
            start_seconds=model.pod_start_seconds,
            stop_seconds=model.pod_stop_seconds,
            pod_zone_label=model.pod_zone_label,
            crash_backoff_seconds=model.crash_backoff_seconds,
            crash_backoff_max_seconds=model.crash_backoff_max_seconds,
        )
        self.training_operator = TrainingOperator(self.store, clock=self.clock)
        self.job_controller = JobController(self.store, clock=self.clock)
        self.deployment_controller = DeploymentController(self.store, clock=self.clock)
        self.jobset_controller = JobSetController(self.store, clock=self.clock)
        self.trainjob_controller = TrainJobController(self.store, clock=self.clock, release=release)
        self.garbage_collector = DanglingCollector(self.store, clock=self.clock)
        self.kueue = (
            Kueue(self.store, clock=self.clock, frameworks=scenario.kueue.frameworks,
                  trainer_release=release)
            if scenario.kueue is not None
            else None
        )
        self.dataplane = Dataplane(self.store, zones=model.zones, compiler=compiler)
        self.drop_events = DropEventEmitter(
            self.store, clock=self.clock, interval=model.drop_event_interval
        )
        self.runtime = TrainingRuntime(
            self.store,
            clock=self.clock,
            dataplane=self.dataplane,
            kubelet=self.kubelet,
            params=model.training,
            groups=scenario.groups,
            drop_events=self.drop_events,
        )
        self.metrics = MetricsServer(
            TwinCollector(
                self.store,
                kubelet=self.kubelet,
                runtime=self.runtime,
                clock=self.clock,
                jitter_amplitude=model.utilization_jitter,
            ),
            port=metrics_port,
        )
        self.gitops = (
            GitOpsSync(self.store, clock=self.clock, manifests=self._synced(),
                       application=scenario.gitops.application,
                       interval=scenario.gitops.interval_seconds)
            if scenario.gitops is not None else None
        )  # fmt: skip
        self.api: ApiServer | None = None
        self._controllers: list[Any] = [
            self.dataplane,
            self.scheduler,
            self.kubelet,
            self.training_operator,
            self.job_controller,
            self.deployment_controller,
            self.jobset_controller,
            self.trainjob_controller,
            self.garbage_collector,
            self.runtime,
            *([self.kueue] if self.kueue is not None else []),
            *([self.gitops] if self.gitops is not None else []),
        ]
        self._started = False

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> TwinCluster:
        for controller in self._controllers:
            controller.start()
        self._started = True
        try:
            self.seed()
        except BaseException:
            self.stop()  # a scenario that cannot be seeded leaves nothing running
            raise
        self.metrics.start()
        return self

    def serve_api(self, *, port: int = 0) -> ApiServer:
        """The API over HTTP with no authentication (every request is the admin)."""
        self.api = ApiServer(self.store, port=port, pod_activity=self.runtime).start()
        return self.api

    def serve_api_as(
        self, documents: Sequence[Mapping[str, Any]], *, port: int = 0, tls: bool = True
    ) -> Access:
        """The API over HTTP(S) with RBAC: the manifests' RBAC objects loaded, a token for the
        ServiceAccount they bind and one for the admin (access.py)."""
        access = serve_as_service_account(self.store, documents, port=port, tls=tls,
                                          pod_activity=self.runtime)
        self.api = access.server
        return access

    def stop(self) -> None:
        if self.api is not None:
            self.api.stop()
        self.metrics.stop()
        for controller in reversed(self._controllers):
            controller.stop()
        self.store.close()

    def __enter__(self) -> TwinCluster:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # --- seeding --------------------------------------------------------------------------------

    def _synced(self) -> list[Mapping[str, Any]]:
        """The scenario's objects its GitOps application manages (its instance label)."""
        gitops = self.scenario.gitops
        if gitops is None:
            return []
        return [o for o in self.scenario.objects
                if ((o.get("metadata") or {}).get("labels") or {}).get(INSTANCE_LABEL)
                == gitops.application]  # fmt: skip

    def seed(self) -> None:
        """Create the scenario's nodes, namespaces and objects (in that order); the objects a
        GitOps application manages are created by its first sync (as `argocd-controller`)."""
        synced = {id(o) for o in self._synced()}
        for where, objs in (
            ("nodes", self.scenario.nodes),
            ("namespaces", self.scenario.namespaces),
            ("objects", [o for o in self.scenario.objects if id(o) not in synced]),
        ):
            for index, obj in enumerate(objs):
                self.apply(obj, where=f"{self.scenario.name}: {where}[{index}]")
        if self.gitops is not None:
            with acting_as(GITOPS_MANAGER):
                for manifest in self.gitops.manifests:
                    self.gitops.apply(manifest)

    def apply(self, obj: Mapping[str, Any], *, where: str = "object") -> dict[str, Any]:
        try:
            rt = by_kind(str(obj.get("apiVersion")), str(obj.get("kind")))
        except UnknownResourceError as exc:
            raise ScenarioError(f"{where}: {exc}") from exc
        if not self.store.serves(rt):
            raise ScenarioError(f"{where}: {rt.group} objects need Kueue: add `kueue: true` to "
                                "the scenario")
        try:
            return self.store.create(rt, obj)
        except ApiError as exc:
            if exc.code == 409 and rt.plural == "namespaces":
                return self.store.get(rt, str((obj.get("metadata") or {}).get("name")))
            raise ScenarioError(f"{where}: {exc.message}") from exc

    # --- for tests and benchmarks ---------------------------------------------------------------

    def idle(self) -> bool:
        return all(c.idle() for c in self._controllers if hasattr(c, "idle"))

    def wait_until(self, predicate: Any, *, timeout: float = 30.0, interval: float = 0.05) -> bool:
        """Poll `predicate()` until true (tests only; the twin itself never polls)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(interval)
        return bool(predicate())
