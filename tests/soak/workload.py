"""The soak's changing workload on the twin: training jobs created (each splits across zones by
construction: a CPU master lands in the CPU zone, GPU workers in the GPU zone), deleted, their
namespace's zone-boundary policies removed (healed: the block goes, the split stays) and added
back, nodes cordoned and uncordoned. Writes go to the twin's store in-process (the cluster's
other users), so the API server's write log holds only the agents' writes.

Besides PyTorchJobs it makes generic coordinator/worker groups (a coordinator Deployment
`<group>-coord` and a worker batch Job `<group>-workers`), declared in advance to the twin and to
the agents' `diagnosis.groups` (`GROUPS`: `GROUP_SLOTS` names, each in a fixed namespace, used
once each). Three shapes (`GroupShape`): `recreate` (a 1-GPU coordinator lands in the GPU zone,
CPU-only workers in the CPU zone: the fix recreates the worker Job, delete then create),
`rollout` (a CPU coordinator, GPU workers: the fix rolls the Deployment out) and `together`
(every pod CPU-only, in the CPU zone: never split).

Namespaces: `soak-0..2` ordinary, `soak-auto` (the playbook co-locates there without asking),
`soak-protected` (a protected namespace: never remediated). A share of the jobs and groups in
`soak-0` carry the Kueue queue label (never remediated either). `Workload.jobs` records every job
and group made (a group's record has kind `Group` and its group name).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agent.twin.apierror import ApiError
from agent.twin.cluster import TwinCluster
from agent.twin.groups import TrainingGroup
from agent.twin.patch import PatchType
from agent.twin.resources import lookup

ZONE = "topology.kubernetes.io/zone"
ORDINARY = ("soak-0", "soak-1", "soak-2")
AUTO = "soak-auto"
PROTECTED = "soak-protected"
NAMESPACES = (*ORDINARY, AUTO, PROTECTED)
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
ZONES = ("us-east-1a", "us-east-1b")
MAX_LIVE = 6  # jobs and groups alive at once (at most 2 GPUs each: the GPU zone holds 16)
GROUP_SHARE = 0.4  # of the creations, while group names remain
GROUP_SLOTS = 150  # generic groups declared in advance (each name used once)
GROUP_LABEL = "soak.zonemedic.io/group"
GROUP_PORT = 29500
# the namespace of group slot i (i modulo its length): the jobs' namespace weights, spelled out
GROUP_NAMESPACES = ("soak-0", "soak-1", "soak-2", AUTO, "soak-0", "soak-1", "soak-2",
                    PROTECTED, "soak-0", "soak-1", "soak-2", AUTO)

PYTORCHJOBS = lookup("pytorchjobs")
DEPLOYMENTS = lookup("deployments", group="apps")
BATCH_JOBS = lookup("jobs", group="batch")
POLICIES = lookup("ciliumnetworkpolicies")
NODES = lookup("nodes")
NAMESPACE = lookup("namespaces")


class GroupShape(StrEnum):
    RECREATE = "recreate"  # GPU coordinator, CPU workers: the fix recreates the worker Job
    ROLLOUT = "rollout"  # CPU coordinator, GPU workers: the fix rolls the Deployment out
    TOGETHER = "together"  # every pod CPU-only, one zone: never split


@dataclass
class JobRecord:
    namespace: str
    name: str
    uid: str  # a group's: its worker Job's first uid
    created: float
    kueue: bool
    deleted: float | None = None
    kind: str = "PyTorchJob"  # or "Group"
    shape: GroupShape | None = None  # a group's


def group_name(slot: int) -> str:
    return f"grp-{slot}"


def coordinator_name(group: str) -> str:
    return f"{group}-coord"


def workers_name(group: str) -> str:
    return f"{group}-workers"


def group_of_object(name: str) -> str | None:
    """The group whose Deployment or worker Job this object name is (None: not a group's)."""
    for suffix in ("-coord", "-workers"):
        if name.startswith("grp-") and name.endswith(suffix):
            return name.removesuffix(suffix)
    return None


GROUPS = tuple(
    TrainingGroup(name=group_name(i), namespace=GROUP_NAMESPACES[i % len(GROUP_NAMESPACES)],
                  selector={GROUP_LABEL: group_name(i)}, coordinator={"role": "coordinator"},
                  workers={"role": "worker"}, ports=(GROUP_PORT,))
    for i in range(GROUP_SLOTS)
)


@dataclass
class WorkloadCounts:
    created: int = 0
    groups: int = 0
    deleted: int = 0
    healed: int = 0
    blocked: int = 0
    cordoned: int = 0
    uncordoned: int = 0


def job_manifest(namespace: str, name: str, *, kueue: bool) -> dict[str, Any]:
    labels = {KUEUE_QUEUE: "soak-queue"} if kueue else {}

    def spec(replicas: int, *, gpu: bool) -> dict[str, Any]:
        resources: dict[str, Any] = {"requests": {"cpu": "2", "memory": "8Gi"}}
        template: dict[str, Any] = {"containers": [{
            "name": "pytorch", "image": "registry.example.com/soak:1",
            "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
            "resources": resources}]}
        if gpu:
            resources["requests"]["nvidia.com/gpu"] = "1"
            resources["limits"] = {"nvidia.com/gpu": "1"}
            template["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists",
                                        "effect": "NoSchedule"}]
        return {"replicas": replicas, "restartPolicy": "OnFailure",
                "template": {"metadata": {"labels": {"app": name, **labels}}, "spec": template}}

    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"runPolicy": {"suspend": False},
                 "pytorchReplicaSpecs": {"Master": spec(1, gpu=False),
                                         "Worker": spec(2, gpu=True)}},
    }


def _group_pod(group: str, role: str, *, gpu: bool, kueue: bool) -> dict[str, Any]:
    labels = {GROUP_LABEL: group, "role": role, **({KUEUE_QUEUE: "soak-queue"} if kueue else {})}
    resources: dict[str, Any] = {"requests": {"cpu": "2", "memory": "8Gi"}}
    spec: dict[str, Any] = {"containers": [{
        "name": "main", "image": "registry.example.com/soak-group:1",
        "ports": [{"containerPort": GROUP_PORT, "protocol": "TCP"}], "resources": resources}]}
    if gpu:
        resources["requests"]["nvidia.com/gpu"] = "1"
        resources["limits"] = {"nvidia.com/gpu": "1"}
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists",
                                "effect": "NoSchedule"}]
    return {"metadata": {"labels": labels}, "spec": spec}


def coordinator_manifest(namespace: str, group: str, *, shape: GroupShape,
                         kueue: bool) -> dict[str, Any]:
    """The group's coordinator: a one-replica Deployment (a GPU pod in the `recreate` shape)."""
    template = _group_pod(group, "coordinator", gpu=shape is GroupShape.RECREATE, kueue=kueue)
    labels = {GROUP_LABEL: group, **({KUEUE_QUEUE: "soak-queue"} if kueue else {})}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": coordinator_name(group), "namespace": namespace, "labels": labels},
        "spec": {"replicas": 1,
                 "selector": {"matchLabels": {GROUP_LABEL: group, "role": "coordinator"}},
                 "template": template},
    }


def workers_manifest(namespace: str, group: str, *, shape: GroupShape,
                     kueue: bool) -> dict[str, Any]:
    """The group's two workers: a batch Job (GPU pods in the `rollout` shape); a blocked worker
    gives up and is restarted (OnFailure), so the Job never fails."""
    template = _group_pod(group, "worker", gpu=shape is GroupShape.ROLLOUT, kueue=kueue)
    template["spec"]["restartPolicy"] = "OnFailure"
    labels = {GROUP_LABEL: group, **({KUEUE_QUEUE: "soak-queue"} if kueue else {})}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": workers_name(group), "namespace": namespace, "labels": labels},
        "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 1000, "template": template},
    }


def boundary_policy(namespace: str, zone: str) -> dict[str, Any]:
    return {
        "apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
        "metadata": {"name": f"zone-boundary-{zone}", "namespace": namespace},
        "spec": {"endpointSelector": {"matchLabels": {"netpol.example.com/zone": zone}},
                 "ingress": [{"fromEndpoints": [{"matchLabels": {"netpol.example.com/zone": zone}}]}]},
    }


@dataclass
class Workload:
    cluster: TwinCluster
    rng: random.Random
    jobs: list[JobRecord] = field(default_factory=list)
    counts: WorkloadCounts = field(default_factory=WorkloadCounts)
    groups_made: int = 0
    healed: set[str] = field(default_factory=set)
    cordoned: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    log: list[str] = field(default_factory=list)

    def setup(self) -> None:
        store = self.cluster.store
        for ns in NAMESPACES:
            store.create(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": ns, "labels": {"soak": "yes"}}})
            for zone in ZONES:
                store.create(POLICIES, boundary_policy(ns, zone), namespace=ns)

    def live(self) -> list[JobRecord]:
        return [j for j in self.jobs if j.deleted is None]

    def step(self) -> str:
        """One random change; returns (and logs) what it did."""
        done = self._step()
        if done != "idle":
            self.log.append(f"{time.strftime('%H:%M:%S')} {done}")
        return done

    def _step(self) -> str:
        roll = self.rng.random()
        live = self.live()
        if roll < 0.45 and len(live) < MAX_LIVE:
            return self._create()
        if roll < 0.60 and live:
            return self._delete(self.rng.choice(live))
        if roll < 0.75:
            return self._toggle_policies(self.rng.choice(NAMESPACES))
        if roll < 0.90:
            return self._cordon()
        if len(live) < MAX_LIVE:
            return self._create()
        return "idle"

    def _create(self) -> str:
        if self.groups_made < len(GROUPS) and self.rng.random() < GROUP_SHARE:
            return self._create_group()
        n = len(self.jobs)
        weights = [3, 3, 3, 2, 1]
        ns = self.rng.choices(NAMESPACES, weights=weights)[0]
        kueue = ns == "soak-0" and self.rng.random() < 0.3
        name = f"job-{n}"
        created = self.cluster.store.create(PYTORCHJOBS, job_manifest(ns, name, kueue=kueue),
                                            namespace=ns)
        with self.lock:
            self.jobs.append(JobRecord(ns, name, str(created["metadata"]["uid"]), time.time(),
                                       kueue))
        self.counts.created += 1
        return f"create {ns}/{name}{' (kueue)' if kueue else ''}"

    def _create_group(self) -> str:
        group = GROUPS[self.groups_made]
        self.groups_made += 1
        ns = group.namespace
        kueue = ns == "soak-0" and self.rng.random() < 0.3
        shape = self.rng.choices(list(GroupShape), weights=[5, 3, 2])[0]
        store = self.cluster.store
        store.create(DEPLOYMENTS, coordinator_manifest(ns, group.name, shape=shape, kueue=kueue),
                     namespace=ns)
        created = store.create(BATCH_JOBS, workers_manifest(ns, group.name, shape=shape,
                                                            kueue=kueue), namespace=ns)
        with self.lock:
            self.jobs.append(JobRecord(ns, group.name, str(created["metadata"]["uid"]),
                                       time.time(), kueue, kind="Group", shape=shape))
        self.counts.created += 1
        self.counts.groups += 1
        return f"create group {ns}/{group.name} {shape.value}{' (kueue)' if kueue else ''}"

    def _delete(self, job: JobRecord) -> str:
        if job.kind == "Group":
            for rt, name in ((DEPLOYMENTS, coordinator_name(job.name)),
                             (BATCH_JOBS, workers_name(job.name))):
                with contextlib.suppress(ApiError):  # the agent may be recreating it
                    self.cluster.store.delete(rt, name, namespace=job.namespace)
            job.deleted = time.time()
            self.counts.deleted += 1
            return f"delete group {job.namespace}/{job.name}"
        self.cluster.store.delete(PYTORCHJOBS, job.name, namespace=job.namespace)
        job.deleted = time.time()
        self.counts.deleted += 1
        return f"delete {job.namespace}/{job.name}"

    def _toggle_policies(self, ns: str) -> str:
        store = self.cluster.store
        if ns in self.healed:
            for zone in ZONES:
                store.create(POLICIES, boundary_policy(ns, zone), namespace=ns)
            self.healed.discard(ns)
            self.counts.blocked += 1
            return f"block {ns}"
        for zone in ZONES:
            store.delete(POLICIES, f"zone-boundary-{zone}", namespace=ns)
        self.healed.add(ns)
        self.counts.healed += 1
        return f"heal {ns}"

    def _cordon(self) -> str:
        """Cordon one node for a few seconds (at most one at a time), or uncordon the due one."""
        now = time.time()
        for node, until in list(self.cordoned.items()):
            if now >= until:
                return self._set_cordon(node, False)
        if self.cordoned:
            return "idle"
        nodes = [n["metadata"]["name"] for n in self.cluster.store.list(NODES)[0]]
        return self._set_cordon(self.rng.choice(sorted(nodes)), True,
                                until=now + self.rng.uniform(2, 6))

    def _set_cordon(self, node: str, on: bool, *, until: float = 0.0) -> str:
        self.cluster.store.patch(NODES, node, {"spec": {"unschedulable": on}},
                                 patch_type=PatchType.MERGE)
        if on:
            self.cordoned[node] = until
            self.counts.cordoned += 1
        else:
            self.cordoned.pop(node, None)
            self.counts.uncordoned += 1
        return f"{'cordon' if on else 'uncordon'} {node}"

    def calm(self) -> None:
        """End of the changes: every node schedulable again."""
        for node in list(self.cordoned):
            self._set_cordon(node, False)
