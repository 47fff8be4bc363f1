"""What the remediation reads from the cluster: the job, its pods, nodes, pods on nodes, workloads.

Called by the remediation run (`agent.remediation.recheck` before planning and before the first
write, the families' steps while they wait, `agent.remediation.remediator` while verifying), and by
the agent's plan preview (`agent.runtime.plan_previews`) when a finding opens an incident. Reads
only (GET and LIST through `KubeApi`, JSON as the API returns it); the writes live in
`agent.remediation.writer`. Also defines what a re-diagnosis hands back (`Rediagnosis`): the
executor gets a callable producing one from its composition root, because diagnosing belongs to a
layer of its own. A 404 reads as None; other failures raise `KubeApiError` (an UnavailableError).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.model.cluster import ZONE_LABEL
from agent.model.descriptor import TemplateLayout
from agent.model.finding import Finding
from agent.model.job import JobRef
from agent.model.kueue import NO_KUEUE, KueueObjects
from agent.model.workload import BATCH_JOB, KUEUE_WORKLOAD, OWNERS, JobKind, workload
from agent.remediation.plan import LiveObjects
from agent.remediation.trainer_release import TRAINJOB_CRD, TrainerOverrides, served_overrides
from agent.remediation.verify import PodObservation
from agent.sources.kubeapi import KubeApi, KubeApiError

Obj = dict[str, Any]


@dataclass(frozen=True)
class Rediagnosis:
    """A fresh diagnosis of one job: its finding (None when the job has no live pod), the
    zone-mirroring label keys the diagnosis used, the names of the job's live pods and, for a
    generic group, of its members that finished (Succeeded or Failed: workers that gave up), and
    the cluster's Kueue objects (for a Kueue job's plan: its Workload, its ClusterQueue's quota)."""

    finding: Finding | None
    mirror_keys: tuple[str, ...] = ()
    pods: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()
    kueue: KueueObjects = NO_KUEUE


Rediagnose = Callable[[JobRef], Rediagnosis]


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _pods(items: list[Obj]) -> list[Obj]:
    """Listed pods with their kind and apiVersion set (a list's items carry neither)."""
    for item in items:
        item.setdefault("apiVersion", "v1")
        item.setdefault("kind", "Pod")
    return items


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def unschedulable_message(pod: Mapping[str, Any]) -> str | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and (
            cond.get("reason") == "Unschedulable"
        ):
            return str(cond.get("message") or "Unschedulable")
    return None


@dataclass
class ClusterReader:
    api: KubeApi
    timeout: float = 10.0

    def _get(self, path: str) -> Obj | None:
        try:
            found: Obj = self.api.json("GET", path, timeout=self.timeout)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def _list(self, path: str, query: list[tuple[str, str]] | None = None) -> list[Obj]:
        body = self.api.json("GET", path, query=query, timeout=self.timeout)
        items: list[Obj] = body.get("items") or []
        return items

    def job(self, ref: JobRef, *, api_version: str | None = None) -> Obj | None:
        """The training job object at `api_version`, else at each version its kind is served as
        in preference order (kubeflow.org/v1, then v2beta1 for an MPIJob v1 does not serve)."""
        kind = workload(ref.kind)
        versions = [api_version] if api_version else list(kind.api_versions)
        for version in versions:
            found = self._get(f"/apis/{version}/namespaces/{ref.namespace}/{kind.plural}/{ref.name}")
            if found is not None:
                return found
        return None

    def materialised(self, ref: JobRef) -> Obj | None:
        """The object a kind's controller materialises the job as (a TrainJob's JobSet: same
        name and namespace), None when the kind has none or it does not exist."""
        found = workload(ref.kind).materialised
        if found is None:
            return None
        return self.job(JobRef(found, ref.namespace, ref.name))

    def trainer_overrides(self) -> TrainerOverrides:
        """What the installed Kubeflow Trainer serves, from the TrainJob CRD the API server
        serves (`agent.remediation.trainer_release`)."""
        return served_overrides(self._get(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{TRAINJOB_CRD}"))

    def child_jobs(self, ref: JobRef) -> list[Obj]:
        """The batch Jobs carrying the job's name label (a JobSet's, or a TrainJob's JobSet's,
        child Jobs), kind and apiVersion set."""
        label = workload(ref.kind).labels.job_name
        items = self._list(f"/apis/{BATCH_JOB.api_version}/namespaces/{ref.namespace}/{BATCH_JOB.plural}",
                           [("labelSelector", f"{label}={ref.name}")])  # fmt: skip
        for item in items:
            item.setdefault("apiVersion", BATCH_JOB.api_version)
            item.setdefault("kind", BATCH_JOB.kind)
        return items

    def object(self, *, api_version: str, plural: str, namespace: str, name: str) -> Obj | None:
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        return self._get(f"{base}/namespaces/{namespace}/{plural}/{name}")

    def nodes(self) -> list[Obj]:
        return self._list("/api/v1/nodes")

    def pods_on(self, node_names: Sequence[str]) -> list[Obj]:
        """Live pods bound to these nodes (any namespace)."""
        out: list[Obj] = []
        for node in node_names:
            out.extend(
                p
                for p in self._list("/api/v1/pods", [("fieldSelector", f"spec.nodeName={node}")])
                if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            )
        return out

    def kubeflow_pods(self, ref: JobRef) -> list[Obj]:
        """Every pod carrying the job's name label (its kind's), Terminating ones included."""
        label = workload(ref.kind).labels.job_name
        return _pods(self._list(
            f"/api/v1/namespaces/{ref.namespace}/pods", [("labelSelector", f"{label}={ref.name}")],
        ))  # fmt: skip

    def pods_named(self, namespace: str, names: Sequence[str]) -> list[Obj]:
        wanted = set(names)
        return _pods([p for p in self._list(f"/api/v1/namespaces/{namespace}/pods")
                      if _name(p) in wanted])  # fmt: skip

    def live_objects(
        self,
        ref: JobRef,
        *,
        target_zone: str | None,
        job: Mapping[str, Any] | None,
        pod_names: Sequence[str] = (),
        finished_names: Sequence[str] = (),
    ) -> LiveObjects:
        """What the plan reads for `ref`: every node, the live pods bound to the target zone's
        nodes, the job's pods (a training job's by its name label, a group's by `pod_names`;
        Terminating ones left out, and a JobSet's or TrainJob's finished ones: initializers that
        completed) and,
        for a group, its namespace's workloads and its finished members (`finished_names`); for
        a TrainJob its JobSet and what the installed Trainer serves."""
        nodes = self.nodes()
        zone_nodes = [
            _name(n)
            for n in nodes
            if ((n.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL) == target_zone
        ]
        bound = self.pods_on(zone_nodes) if target_zone else []
        finished: list[Obj] = []
        if ref.kind is JobKind.GROUP:
            members = self.pods_named(ref.namespace, [*pod_names, *finished_names])
            done = set(finished_names)
            pods = [p for p in members if _name(p) not in done]
            finished = [p for p in members if _name(p) in done]
            workloads = self.workloads(ref.namespace)
        else:
            pods = self.kubeflow_pods(ref)
            workloads = []
        pods = [p for p in pods if not is_terminating(p)]
        materialised = trainer = None
        if ref.kind is not JobKind.GROUP and workload(ref.kind).templates.layout is TemplateLayout.REPLICATED_JOBS:
            pods = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
            materialised = self.materialised(ref)
        if ref.kind is JobKind.TRAINJOB:
            trainer = self.trainer_overrides()
        return LiveObjects(job=job, pods=pods, nodes=nodes, bound_pods=bound, workloads=workloads,
                           finished_pods=finished, materialised=materialised, trainer=trainer)  # fmt: skip

    def kueue_workload(self, ref: JobRef) -> Obj | None:
        """The Kueue Workload whose controller is the job (the last by name when several are)."""
        path = f"/apis/{KUEUE_WORKLOAD.api_version}/namespaces/{ref.namespace}/{KUEUE_WORKLOAD.plural}"
        try:
            items = self._list(path)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise
        owned = [w for w in items if any(
            r.get("controller") and r.get("kind") == ref.kind.value and r.get("name") == ref.name
            for r in (w.get("metadata") or {}).get("ownerReferences") or [])]  # fmt: skip
        if not owned:
            return None
        found = max(owned, key=_name)
        found.setdefault("apiVersion", KUEUE_WORKLOAD.api_version)
        found.setdefault("kind", KUEUE_WORKLOAD.kind.value)
        return found

    def workloads(self, namespace: str) -> list[Obj]:
        """The objects of a generic group's owner kinds in a namespace (Deployments, ReplicaSets,
        batch Jobs; kind and apiVersion set)."""
        out: list[Obj] = []
        for owner in OWNERS:
            path = f"/apis/{owner.api_version}/namespaces/{namespace}/{owner.plural}"
            for item in self._list(path):
                item.setdefault("apiVersion", owner.api_version)
                item.setdefault("kind", owner.kind)
                out.append(item)
        return out


def waiting_reason(pod: Mapping[str, Any]) -> str | None:
    """Why a container of the pod is not running (its waiting or terminated reason), or None
    when every container runs (or the kubelet reported none yet)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        if "running" in state:
            continue
        detail = state.get("waiting") or state.get("terminated") or {}
        return str(detail.get("reason") or "not running")
    return None


def observe_pods(
    pods: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]
) -> tuple[PodObservation, ...]:
    """The judge's view of pods: zone of the node (None while unbound), phase, terminating,
    the scheduler's message, why a container is not running."""
    zone_of = {
        _name(n): ((n.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL) for n in nodes
    }
    out = []
    for pod in pods:
        where = (pod.get("spec") or {}).get("nodeName")
        out.append(
            PodObservation(
                name=_name(pod),
                zone=zone_of.get(where) if where else None,
                phase=str((pod.get("status") or {}).get("phase") or "Pending"),
                terminating=is_terminating(pod),
                unschedulable=unschedulable_message(pod),
                waiting=waiting_reason(pod),
            )
        )
    return tuple(sorted(out, key=lambda p: p.name))
