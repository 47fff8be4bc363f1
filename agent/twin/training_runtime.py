"""The twin's running training jobs: are they training, blocked or waiting, and what does it cost.

Started by `cluster.TwinCluster`. For each Kubeflow job (pods labelled
`training.kubeflow.org/job-name`) it works out the flows the job needs (workers to the
coordinator, the all-reduce ring, an MPI launcher to its workers), asks the `Dataplane` whether
each may pass, and sets the job's phase: TRAINING (all pods running, every flow allowed; step time
and GPU utilization from `training`), BLOCKED (a flow is denied) or WAITING. A pod that dials a
denied peer retries `connect_attempts` times `connect_retry_seconds` apart (the workload's own
retry behaviour when its pod says so: annotations `twin.zonemedic.io/connect-attempts` and
`twin.zonemedic.io/connect-retry-seconds`), each a Hubble policy drop (and a Cilium `PacketDrop`
Event through the drop event emitter, when one is given), then gives up: it exits with Error via
the kubelet, which restarts it with back-off (CrashLoopBackOff) or, under `restartPolicy: Never`,
fails the pod (its controller replaces it until its backoffLimit is used up, then the batch Job
fails).

A JobSet's pods (labelled `jobset.sigs.k8s.io/jobset-name`: a Kubeflow TrainJob's, or a JobSet
run on its own) run the same way, the gang as `jobset_gang` finds it: torch `node` ranks dial
rank 0 on the master port plus the all-reduce ring between every node; an MPI launcher dials
every node on the SSH port and holds no GPU rank; initializers run before training, outside the
gang; the model parameters (annotations below) come from the JobSet, or its TrainJob.

Generic groups declared by the scenario (groups.py: a coordinator, e.g. a Deployment's pod, and
workers, e.g. a batch Job's pods) run the same way: every worker dials the coordinator on the
group's port and its neighbour in the workers' all-reduce ring; the workers are the GPU ranks and
train only while the coordinator runs and every flow passes. A blocked group worker gives up as
any worker does (per its retry behaviour). It accounts transmitted bytes per pod and per pair of
pods over model time: while a job trains, each participant sends its all-reduce bytes
(`bytes_sent_per_step` per step) to the next participant of the ring (participants in name order),
so pair (a, b) carries that rate when b follows a. The exporter reads utilization, bytes (per pod
and per pair) and drops from here, and the API server's `pods/log` what one pod's workload is doing
(`activity`: the job's phase, the peers it fails to reach and how many times it tried, training
progress). It reacts to events and its own timers only (no polling) and does not write objects
itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from agent.twin import jobset_gang
from agent.twin.apierror import ApiError
from agent.twin.clock import TwinClock
from agent.twin.controller import Controller, Subscription
from agent.twin.dataplane import Dataplane, DropReason
from agent.twin.dropevents import DropEventEmitter
from agent.twin.groups import GroupRole, TrainingGroup
from agent.twin.kubelet import Kubelet
from agent.twin.operator_kinds import (
    KINDS,
    LABEL_JOB_NAME,
    LABEL_JOB_ROLE,
    TrainingKind,
    job_port,
    replica_counts,
)
from agent.twin.resources import lookup
from agent.twin.store import Store
from agent.twin.training import (
    JobPhase,
    StepTiming,
    TrainingParams,
    bytes_sent_per_step,
    gpu_utilization,
    step_timing,
)
from agent.twin.watch import WatchEvent

log = logging.getLogger(__name__)

PODS = lookup("pods")
BATCH_JOBS = lookup("jobs", group="batch")
JOBSETS = lookup("jobsets")
TRAINJOBS = lookup("trainjobs")
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
COMPUTE_ANNOTATION = "twin.zonemedic.io/compute-seconds"
STEPS_ANNOTATION = "twin.zonemedic.io/steps"  # the job succeeds after this many training steps
GRADIENT_ANNOTATION = "twin.zonemedic.io/gradient-bytes"
ATTEMPTS_ANNOTATION = "twin.zonemedic.io/connect-attempts"  # a pod's tries before it gives up
RETRY_ANNOTATION = "twin.zonemedic.io/connect-retry-seconds"  # ... and the wait between two
PodKey = tuple[str, str]
PairKey = tuple[str, str, str]  # namespace, sending pod, receiving pod


@dataclass(frozen=True)
class DropKey:
    reason: str
    source_namespace: str
    source_pod: str
    destination_namespace: str
    destination_pod: str


@dataclass(frozen=True)
class Flow:
    dialer: str  # pod name
    peer: str
    port: int


@dataclass
class JobState:
    phase: JobPhase = JobPhase.WAITING
    timing: StepTiming | None = None
    participants: tuple[str, ...] = ()
    denied: tuple[tuple[Flow, DropReason], ...] = ()


@dataclass(frozen=True)
class PodActivity:
    """What the training model says one pod's workload is doing, for its log (model seconds)."""

    job: str
    phase: JobPhase
    ranks: int  # the job's ranks running
    participant: bool  # a rank of the job (an MPI launcher is not)
    dials: tuple[tuple[str, int], ...]  # (peer, port) this pod dials and cannot reach
    refused: tuple[str, ...]  # peers that dial this pod and cannot reach it
    attempts: int  # failed connection attempts of the current container
    crashed: tuple[str, int, int] | None  # the last run that gave up: (peer, port, attempts)
    exits: bool  # False: it keeps retrying without giving up
    connect_attempts: int
    retry_seconds: float
    step_seconds: float | None
    utilization: float  # 0..1
    steps: float
    target: float | None
    speed: float


@dataclass
class _Traffic:
    total: float = 0.0
    rate: float = 0.0
    since: float = 0.0


@dataclass
class _Progress:
    steps: float = 0.0
    rate: float = 0.0  # steps per model second
    since: float = 0.0
    target: float | None = None
    done: bool = False
    job_uid: str = ""

    def at(self, now: float) -> float:
        return self.steps + self.rate * (now - self.since)


@dataclass
class _Attempts:
    generation: tuple[str, int]
    limit: int  # tries before the pod gives up
    retry_seconds: float
    done: int = 0
    flows: list[tuple[Flow, DropReason]] = field(default_factory=list)
    active: bool = False  # an attempt is queued


def retry_behaviour(pod: Mapping[str, Any], params: TrainingParams) -> tuple[int, float]:
    """(tries, seconds between two) for a pod dialling a denied peer: its annotations when set
    and readable, else the scenario's training parameters."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    attempts, retry = params.connect_attempts, params.connect_retry_seconds
    try:
        attempts = max(1, int(annotations.get(ATTEMPTS_ANNOTATION, attempts)))
        retry = max(0.0, float(annotations.get(RETRY_ANNOTATION, retry)))
    except ValueError:
        log.warning("pod %s: unreadable retry annotations %s",
                    (pod.get("metadata") or {}).get("name"), dict(annotations))  # fmt: skip
    return attempts, retry


def _container_running(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    statuses = status.get("containerStatuses") or []
    return bool(statuses) and all("running" in (cs.get("state") or {}) for cs in statuses)


def _restarts(pod: Mapping[str, Any]) -> int:
    return max(
        (
            int(cs.get("restartCount", 0))
            for cs in (pod.get("status") or {}).get("containerStatuses") or []
        ),
        default=0,
    )


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def group_flows(coordinator: str | None, workers: Sequence[str], *, port: int) -> list[Flow]:
    """Who dials whom in a generic group: each worker the coordinator, and each worker the next
    in the workers' all-reduce ring."""
    flows = [Flow(w, coordinator, port) for w in workers] if coordinator is not None else []
    ring = sorted(workers)
    if len(ring) > 1:
        for i, n in enumerate(ring):
            if len(ring) == 2 and i == 1:
                break
            flows.append(Flow(n, ring[(i + 1) % len(ring)], port))
    return flows


def flows_for(roles: Mapping[str, str], *, port: int) -> list[Flow]:
    """Who dials whom, given each pod's role (master, launcher, or "" for a rank): every rank
    dials the coordinator (an MPI launcher dials every rank instead), and each rank the next in
    the all-reduce ring (the coordinator first)."""
    names = sorted(roles)
    coordinator = next((n for n in names if roles[n] in ("master", "launcher")), None)
    flows: list[Flow] = []
    if coordinator is not None:
        for n in names:
            if n == coordinator:
                continue
            if roles[coordinator] == "launcher":
                if roles[n] != "launcher":
                    flows.append(Flow(coordinator, n, port))
            else:
                flows.append(Flow(n, coordinator, port))
    ring = [n for n in names if roles[n] != "launcher"]
    ring.sort(key=lambda n: (n != coordinator, n))
    if len(ring) > 1:
        for i, n in enumerate(ring):
            flow = Flow(n, ring[(i + 1) % len(ring)], port)
            if flow not in flows and not (len(ring) == 2 and i == 1):
                flows.append(flow)
    return flows


def required_flows(pods: Sequence[Mapping[str, Any]], *, port: int) -> list[Flow]:
    """Who dials whom in a Kubeflow v1 job: roles from `training.kubeflow.org/job-role`."""
    roles = {
        _name(p): ((p.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB_ROLE, "")
        for p in pods
    }
    return flows_for(roles, port=port)


class TrainingRuntime(Controller):
    def __init__(
        self,
        store: Store,
        *,
        clock: TwinClock,
        dataplane: Dataplane,
        kubelet: Kubelet,
        params: TrainingParams,
        groups: Sequence[TrainingGroup] = (),
        drop_events: DropEventEmitter | None = None,
    ) -> None:
        super().__init__(store, name="training-runtime", clock=clock)
        self._drop_events = drop_events
        self._groups = {(g.namespace, g.name): g for g in groups}
        self._clock = clock
        self._dataplane = dataplane
        self._kubelet = kubelet
        self._params = params
        self._lock = threading.Lock()
        self._jobs: dict[PodKey, JobState] = {}
        self._pod_job: dict[PodKey, PodKey] = {}
        self._traffic: dict[PodKey, _Traffic] = {}
        self._pairs: dict[PairKey, _Traffic] = {}
        self._pairs_of_pod: dict[PodKey, set[PairKey]] = {}
        self._pair_zones: dict[PairKey, tuple[str, str]] = {}
        # bytes of pairs whose pod is gone, by (from zone, to zone): the zone totals never drop
        self._retired_zone_bytes: dict[tuple[str, str], float] = {}
        self._job_pairs: dict[PodKey, set[PairKey]] = {}
        self._attempts: dict[PodKey, _Attempts] = {}
        self._drops: dict[DropKey, int] = {}
        self._progress: dict[PodKey, _Progress] = {}
        self._crashes: dict[PodKey, tuple[str, int, int]] = {}
        # workload -> what it is ("job", "jobset", "group") and the selector of its pods
        self._kinds: dict[PodKey, str] = {(g.namespace, g.name): "group" for g in groups}
        self._selectors: dict[PodKey, str] = {}

    def start(self) -> None:
        self._dataplane.on_change(self._on_network_change)
        super().start()

    def _subscriptions(self) -> list[Subscription]:
        return [Subscription(PODS, self._on_pod, since="0")]

    # --- what the exporter reads ----------------------------------------------------------------

    def job_state(self, namespace: str, job: str) -> JobState:
        with self._lock:
            return self._jobs.get((namespace, job), JobState())

    def pod_utilization(self, namespace: str, pod: str) -> float:
        """0..1 for a GPU held by this pod."""
        with self._lock:
            job = self._pod_job.get((namespace, pod))
            state = self._jobs.get(job) if job else None
        if state is None or pod not in state.participants:
            return 0.0
        return gpu_utilization(state.phase, state.timing)

    def transmit_bytes(self, *, at: float) -> dict[PodKey, float]:
        """Bytes each live pod has transmitted by model time `at`: one scrape reads every
        counter at one instant, so counters that are sums of others agree exactly."""
        now = at
        with self._lock:
            return {k: t.total + t.rate * (now - t.since) for k, t in self._traffic.items()}

    def pair_bytes(self, *, at: float) -> dict[PairKey, tuple[float, str, str]]:
        """Bytes each live pod has sent each ring neighbour by model time `at`, and the two
        pods' zones, by (namespace, from, to)."""
        now = at
        with self._lock:
            return {
                k: (t.total + t.rate * (now - t.since), *self._pair_zones.get(k, ("", "")))
                for k, t in self._pairs.items()
            }

    def zone_bytes(self, *, at: float) -> dict[tuple[str, str], float]:
        """Bytes sent from each zone to each other zone by model time `at`, gone pods'
        included: never decreasing, as an exporter's counter is."""
        now = at
        with self._lock:
            totals = dict(self._retired_zone_bytes)
            for key, t in self._pairs.items():
                zones = self._pair_zones.get(key)
                if zones is not None:
                    totals[zones] = totals.get(zones, 0.0) + t.total + t.rate * (now - t.since)
        return {z: b for z, b in totals.items() if z[0] and z[1] and z[0] != z[1]}

    def steps(self, namespace: str, job: str) -> float:
        """Training steps the job has completed (model time)."""
        now = self._clock.now()
        with self._lock:
            progress = self._progress.get((namespace, job))
            return progress.at(now) if progress is not None else 0.0

    def drops(self) -> dict[DropKey, int]:
        with self._lock:
            return dict(self._drops)

    def activity(self, pod: Mapping[str, Any]) -> PodActivity | None:
        """What the pod's workload is doing, or None when it is no rank of a training job or
        group the twin runs."""
        meta = pod.get("metadata") or {}
        name = str(meta.get("name", ""))
        key = (str(meta.get("namespace", "")), name)
        generation = (str(meta.get("uid")), _restarts(pod))
        now = self._clock.now()
        with self._lock:
            job = self._pod_job.get(key)
            if job is None:
                return None
            state = self._jobs.get(job, JobState())
            attempts = self._attempts.get(key)
            progress = self._progress.get(job)
            steps = progress.at(now) if progress is not None else 0.0
            target = progress.target if progress is not None else None
            crashed = self._crashes.get(key)
        current = attempts is not None and attempts.generation == generation
        return PodActivity(
            job=job[1],
            phase=state.phase,
            ranks=len(state.participants),
            participant=name in state.participants,
            dials=tuple((f.peer, f.port) for f, _ in state.denied if f.dialer == name),
            refused=tuple(sorted({f.dialer for f, _ in state.denied if f.peer == name})),
            attempts=attempts.done if current and attempts is not None else 0,
            crashed=crashed,
            exits=True,  # every workload gives up after its retries
            connect_attempts=attempts.limit if attempts is not None else self._params.connect_attempts,
            retry_seconds=(attempts.retry_seconds if attempts is not None
                           else self._params.connect_retry_seconds),
            step_seconds=state.timing.step if state.timing is not None else None,
            utilization=gpu_utilization(state.phase, state.timing),
            steps=steps,
            target=target,
            speed=self._clock.speed,
        )

    # --- events ---------------------------------------------------------------------------------

    def _on_pod(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        labels = meta.get("labels") or {}
        job = labels.get(LABEL_JOB_NAME)
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if event.type == "DELETED":
            with self._lock:
                self._traffic.pop(key, None)
                self._attempts.pop(key, None)
                self._pod_job.pop(key, None)
                self._crashes.pop(key, None)
                for pair in self._pairs_of_pod.pop(key, set()):
                    gone = self._pairs.pop(pair, None)
                    zones = self._pair_zones.pop(pair, None)
                    if gone is not None and zones is not None:
                        sent = gone.total + gone.rate * (self._clock.now() - gone.since)
                        self._retired_zone_bytes[zones] = (
                            self._retired_zone_bytes.get(zones, 0.0) + sent
                        )
                    for end in pair[1:]:
                        self._pairs_of_pod.get((pair[0], end), set()).discard(pair)
        if job:
            self._queue.add(("job", key[0], str(job)))
            return
        jobset = labels.get(JOBSET_NAME)
        if jobset:
            self._queue.add(("jobset", key[0], str(jobset)))
            return
        for group in self._groups.values():
            if group.role_of(key[0], labels) is not None:
                self._queue.add(("group", key[0], group.name))

    def _on_network_change(self) -> None:
        with self._lock:
            jobs = [(key, self._kinds.get(key, "job")) for key in self._jobs]
        for (namespace, job), what in jobs:
            self._queue.add((what, namespace, job))

    def _reconcile(self, raw: Hashable) -> float | None:
        what, namespace, name = cast(tuple[str, str, str], raw)
        if what == "job":
            self._reconcile_job(namespace, name)
            return None
        if what == "jobset":
            self._reconcile_jobset(namespace, name)
            return None
        if what == "group":
            self._reconcile_group(self._groups[(namespace, name)])
            return None
        if what == "finish":
            return self._finish(namespace, name)
        return self._attempt(namespace, name)

    # --- one job --------------------------------------------------------------------------------

    def _job_object(
        self, pods: Sequence[Mapping[str, Any]]
    ) -> tuple[TrainingKind, Mapping[str, Any]] | None:
        for pod in pods:
            meta = pod.get("metadata") or {}
            for owner in meta.get("ownerReferences") or []:
                ref: Mapping[str, Any] = owner
                api, kind_name = ref.get("apiVersion", ""), ref.get("kind")
                if kind_name == "Job" and api == "batch/v1":
                    try:
                        launcher = self._store.get(
                            BATCH_JOBS, str(ref.get("name")), namespace=str(meta.get("namespace"))
                        )
                    except ApiError:
                        continue
                    refs = (launcher.get("metadata") or {}).get("ownerReferences") or []
                    ref = next((r for r in refs if r.get("controller")), {})
                    api, kind_name = ref.get("apiVersion", ""), ref.get("kind")
                kind = next(
                    (k for k in KINDS.values() if k.api_version == api and k.kind == kind_name),
                    None,
                )
                if kind is None:
                    continue
                try:
                    rt = lookup(kind.plural, group="kubeflow.org", version=kind.version)
                    return kind, self._store.get(
                        rt, str(ref.get("name")), namespace=str(meta.get("namespace"))
                    )
                except ApiError:
                    continue
        return None

    def _params_for(self, job: Mapping[str, Any]) -> TrainingParams:
        annotations = (job.get("metadata") or {}).get("annotations") or {}
        params = self._params
        try:
            compute = float(annotations.get(COMPUTE_ANNOTATION, params.compute_seconds))
            gradient = float(annotations.get(GRADIENT_ANNOTATION, params.gradient_bytes))
        except ValueError:
            return params
        return TrainingParams(
            compute, gradient, params.connect_attempts, params.connect_retry_seconds
        )

    def _reconcile_job(self, namespace: str, job_name: str) -> None:
        pods = [
            p
            for p in self._store.list(
                PODS, namespace=namespace, label_selector=f"{LABEL_JOB_NAME}={job_name}"
            )[0]
            if not (p.get("metadata") or {}).get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        found = self._job_object(pods)
        state = JobState()
        params = self._params
        target: float | None = None
        if found is not None:
            raw_target = ((found[1].get("metadata") or {}).get("annotations") or {}).get(
                STEPS_ANNOTATION
            )
            try:
                target = float(raw_target) if raw_target is not None else None
            except ValueError:
                log.warning(
                    "job %s/%s: bad %s %r", namespace, job_name, STEPS_ANNOTATION, raw_target
                )
        if found is not None and pods:
            kind, job = found
            params = self._params_for(job)
            counts = replica_counts(kind, job)
            expected = sum(counts.values())
            port = job_port(kind, job)
            running = [p for p in pods if _container_running(p)]
            denied = self._denied(pods, required_flows(pods, port=port))
            participants = [p for p in running if not _is_launcher(p)]
            names = tuple(sorted(_name(p) for p in participants))
            if denied:
                state = JobState(JobPhase.BLOCKED, None, names, tuple(denied))
            elif expected and len(running) >= expected:
                zones = [self._dataplane.zone_of(p) for p in participants]
                timing = step_timing(
                    params, ranks=len(participants), link=self._dataplane.zones.slowest(zones)
                )
                state = JobState(JobPhase.TRAINING, timing, names, ())
            else:
                state = JobState(JobPhase.WAITING, None, names, ())
        self._account(namespace, job_name, pods, state, params)
        job_uid = str(((found[1] if found else {}).get("metadata") or {}).get("uid", ""))
        self._track_progress(namespace, job_name, state, target, job_uid)
        self._schedule_attempts(namespace, pods, state)

    def _model_source(self, jobset: Mapping[str, Any]) -> Mapping[str, Any]:
        """The object whose twin annotations tune a JobSet's model: its TrainJob, if one owns
        it (the TrainJob's annotations are not copied to the JobSet), else the JobSet."""
        meta = jobset.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "TrainJob" and ref.get("controller"):
                try:
                    trainjob = self._store.get(TRAINJOBS, str(ref.get("name")),
                                               namespace=str(meta.get("namespace")))
                except ApiError:
                    break
                annotations = {**(meta.get("annotations") or {}),
                               **((trainjob.get("metadata") or {}).get("annotations") or {})}
                return {"metadata": {**trainjob["metadata"], "annotations": annotations}}
        return jobset

    def _reconcile_jobset(self, namespace: str, name: str) -> None:
        selector = f"{JOBSET_NAME}={name}"
        pods = [
            p for p in self._store.list(PODS, namespace=namespace, label_selector=selector)[0]
            if not (p.get("metadata") or {}).get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        with self._lock:
            self._kinds[(namespace, name)] = "jobset"
            self._selectors[(namespace, name)] = selector
        try:
            jobset: Mapping[str, Any] | None = self._store.get(JOBSETS, name, namespace=namespace)
        except ApiError:
            jobset = None
        state = JobState()
        params = self._params
        target: float | None = None
        members: list[Mapping[str, Any]] = []
        job_uid = ""
        if jobset is not None:
            source = self._model_source(jobset)
            job_uid = str((source.get("metadata") or {}).get("uid", ""))
            target = self._target(source, namespace, name)
            gang = jobset_gang.gang(jobset, pods)
            members = [p for p in pods if _name(p) in gang.roles]
            if members:
                params = self._params_for(source)
                running = [p for p in members if _container_running(p)]
                denied = self._denied(members, flows_for(gang.roles, port=gang.port))
                participants = [p for p in running
                                if gang.roles[_name(p)] != jobset_gang.LAUNCHER_ROLE]
                names = tuple(sorted(_name(p) for p in participants))
                if denied:
                    state = JobState(JobPhase.BLOCKED, None, names, tuple(denied))
                elif gang.expected and len(running) >= gang.expected:
                    zones = [self._dataplane.zone_of(p) for p in participants]
                    timing = step_timing(params, ranks=len(participants),
                                         link=self._dataplane.zones.slowest(zones))
                    state = JobState(JobPhase.TRAINING, timing, names, ())
                else:
                    state = JobState(JobPhase.WAITING, None, names, ())
        self._account(namespace, name, members, state, params)
        self._track_progress(namespace, name, state, target, job_uid)
        self._schedule_attempts(namespace, members, state)

    def _target(self, source: Mapping[str, Any], namespace: str, name: str) -> float | None:
        raw = ((source.get("metadata") or {}).get("annotations") or {}).get(STEPS_ANNOTATION)
        try:
            return float(raw) if raw is not None else None
        except ValueError:
            log.warning("job %s/%s: bad %s %r", namespace, name, STEPS_ANNOTATION, raw)
            return None

    def _denied(
        self, pods: Sequence[Mapping[str, Any]], flows: Sequence[Flow]
    ) -> list[tuple[Flow, DropReason]]:
        """The flows whose dialer runs and whose peer has an address, but the dataplane denies."""
        by_name = {_name(p): p for p in pods}
        denied: list[tuple[Flow, DropReason]] = []
        for flow in flows:
            src, dst = by_name[flow.dialer], by_name[flow.peer]
            if not _container_running(src) or not (dst.get("status") or {}).get("podIP"):
                continue
            result = self._dataplane.check(src, dst, flow.port)
            if not result.allowed:
                denied.append((flow, result.drop_reason or DropReason.POLICY_DENIED))
        return denied

    def _reconcile_group(self, group: TrainingGroup) -> None:
        namespace = group.namespace
        selector = ",".join(f"{k}={v}" for k, v in sorted(group.selector.items()))
        roles: dict[str, GroupRole] = {}
        members = []
        for pod in self._store.list(PODS, namespace=namespace, label_selector=selector)[0]:
            if (pod.get("metadata") or {}).get("deletionTimestamp") or (
                pod.get("status") or {}
            ).get("phase") in ("Succeeded", "Failed"):
                continue
            role = group.role_of(namespace, _labels(pod))
            if role is not None:
                roles[_name(pod)] = role
                members.append(pod)
        coordinator = min((n for n, r in roles.items() if r is GroupRole.COORDINATOR), default=None)
        worker_names = sorted(n for n, r in roles.items() if r is GroupRole.WORKER)
        denied = self._denied(members, group_flows(coordinator, worker_names, port=group.port))
        workers = [p for p in members if _name(p) in worker_names]
        running = [p for p in workers if _container_running(p)]
        names = tuple(sorted(_name(p) for p in running))
        by_name = {_name(p): p for p in members}
        coordinator_runs = coordinator is not None and _container_running(by_name[coordinator])
        if denied:
            state = JobState(JobPhase.BLOCKED, None, names, tuple(denied))
        elif coordinator_runs and workers and len(running) == len(workers):
            zones = [self._dataplane.zone_of(p) for p in running]
            timing = step_timing(
                self._params, ranks=len(running), link=self._dataplane.zones.slowest(zones)
            )
            state = JobState(JobPhase.TRAINING, timing, names, ())
        else:
            state = JobState(JobPhase.WAITING, None, names, ())
        self._account(namespace, group.name, members, state, self._params)
        self._track_progress(namespace, group.name, state, None, "")
        self._schedule_attempts(namespace, members, state)

    def _account(
        self,
        namespace: str,
        job_name: str,
        pods: Sequence[Mapping[str, Any]],
        state: JobState,
        params: TrainingParams,
    ) -> None:
        now = self._clock.now()
        rate = 0.0
        if state.phase is JobPhase.TRAINING and state.timing is not None and state.timing.step > 0:
            rate = (
                bytes_sent_per_step(len(state.participants), params.gradient_bytes)
                / state.timing.step
            )
        ring = sorted(state.participants)
        zones = {_name(p): self._dataplane.zone_of(p) for p in pods if _name(p) in ring}
        sending = {
            (namespace, a, b): rate
            for a, b in zip(ring, ring[1:] + ring[:1], strict=True)
            if a != b and rate > 0
        }
        with self._lock:
            self._jobs[(namespace, job_name)] = state
            for pod in pods:
                key = (namespace, _name(pod))
                self._pod_job[key] = (namespace, job_name)
                traffic = self._traffic.setdefault(key, _Traffic(since=now))
                _set_rate(traffic, rate if key[1] in state.participants else 0.0, now)
            known = self._job_pairs.setdefault((namespace, job_name), set())
            for pair in known | set(sending):
                found = self._pairs.get(pair)
                if found is None:
                    if pair not in sending:
                        continue  # one of its pods is gone, and its counter with it
                    found = self._pairs[pair] = _Traffic(since=now)
                    self._pair_zones[pair] = (zones.get(pair[1], ""), zones.get(pair[2], ""))
                    for end in pair[1:]:
                        self._pairs_of_pod.setdefault((namespace, end), set()).add(pair)
                _set_rate(found, sending.get(pair, 0.0), now)
            known.intersection_update(self._pairs)
            known.update(sending)

    def _track_progress(
        self, namespace: str, job_name: str, state: JobState, target: float | None, job_uid: str
    ) -> None:
        now = self._clock.now()
        rate = 0.0
        if state.phase is JobPhase.TRAINING and state.timing is not None and state.timing.step > 0:
            rate = 1.0 / state.timing.step
        with self._lock:
            progress = self._progress.get((namespace, job_name))
            if progress is None or (job_uid and progress.job_uid not in ("", job_uid)):
                progress = _Progress(since=now, job_uid=job_uid)  # a new job of that name
                self._progress[(namespace, job_name)] = progress
            progress.job_uid = progress.job_uid or job_uid
            if rate != progress.rate:
                progress.steps = progress.at(now)
                progress.since = now
                progress.rate = rate
            progress.target = target
            due = None
            if target is not None and rate > 0 and not progress.done:
                due = max(0.0, (target - progress.at(now)) / rate)
        if due is not None:
            self._queue.add_after(("finish", namespace, job_name), due)

    def _finish(self, namespace: str, job_name: str) -> float | None:
        """The job reached its step target: every pod's containers exit 0."""
        now = self._clock.now()
        with self._lock:
            progress = self._progress.get((namespace, job_name))
            if progress is None or progress.done or progress.target is None:
                return None
            if progress.at(now) < progress.target:
                return (
                    (progress.target - progress.at(now)) / progress.rate
                    if progress.rate > 0
                    else None
                )
            progress.steps = progress.target
            progress.rate = 0.0
            progress.since = now
            progress.done = True
        with self._lock:
            selector = self._selectors.get((namespace, job_name), f"{LABEL_JOB_NAME}={job_name}")
        for pod in self._store.list(PODS, namespace=namespace, label_selector=selector)[0]:
            self._kubelet.complete(namespace, _name(pod))
        return None

    def _schedule_attempts(
        self, namespace: str, pods: Sequence[Mapping[str, Any]], state: JobState
    ) -> None:
        by_dialer: dict[str, list[tuple[Flow, DropReason]]] = {}
        for flow, reason in state.denied:
            by_dialer.setdefault(flow.dialer, []).append((flow, reason))
        for pod in pods:
            name = _name(pod)
            key = (namespace, name)
            flows = by_dialer.get(name)
            generation = (str((pod.get("metadata") or {}).get("uid")), _restarts(pod))
            start = False
            with self._lock:
                current = self._attempts.get(key)
                if not flows:
                    if current is not None:
                        current.flows = []
                    continue
                if current is None or current.generation != generation:
                    limit, retry = retry_behaviour(pod, self._params)
                    current = _Attempts(generation, limit, retry, 0, flows)
                    self._attempts[key] = current
                current.flows = flows
                start = not current.active
                current.active = True
            if start:
                self._queue.add(("attempt", namespace, name))

    def _attempt(self, namespace: str, name: str) -> float | None:
        key = (namespace, name)
        try:
            pod = self._store.get(PODS, name, namespace=namespace)
        except ApiError:
            return None
        if not _container_running(pod):
            with self._lock:
                stale = self._attempts.get(key)
                if stale is not None:
                    stale.active = False
            return None
        generation = (str((pod.get("metadata") or {}).get("uid")), _restarts(pod))
        with self._lock:
            attempts = self._attempts.get(key)
            if attempts is None or attempts.generation != generation or not attempts.flows:
                if attempts is not None:
                    attempts.active = False
                return None
            for flow, reason in attempts.flows:
                drop = DropKey(reason.value, namespace, flow.dialer, namespace, flow.peer)
                self._drops[drop] = self._drops.get(drop, 0) + 1
            attempts.done += 1
            done = attempts.done
            first = attempts.flows[0][0]
            flows = [flow for flow, _ in attempts.flows]
            gives_up = done >= attempts.limit
            retry = attempts.retry_seconds
            if gives_up:
                attempts.active = False
                self._crashes[key] = (first.peer, first.port, done)
        if self._drop_events is not None:
            self._emit_drops(namespace, pod, flows)
        if gives_up:
            self._kubelet.crash(
                namespace, name,
                message=f"RuntimeError: connect() to {first.peer}:{first.port} timed out "
                f"after {done} attempts (network policy drop)",
            )  # fmt: skip
            return None
        return retry


    def _emit_drops(self, namespace: str, pod: Mapping[str, Any], flows: Sequence[Flow]) -> None:
        """Cilium's drop events of one denied attempt (the dataplane says at which hop)."""
        assert self._drop_events is not None
        for flow in flows:
            try:
                peer = self._store.get(PODS, flow.peer, namespace=namespace)
            except ApiError:
                continue
            result = self._dataplane.check(pod, peer, flow.port)
            self._drop_events.emit(pod, peer, port=flow.port, result=result)


def _set_rate(traffic: _Traffic, rate: float, now: float) -> None:
    """Change a counter's rate at `now`, keeping what it counted so far."""
    if rate != traffic.rate:
        traffic.total += traffic.rate * (now - traffic.since)
        traffic.since = now
        traffic.rate = rate


def _is_launcher(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB_ROLE) == "launcher"
