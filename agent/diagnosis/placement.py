"""Where a split job should be co-located, and what stops zonemedic from restarting it.

Candidate zones: the co-located job's flows are all allowed there and free GPUs (excluding the job
itself) cover its total GPU request. Choice: most of the job's GPU requests already there; tie: most
free GPUs; tie: zone name. Blocking reasons: Kueue-managed jobs (queue-name label, or
`runPolicy.managedBy` naming another controller), protected namespaces, finished jobs, and pods
whose controller cannot recreate them. Called by `agent.diagnosis.diagnose`. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agent.model.job import Job
from agent.model.workload import RESTARTABLE_CONTROLLERS, JobKind, workload


def choose_target_zone(
    candidates: Iterable[str], *, job_gpus: Mapping[str, int], free_gpus: Mapping[str, int]
) -> str | None:
    """The candidate with most of the job's GPUs; tie: most free GPUs; tie: zone name order."""
    ranked = sorted(candidates, key=lambda z: (-job_gpus.get(z, 0), -free_gpus.get(z, 0), z))
    return ranked[0] if ranked else None


def kueue_reason(job: Job) -> str | None:
    """Why the job's object says Kueue (or another controller) owns its suspend: its kind's
    queue label, or a `managedBy` that is not its own operator's."""
    obj = job.obj
    if obj is None:
        return None
    kind = workload(obj.kind)
    queue = obj.labels.get(kind.kueue.queue_label)
    if queue:
        return (
            f"Kueue-managed (queue {queue}): do not toggle suspend; use Kueue Topology Aware "
            f"Scheduling ({kind.kueue.topology_annotation})"
        )
    if obj.managed_by is not None and obj.managed_by not in kind.suspension.own_managers:
        return (
            f"managed by {obj.managed_by}: do not toggle suspend; use Kueue Topology Aware "
            f"Scheduling ({kind.kueue.topology_annotation})"
        )
    return None


def restart_reason(job: Job) -> str | None:
    """Why the job cannot be restarted co-located, or None."""
    if job.ref.kind is JobKind.GROUP:
        for pod in job.pods:
            owner = job.controllers.get(pod.name)
            if owner is None:
                return f"pod {pod.name} has no controller: a restart would not recreate it"
            if owner.kind not in RESTARTABLE_CONTROLLERS:
                return f"pod {pod.name} is owned by a {owner.kind}, which zonemedic cannot restart"
        return None
    if job.obj is not None and job.obj.finished:
        return f"{job.ref.kind} has finished: it cannot be resumed"
    return None


def blocking_reasons(
    job: Job, *, protected_namespaces: Iterable[str], through_kueue: bool = False
) -> list[str]:
    """Every reason that makes the job not remediable regardless of zones (`through_kueue`:
    the fix re-queues it through Kueue, so Kueue managing it is no reason)."""
    reasons = []
    kueue = None if through_kueue else kueue_reason(job)
    if kueue is not None:
        reasons.append(kueue)
    if job.ref.namespace in set(protected_namespaces):
        reasons.append(f"namespace {job.ref.namespace} is protected")
    restart = restart_reason(job)
    if restart is not None:
        reasons.append(restart)
    return reasons
