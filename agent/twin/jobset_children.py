"""What a JobSet (`jobset.x-k8s.io/v1alpha2`) wants: its child Jobs, headless Service and status.

Called by the twin's JobSet controller (`operator_jobset`) and its admission hooks. Pure: JSON
dicts in, JSON dicts out. It follows kubernetes-sigs/jobset:
- one Job `<jobset>-<replicatedJob>-<jobIndex>` per replica of each replicated job, from the
  replicated job's template, owned by the JobSet (controller reference);
- the Job and its pod template labelled and annotated with `jobset.sigs.k8s.io/jobset-name`,
  `jobset-uid`, `replicatedjob-name`, `replicatedjob-replicas`, `global-replicas`, `job-index`,
  `job-key` (SHA-1 of `<namespace>/<job>`), `job-global-index`, `group-name`,
  `group-replicas`, `job-group-index`, `restart-attempt`, `coordinator` (when
  `spec.coordinator` is set: `<jobset>-<rjob>-<jobIndex>-<podIndex>.<subdomain>`), and the
  annotation `alpha.jobset.sigs.k8s.io/exclusive-topology` when the JobSet or the replicated
  job asks for exclusive placement;
- pods' subdomain (DNS hostnames, on by default): `spec.network.subdomain` or the JobSet name,
  with a headless Service of that name selecting `jobset.sigs.k8s.io/jobset-name`;
- a resumed Job gets the replicated job's pod-template labels, annotations and nodeSelector
  merged into its own (existing keys stay unless overwritten) and tolerations and scheduling
  gates unioned (`resume_template`), so a key removed from the JobSet stays on the Job;
- replicated job statuses (ready, succeeded, failed, active, suspended child Jobs) and
  `dependsOn` (a replicated job starts once the one it depends on is Ready or Complete).
It does not talk to the store.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]

GROUP_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
GROUP_NAME = "jobset.sigs.k8s.io/group-name"
GROUP_REPLICAS = "jobset.sigs.k8s.io/group-replicas"
JOB_GROUP_INDEX = "jobset.sigs.k8s.io/job-group-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
COORDINATOR = "jobset.sigs.k8s.io/coordinator"
PRIORITY = "jobset.sigs.k8s.io/priority"
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY = "alpha.jobset.sigs.k8s.io/node-selector"
NAMESPACED_JOB = "alpha.jobset.sigs.k8s.io/namespaced-job"
NO_SCHEDULE_TAINT = "alpha.jobset.sigs.k8s.io/no-schedule"
CONTROLLER_NAME = "jobset.sigs.k8s.io/jobset-controller"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = obj.get("metadata") or {}
    return found


def spec(js: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = js.get("spec") or {}
    return found


def replicated_jobs(js: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in spec(js).get("replicatedJobs") or [] if isinstance(r, Mapping)]


def replicas(rjob: Mapping[str, Any]) -> int:
    return int(rjob.get("replicas", 1))


def is_suspended(js: Mapping[str, Any]) -> bool:
    return bool(spec(js).get("suspend"))


def managed_elsewhere(js: Mapping[str, Any]) -> bool:
    """`spec.managedBy` names another controller (e.g. MultiKueue): the JobSet controller skips it."""
    manager = spec(js).get("managedBy")
    return bool(manager) and manager != CONTROLLER_NAME


def subdomain(js: Mapping[str, Any]) -> str:
    network = spec(js).get("network") or {}
    return str(network.get("subdomain") or _meta(js).get("name", ""))


def dns_hostnames(js: Mapping[str, Any]) -> bool:
    return bool((spec(js).get("network") or {}).get("enableDNSHostnames"))


def job_name(jobset: str, rjob: str, index: int) -> str:
    return f"{jobset}-{rjob}-{index}"


def coordinator_endpoint(js: Mapping[str, Any]) -> str | None:
    coordinator = spec(js).get("coordinator")
    if not isinstance(coordinator, Mapping):
        return None
    return (f"{_meta(js).get('name')}-{coordinator.get('replicatedJob')}-"
            f"{int(coordinator.get('jobIndex', 0))}-{int(coordinator.get('podIndex', 0))}."
            f"{subdomain(js)}")  # fmt: skip


def job_key(namespace: str, name: str) -> str:
    return hashlib.sha1(f"{namespace}/{name}".encode(), usedforsecurity=False).hexdigest()


def _global_index(js: Mapping[str, Any], rjob_name: str, index: int) -> str:
    total = 0
    for rjob in replicated_jobs(js):
        if rjob.get("name") == rjob_name:
            return str(total + index)
        total += replicas(rjob)
    return ""


def _group_index(js: Mapping[str, Any], group: str, rjob_name: str, index: int) -> str:
    total = 0
    for rjob in replicated_jobs(js):
        if rjob.get("groupName", "default") == group:
            if rjob.get("name") == rjob_name:
                return str(total + index)
            total += replicas(rjob)
    return ""


def job_labels(js: Mapping[str, Any], rjob: Mapping[str, Any], index: int) -> dict[str, str]:
    """The labels (and, identically, annotations) the JobSet controller puts on a child Job
    and its pod template."""
    name = str(_meta(js).get("name"))
    namespace = str(_meta(js).get("namespace") or "default")
    rjob_name = str(rjob.get("name"))
    group = str(rjob.get("groupName", "default"))
    restarts = int((js.get("status") or {}).get("restarts", 0))
    labels = {
        JOBSET_NAME: name,
        JOBSET_UID: str(_meta(js).get("uid", "")),
        REPLICATED_JOB: rjob_name,
        RESTART_ATTEMPT: str(restarts),
        REPLICATED_JOB_REPLICAS: str(replicas(rjob)),
        GLOBAL_REPLICAS: str(sum(replicas(r) for r in replicated_jobs(js))),
        JOB_INDEX: str(index),
        JOB_KEY: job_key(namespace, job_name(name, rjob_name, index)),
        JOB_GLOBAL_INDEX: _global_index(js, rjob_name, index),
        GROUP_NAME: group,
        GROUP_REPLICAS: str(sum(replicas(r) for r in replicated_jobs(js)
                                if r.get("groupName", "default") == group)),
        JOB_GROUP_INDEX: _group_index(js, group, rjob_name, index),
    }  # fmt: skip
    endpoint = coordinator_endpoint(js)
    if endpoint is not None:
        labels[COORDINATOR] = endpoint
    return labels


def _exclusive_annotations(js: Mapping[str, Any], rjob: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for source in (_meta(js).get("annotations") or {},
                   ((rjob.get("template") or {}).get("metadata") or {}).get("annotations") or {}):
        if EXCLUSIVE_TOPOLOGY in source:
            out[EXCLUSIVE_TOPOLOGY] = str(source[EXCLUSIVE_TOPOLOGY])
            if NODE_SELECTOR_STRATEGY in source:
                out[NODE_SELECTOR_STRATEGY] = str(source[NODE_SELECTOR_STRATEGY])
    return out


def owner_reference(js: Mapping[str, Any]) -> Obj:
    return {"apiVersion": GROUP_VERSION, "kind": "JobSet", "name": _meta(js).get("name"),
            "uid": _meta(js).get("uid"), "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def desired_job(js: Mapping[str, Any], rjob: Mapping[str, Any], index: int) -> Obj:
    """The child Job for one replica of a replicated job, as the JobSet controller builds it."""
    template = copy.deepcopy(dict(rjob.get("template") or {}))
    tmeta = template.get("metadata") or {}
    job_spec: Obj = template.get("spec") or {}
    pod_template: Obj = job_spec.setdefault("template", {})
    pmeta: Obj = pod_template.setdefault("metadata", {})
    pod_spec: Obj = pod_template.setdefault("spec", {})
    added = job_labels(js, rjob, index)
    exclusive = _exclusive_annotations(js, rjob)
    job_meta: Obj = {
        "name": job_name(str(_meta(js).get("name")), str(rjob.get("name")), index),
        "namespace": _meta(js).get("namespace") or "default",
        "labels": {**(tmeta.get("labels") or {}), **added},
        "annotations": {**(tmeta.get("annotations") or {}), **added, **exclusive},
        "ownerReferences": [owner_reference(js)],
    }
    pmeta["labels"] = {**(pmeta.get("labels") or {}), **added}
    pmeta["annotations"] = {**(pmeta.get("annotations") or {}), **added, **exclusive}
    if dns_hostnames(js):
        pod_spec["subdomain"] = subdomain(js)
    if EXCLUSIVE_TOPOLOGY in exclusive and NODE_SELECTOR_STRATEGY in exclusive:
        selector = dict(pod_spec.get("nodeSelector") or {})
        selector[NAMESPACED_JOB] = f"{job_meta['namespace']}_{job_meta['name']}"
        pod_spec["nodeSelector"] = selector
        pod_spec["tolerations"] = [*(pod_spec.get("tolerations") or []),
                                   {"key": NO_SCHEDULE_TAINT, "operator": "Exists",
                                    "effect": "NoSchedule"}]  # fmt: skip
    job_spec["suspend"] = is_suspended(js)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_meta, "spec": job_spec}


def headless_service(js: Mapping[str, Any]) -> Obj:
    network = spec(js).get("network") or {}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": subdomain(js), "namespace": _meta(js).get("namespace") or "default",
                     "ownerReferences": [owner_reference(js)]},
        "spec": {"clusterIP": "None", "selector": {JOBSET_NAME: _meta(js).get("name")},
                 "publishNotReadyAddresses": bool(network.get("publishNotReadyAddresses", True))},
    }  # fmt: skip


def _union(old: Sequence[Any], new: Sequence[Any]) -> list[Any]:
    out = list(old)
    out.extend(item for item in new if item not in out)
    return out


def resume_template(job_template: Mapping[str, Any], rjob_template: Mapping[str, Any]) -> Obj:
    """A suspended child Job's pod template after resume: the replicated job's labels,
    annotations and nodeSelector merged over the Job's (existing keys stay unless the JobSet
    sets them), tolerations and scheduling gates unioned. Nothing else changes."""
    out = copy.deepcopy(dict(job_template))
    meta: Obj = out.setdefault("metadata", {})
    pod_spec: Obj = out.setdefault("spec", {})
    src_meta = rjob_template.get("metadata") or {}
    src_spec = rjob_template.get("spec") or {}
    for key in ("labels", "annotations"):
        meta[key] = {**(meta.get(key) or {}), **(src_meta.get(key) or {})}
    pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}),
                                **(src_spec.get("nodeSelector") or {})}  # fmt: skip
    for key in ("tolerations", "schedulingGates"):
        merged = _union(pod_spec.get(key) or [], src_spec.get(key) or [])
        if merged:
            pod_spec[key] = merged
        else:
            pod_spec.pop(key, None)
    for key in ("labels", "annotations"):
        if not meta[key]:
            meta.pop(key)
    if not pod_spec["nodeSelector"]:
        pod_spec.pop("nodeSelector")
    return out


# --- status ---------------------------------------------------------------------------------


def job_finished(job: Mapping[str, Any]) -> str:
    """"Complete" or "Failed" when the child Job finished, else ""."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return str(condition["type"])
    return ""


def _job_ready(job: Mapping[str, Any]) -> bool:
    job_spec = job.get("spec") or {}
    status = job.get("status") or {}
    pods = int(job_spec.get("parallelism", 1))
    completions = job_spec.get("completions")
    if completions is not None and int(completions) < pods:
        pods = int(completions)
    return int(status.get("succeeded", 0)) + int(status.get("ready", 0)) >= pods


def replicated_job_statuses(js: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]]) -> list[Obj]:
    """`status.replicatedJobsStatus`, one entry per replicated job in spec order."""
    counts = {str(r.get("name")): {"ready": 0, "succeeded": 0, "failed": 0, "active": 0,
                                   "suspended": 0} for r in replicated_jobs(js)}  # fmt: skip
    for job in jobs:
        name = str((_meta(job).get("labels") or {}).get(REPLICATED_JOB, ""))
        if name not in counts:
            continue
        finished = job_finished(job)
        if finished == "Complete":
            counts[name]["succeeded"] += 1
        elif finished == "Failed":
            counts[name]["failed"] += 1
        else:
            if _job_ready(job):
                counts[name]["ready"] += 1
            if int((job.get("status") or {}).get("active", 0)) > 0:
                counts[name]["active"] += 1
            if (job.get("spec") or {}).get("suspend"):
                counts[name]["suspended"] += 1
    return [{"name": name, **c} for name, c in counts.items()]


def dependency_reached(
    js: Mapping[str, Any], rjob: Mapping[str, Any], statuses: Sequence[Mapping[str, Any]]
) -> bool:
    """Whether every replicated job this one depends on reached the status it waits for."""
    by_name = {str(s.get("name")): s for s in statuses}
    wanted = {str(r.get("name")): replicas(r) for r in replicated_jobs(js)}
    for dependency in rjob.get("dependsOn") or []:
        status = by_name.get(str(dependency.get("name")))
        if status is None:
            return False
        count = wanted.get(str(dependency.get("name")), 1)
        if dependency.get("status") == "Complete" and count != int(status.get("succeeded", 0)):
            return False
        reached = int(status.get("ready", 0)) + int(status.get("failed", 0)) + int(
            status.get("succeeded", 0))
        if dependency.get("status") == "Ready" and count != reached:
            return False
    return True


def success_reached(js: Mapping[str, Any], successful: Sequence[Mapping[str, Any]]) -> bool:
    """The success policy: All (default) or Any of the targeted replicated jobs' Jobs completed."""
    policy = spec(js).get("successPolicy") or {"operator": "All"}
    targets = list(policy.get("targetReplicatedJobs") or [])

    def targeted(name: str) -> bool:
        return not targets or name in targets

    done = sum(1 for j in successful
               if targeted(str((_meta(j).get("labels") or {}).get(REPLICATED_JOB, ""))))
    if policy.get("operator") == "Any":
        return done >= 1
    expected = sum(replicas(r) for r in replicated_jobs(js) if targeted(str(r.get("name"))))
    return done >= expected
