"""The JobSet webhooks, as the twin's API server runs them (kubernetes-sigs/jobset's own).

Registered on the store by `cluster.TwinCluster` (`register`); a denial is answered as
kube-apiserver relays a webhook's answer (`admission webhook "<name>" denied the request: ...`):
- `mjobset.kb.io` (create): defaults completionMode Indexed, the pods' restartPolicy
  OnFailure, DNS hostnames and publishNotReadyAddresses on, successPolicy All, startupPolicy
  AnyOrder;
- `vjobset.kb.io` (create, update), 422 Invalid: on create the coordinator must name an Indexed
  replicated job, job and pod index in range, the first replicated job cannot `dependsOn`,
  and generated Job names must fit a DNS-1035 label; on update `spec.replicatedJobs` is
  immutable except, while the old or the new JobSet is suspended, the pod templates' labels,
  annotations, nodeSelector, tolerations and schedulingGates (so affinity and containers never
  change on an existing JobSet), and `spec.managedBy` is immutable;
- `mpod.kb.io` / `vpod.kb.io` (pod create), exclusive placement
  (`alpha.jobset.sigs.k8s.io/exclusive-topology`): the leader pod of each child Job
  (completion index 0) gets a required pod affinity to its own Job and anti-affinity to the
  other Jobs on the topology key; a follower gets a nodeSelector for its leader's domain and is
  refused (403) until the leader is scheduled.
It reads the store (leader pods, nodes) and changes nothing but the object admitted.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from agent.twin import jobset_children as js_children
from agent.twin.apierror import (
    ApiError,
    FieldProblem,
    invalid_fields,
    webhook_denied,
    webhook_forbidden,
)
from agent.twin.resources import lookup
from agent.twin.store import Store

Obj = dict[str, Any]
JOBSETS = lookup("jobsets")
PODS = lookup("pods")
NODES = lookup("nodes")
MUTATING = "mjobset.kb.io"
VALIDATING = "vjobset.kb.io"
POD_MUTATING = "mpod.kb.io"
POD_VALIDATING = "vpod.kb.io"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
MUTABLE_WHEN_SUSPENDED = ("nodeSelector", "tolerations", "schedulingGates")
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def default_jobset(old: Obj | None, new: Obj) -> None:
    """`mjobset.kb.io`: the JobSet defaults, on create only."""
    if old is not None:
        return
    spec: Obj = new.setdefault("spec", {})
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rjob in spec.get("replicatedJobs") or []:
        job_spec: Obj = rjob.setdefault("template", {}).setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        pod_spec: Obj = job_spec.setdefault("template", {}).setdefault("spec", {})
        if not pod_spec.get("restartPolicy"):
            pod_spec["restartPolicy"] = "OnFailure"
    network: Obj = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    for i, rule in enumerate((spec.get("failurePolicy") or {}).get("rules") or []):
        if not rule.get("name"):
            rule["name"] = f"failurePolicyRule{i}"


def _deny(name: str, problems: list[FieldProblem]) -> ApiError:
    return webhook_denied(VALIDATING, invalid_fields("jobset.x-k8s.io", "JobSet", name, problems))


def _internal(detail: str) -> FieldProblem:
    return FieldProblem("", "InternalError", detail)


def _create_problems(js: Mapping[str, Any]) -> list[FieldProblem]:
    problems: list[FieldProblem] = []
    name = str((js.get("metadata") or {}).get("name", ""))
    rjobs = js_children.replicated_jobs(js)
    if rjobs and rjobs[0].get("dependsOn"):
        problems.append(_internal("DependsOn can't be set for the first ReplicatedJob"))
    seen: set[str] = set()
    for i, rjob in enumerate(rjobs):
        longest = js_children.job_name(name, str(rjob.get("name")), js_children.replicas(rjob) - 1)
        if len(longest) > 63:
            problems.append(FieldProblem(f"spec.replicatedJobs[{i}].name", "FieldValueInvalid",
                                         "JobSet name is too long, job names generated for this "
                                         "JobSet will exceed 63 characters", f'"{longest}"'))
        elif not _DNS1035.match(longest):
            problems.append(FieldProblem(
                f"spec.replicatedJobs[{i}].name", "FieldValueInvalid",
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                "start with an alphabetic character, and end with an alphanumeric character",
                f'"{longest}"'))
        for dependency in rjob.get("dependsOn") or []:
            if dependency.get("name") not in seen:
                problems.append(_internal(f"replicatedJob: {rjob.get('name')} cannot depend on "
                                          f"replicatedJob: {dependency.get('name')}"))
        seen.add(str(rjob.get("name")))
    coordinator = js_children.spec(js).get("coordinator")
    if isinstance(coordinator, Mapping):
        problem = _coordinator_problem(js, coordinator)
        if problem:
            problems.append(_internal(problem))
    return problems  # fmt: skip


def _coordinator_problem(js: Mapping[str, Any], coordinator: Mapping[str, Any]) -> str:
    wanted = str(coordinator.get("replicatedJob", ""))
    rjob = next((r for r in js_children.replicated_jobs(js) if r.get("name") == wanted), None)
    if rjob is None:
        return f"coordinator replicatedJob {wanted} does not exist"
    job_index, pod_index = int(coordinator.get("jobIndex", 0)), int(coordinator.get("podIndex", 0))
    if not 0 <= job_index < js_children.replicas(rjob):
        return f"coordinator job index {job_index} is invalid for replicatedJob {wanted}"
    job_spec = (rjob.get("template") or {}).get("spec") or {}
    if job_spec.get("completionMode") != "Indexed" or job_spec.get("completions") is None:
        return ("job for coordinator pod must be indexed completion mode, and completions "
                "number must be set")  # fmt: skip
    if not 0 <= pod_index < int(job_spec["completions"]):
        return (f"coordinator pod index {pod_index} is invalid for replicatedJob {wanted} "
                f"job index {job_index}")  # fmt: skip
    return ""


def _normalized(value: Any) -> Any:
    """Semantic equality as apimachinery's: empty and absent maps and lists are the same."""
    if isinstance(value, Mapping):
        out = {k: _normalized(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    return value


def munged_replicated_jobs(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Obj]:
    """The new replicated jobs with what may change while suspended put back to the old values:
    an update is valid when the result equals the old list (upstream's `mungedSpec`)."""
    munged: list[Obj] = [copy.deepcopy(dict(r)) for r in js_children.replicated_jobs(new)]
    if not (js_children.is_suspended(old) or js_children.is_suspended(new)):
        return munged
    before = {str(r.get("name")): r for r in js_children.replicated_jobs(old)}
    for rjob in munged:
        previous = before.get(str(rjob.get("name")))
        if previous is None:
            continue
        template = rjob.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
        old_template = ((previous.get("template") or {}).get("spec") or {}).get("template") or {}
        meta: Obj = template.setdefault("metadata", {})
        pod_spec: Obj = template.setdefault("spec", {})
        old_meta = old_template.get("metadata") or {}
        old_spec = old_template.get("spec") or {}
        for key in ("labels", "annotations"):
            _restore(meta, old_meta, key)
        for key in MUTABLE_WHEN_SUSPENDED:
            _restore(pod_spec, old_spec, key)
    return munged


def _restore(target: Obj, source: Mapping[str, Any], key: str) -> None:
    if key in source:
        target[key] = copy.deepcopy(source[key])
    else:
        target.pop(key, None)


def _update_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldProblem]:
    problems: list[FieldProblem] = []
    munged = munged_replicated_jobs(old, new)
    if _normalized(munged) != _normalized(list(js_children.replicated_jobs(old))):
        problems.append(FieldProblem("spec.replicatedJobs", "FieldValueInvalid",
                                     "field is immutable", "[]v1alpha2.ReplicatedJob{...}"))
    old_manager = js_children.spec(old).get("managedBy")
    new_manager = js_children.spec(new).get("managedBy")
    if old_manager != new_manager:
        shown = "null" if new_manager is None else f'"{new_manager}"'
        problems.append(FieldProblem("spec.managedBy", "FieldValueInvalid",
                                     "field is immutable", shown))
    return problems


def validate_jobset(old: Obj | None, new: Obj) -> None:
    """`vjobset.kb.io`: refuse an invalid create or a forbidden update with 422 Invalid."""
    name = str((new.get("metadata") or {}).get("name", ""))
    problems = _create_problems(new) if old is None else _update_problems(old, new)
    if problems:
        raise _deny(name, problems)


# --- pods: exclusive placement --------------------------------------------------------------


class ExclusivePlacement:
    """`mpod.kb.io` and `vpod.kb.io`: pods of JobSets placed exclusively per topology domain."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @staticmethod
    def _applies(pod: Mapping[str, Any]) -> str | None:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if js_children.JOBSET_NAME not in annotations:
            return None
        if js_children.NODE_SELECTOR_STRATEGY in annotations:
            return None
        topology = annotations.get(js_children.EXCLUSIVE_TOPOLOGY)
        return str(topology) if topology else None

    def mutate(self, old: Obj | None, pod: Obj) -> None:
        if old is not None:
            return
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if js_children.JOBSET_NAME not in annotations:
            return
        labels: Obj = meta.setdefault("labels", {})
        # The API server's Priority admission defaults spec.priority to 0 before webhooks run.
        labels[js_children.PRIORITY] = str((pod.get("spec") or {}).get("priority", 0))
        topology = self._applies(pod)
        if topology is None:
            return
        spec: Obj = pod.setdefault("spec", {})
        if annotations.get(COMPLETION_INDEX) == "0":
            key = labels.get(js_children.JOB_KEY, "")
            affinity: Obj = spec.setdefault("affinity", {})
            same = {"labelSelector": {"matchExpressions": [
                {"key": js_children.JOB_KEY, "operator": "In", "values": [key]}]},
                "topologyKey": topology, "namespaceSelector": {}}
            others = {"labelSelector": {"matchExpressions": [
                {"key": js_children.JOB_KEY, "operator": "Exists"},
                {"key": js_children.JOB_KEY, "operator": "NotIn", "values": [key]},
                {"key": js_children.PRIORITY, "operator": "In",
                 "values": [labels[js_children.PRIORITY]]}]},
                "topologyKey": topology, "namespaceSelector": {}}
            for kind, term in (("podAffinity", same), ("podAntiAffinity", others)):
                block: Obj = affinity.setdefault(kind, {})
                block.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(term)
            return
        leader = self._leader(pod)
        if leader is None or not (leader.get("spec") or {}).get("nodeName"):
            return
        try:
            node = self._store.get(NODES, str(leader["spec"]["nodeName"]))
        except ApiError:
            return
        value = ((node.get("metadata") or {}).get("labels") or {}).get(topology)
        if value is not None:
            spec.setdefault("nodeSelector", {})[topology] = value

    def _leaders(self, pod: Mapping[str, Any]) -> list[Obj]:
        """The live pods of completion index 0 in the pod's child Job."""
        meta = pod.get("metadata") or {}
        key = (meta.get("labels") or {}).get(js_children.JOB_KEY)
        if not key:
            return []
        found = self._store.list(PODS, namespace=str(meta.get("namespace") or "default"),
                                 label_selector=f"{js_children.JOB_KEY}={key}")[0]
        return [p for p in found if not (p.get("metadata") or {}).get("deletionTimestamp")
                and ((p.get("metadata") or {}).get("annotations") or {}).get(COMPLETION_INDEX)
                == "0"]  # fmt: skip

    def _leader(self, pod: Mapping[str, Any]) -> Obj | None:
        leaders = self._leaders(pod)
        return leaders[0] if len(leaders) == 1 else None

    @staticmethod
    def _leader_name(pod: Mapping[str, Any]) -> str:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return (f"{labels.get(js_children.JOBSET_NAME)}-{labels.get(js_children.REPLICATED_JOB)}-"
                f"{labels.get(js_children.JOB_INDEX)}-0")  # fmt: skip

    def validate(self, old: Obj | None, pod: Obj) -> None:
        topology = self._applies(pod)
        if old is not None or topology is None:
            return
        if ((pod.get("metadata") or {}).get("annotations") or {}).get(COMPLETION_INDEX) == "0":
            return
        selector = (pod.get("spec") or {}).get("nodeSelector")
        if not selector:
            raise webhook_forbidden(POD_VALIDATING, "follower pod node selector not set")
        if topology not in selector:
            raise webhook_forbidden(POD_VALIDATING, "follower pod node selector for topology "
                                    f"domain not found. missing selector: {topology}")
        leaders = self._leaders(pod)
        if len(leaders) != 1:
            raise webhook_forbidden(POD_VALIDATING, f"expected 1 leader pod ({self._leader_name(pod)}), "
                                    f"but got {len(leaders)}. this is an expected, transient error")
        leader = leaders[0]
        if not (leader.get("spec") or {}).get("nodeName"):
            raise webhook_forbidden(POD_VALIDATING, "leader pod not yet scheduled, not creating "
                                    "follower pod. this is an expected, transient error")


def register(store: Store) -> None:
    """Install the JobSet webhooks on the store."""
    store.add_mutation(JOBSETS, default_jobset)
    store.add_admission(JOBSETS, validate_jobset)
    exclusive = ExclusivePlacement(store)
    store.add_mutation(PODS, exclusive.mutate)
    store.add_admission(PODS, exclusive.validate)
