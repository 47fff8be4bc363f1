"""What an admission request creates: a training job of a known kind, or a generic group's workload.

Who calls it: `agent.admission.decision` (for every request), `agent.admission.manifest` (the
kinds the webhook's rules name). Pure: the request's object in, a `Subject` out (or None: not a
kind the webhook places), and the pods the object will make, as its operator will label them.
What it does not do: decide where the job goes, or read the cluster.

The kinds: every training kind of `agent.model.workload` (at any version it serves), and the
workload kinds a configured generic group's pods are owned by (`OWNERS`: Deployment, batch Job;
a ReplicaSet is made by its Deployment and is not placed on its own) whose pod template's
labels match a group's selector (and its namespace, when the group names one).

A Pod (core v1) is a subject of its own when a group placed pod by pod (`admit_pods`) selects
its labels (and its namespace): its one template is the Pod itself (`POD_TEMPLATES`, path `()`);
the gang it belongs to is modelled by `agent.admission.pod_gang`.

The pods: per gang pod template (initializers left out), its count of pods, each with the
template's labels plus the labels the kind's operator sets (`GangLabels`): Kubeflow
`job-name`, `replica-type` (lower case), `replica-index`, `operator-name`; JobSet
`jobset-name`, `replicatedjob-name`, `job-index`, `job-global-index` and the completion index;
a group's pods carry the template's labels only. Names follow the operators (`<job>-<type>-<i>`,
`<jobset>-<rjob>-<job index>-<pod index>`, `<object>-<i>`; a JobSet's pods are owned by their
Indexed batch Job `<jobset>-<rjob>-<job index>`); an object with only a
`generateName` is named by it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from agent.model.descriptor import (
    OwnerKind,
    PodTemplate,
    PodTemplates,
    TemplateLayout,
    count_of,
    dig,
)
from agent.model.job import JobRef
from agent.model.workload import OWNERS, REPLICA_SET, JobKind, WorkloadKind, workload_served
from agent.settings import GroupSpec

MAX_PODS = 10_000  # pods of one object the webhook models (a larger one passes unchanged)
POD_TEMPLATES = PodTemplates(TemplateLayout.TEMPLATE, ())  # a Pod is its own (one) template


@dataclass(frozen=True)
class Subject:
    """The object being created and what it is: a training kind (`training`) or the workload of
    a generic group (`owner`, `group`); `ref` names the job (a group: kind Group, its name)."""

    ref: JobRef
    obj: Mapping[str, Any]
    name: str
    training: WorkloadKind | None = None
    owner: OwnerKind | None = None
    group: GroupSpec | None = None
    pod: bool = False  # a group's Pod, placed on its own (`admit_pods`)

    @cached_property
    def templates(self) -> list[PodTemplate]:
        """The gang's pod templates, in the object's order (read once: the object is not
        changed)."""
        return self.templates_in(self.obj)

    def templates_in(self, obj: Mapping[str, Any]) -> list[PodTemplate]:
        """The gang's pod templates of `obj` (the object, or a copy of it), read as its kind's."""
        found = self.training.templates if self.training is not None else None
        if found is None and self.owner is not None:
            found = self.owner.templates
        if found is None and self.pod:
            found = POD_TEMPLATES
        return found.gang_templates(obj) if found is not None else []

    @property
    def kind_name(self) -> str:
        return str(self.obj.get("kind") or "")


def _labels_of(template: Mapping[str, Any]) -> Mapping[str, str]:
    labels = dig(template, ("metadata", "labels"))
    return labels if isinstance(labels, Mapping) else {}


def _name_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return str(meta.get("name") or meta.get("generateName") or "")


def identify(
    obj: Mapping[str, Any], *, group: str, version: str, kind: str, namespace: str,
    groups: Sequence[GroupSpec],
) -> Subject | None:  # fmt: skip
    """The subject of a request for `group/version kind` in `namespace`; None when the webhook
    does not place that kind (or a workload no configured group selects)."""
    name = _name_of(obj)
    training = workload_served(group, version, kind)
    if training is not None:
        return Subject(JobRef(training.kind, namespace, name), obj, name, training=training)
    owner = next((o for o in OWNERS if o.kind == kind and o.group == group and o.version == version
                  and o is not REPLICA_SET), None)  # fmt: skip
    pod = (group, version, kind) == ("", "v1", "Pod")
    if owner is None and not pod:
        return None
    templates = (owner.templates if owner is not None else POD_TEMPLATES).templates(obj)
    labels = _labels_of(templates[0].template) if templates else {}
    for spec in groups:
        if spec.namespace is not None and spec.namespace != namespace:
            continue
        if pod and not spec.admit_pods:
            continue
        if spec.selector and all(labels.get(k) == v for k, v in spec.selector.items()):
            return Subject(JobRef(JobKind.GROUP, namespace, spec.name), obj, name, owner=owner,
                           group=spec, pod=pod)  # fmt: skip
    return None


def planned_pods(subject: Subject) -> list[dict[str, Any]]:
    """The pod manifests (unbound) the object will make, as its operator labels them; empty
    when a count cannot be read or passes `MAX_PODS`."""
    out: list[dict[str, Any]] = []
    namespace = subject.ref.namespace
    if subject.training is not None and subject.training.templates.layout is TemplateLayout.REPLICATED_JOBS:
        return _jobset_pods(subject)
    if subject.pod:
        labels = _labels_of(subject.obj)
        return [_pod(subject.name, namespace, labels, subject.obj)]
    total = 0
    for template in subject.templates:
        if template.count is None:
            return []
        total += template.count
        if total > MAX_PODS:
            return []
        own = _labels_of(template.template)  # read once per template
        for i in range(template.count):
            labels = dict(own)
            if subject.training is not None:
                gang = subject.training.labels
                rtype = template.replica.lower()
                labels.update({gang.job_name: subject.name, gang.replica_type: rtype,
                               gang.replica_index: str(i)})  # fmt: skip
                if gang.operator and subject.training.operators:
                    labels[gang.operator] = subject.training.operators[0]
                pod_name = f"{subject.name}-{rtype}-{i}"
            else:
                pod_name = f"{subject.name}-{i}"
            out.append(_pod(pod_name, namespace, labels, template.template))
    return out


def _jobset_pods(subject: Subject) -> list[dict[str, Any]]:
    assert subject.training is not None
    gang = subject.training.labels
    rjobs = subject.training.templates.container(subject.obj)
    if not isinstance(rjobs, list):
        return []
    in_gang = {t.replica for t in subject.templates}
    out: list[dict[str, Any]] = []
    global_index = 0
    for rjob in rjobs:
        if not isinstance(rjob, Mapping):
            continue
        name = str(rjob.get("name"))
        replicas = count_of(rjob.get("replicas"), 1)
        job_spec = dig(rjob, ("template", "spec"))
        job_spec = job_spec if isinstance(job_spec, Mapping) else {}
        per_job = _parallel(job_spec)
        if replicas is None or per_job is None:
            return []
        template = job_spec.get("template")
        template = template if isinstance(template, Mapping) else {}
        for job_index in range(replicas):
            for pod_index in range(per_job if name in in_gang else 0):
                labels = dict(_labels_of(template))
                labels.update({gang.job_name: subject.name, gang.replica_type: name,
                               gang.replica_index: str(job_index)})  # fmt: skip
                if gang.global_index:
                    labels[gang.global_index] = str(global_index)
                if gang.completion_index:
                    labels[gang.completion_index] = str(pod_index)
                pod = _pod(f"{subject.name}-{name}-{job_index}-{pod_index}",
                           subject.ref.namespace, labels, template)
                pod["metadata"]["ownerReferences"] = [{  # its Indexed batch Job, as for live pods
                    "apiVersion": "batch/v1", "kind": "Job", "controller": True,
                    "name": f"{subject.name}-{name}-{job_index}", "uid": ""}]
                out.append(pod)
                if len(out) > MAX_PODS:
                    return []
            global_index += 1
    return out


def _parallel(spec: Mapping[str, Any]) -> int | None:
    parallelism = count_of(spec.get("parallelism"), 1)
    if "completions" not in spec or parallelism is None:
        return parallelism
    completions = count_of(spec.get("completions"), 0)
    return None if completions is None else min(parallelism, completions)


def _pod(name: str, namespace: str, labels: Mapping[str, str],
         template: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
    spec = template.get("spec")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {str(k): str(v) for k, v in labels.items()}},
            "spec": dict(spec) if isinstance(spec, Mapping) else {},
            "status": {"phase": "Pending"}}  # fmt: skip
