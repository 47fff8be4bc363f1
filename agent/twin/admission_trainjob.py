"""The TrainJob's admission, as the twin's API server runs it for a Kubeflow Trainer release.

Registered on the store by `cluster.TwinCluster` (`register`):
- the CRD's own rules (422 Invalid, before any webhook): the name an RFC 1035 label of at most
  63 characters, `spec.managedBy` the Trainer's controller or MultiKueue (the `self ==
  oldSelf` rules are the store's, from the schema);
- `defaulter.trainjob.trainer.kubeflow.org` (v2.2+): each `runtimePatches` entry's `time` is set
  when it is new or changed, kept when it is not;
- `validator.trainjob.trainer.kubeflow.org`: the referenced runtime must exist; runtime patches
  (v2.2+) name a domain-prefixed `manager` and replicated jobs and containers of the runtime,
  set no env on the `node` and initializer containers, and change only while the TrainJob is
  suspended — v2.2: the new object must say `suspend: true`; v2.3: the old or the new one —
  and no replicated job of the JobSet has active Jobs (a Job with pods not being deleted);
  v2.1 applies the same suspension rule to `podTemplateOverrides`; the trainer env must not set
  the torch or MPI reserved variables. The webhook answers with a plain error, so kube-apiserver
  relays 403 Forbidden with `admission webhook "validator.trainjob.trainer.kubeflow.org"
  denied the request: <errors>`.
Ownership of runtime-patch entries is not checked here, as upstream does not: each entry is one
item of a map list keyed by `manager`, owned through server-side apply field management.
It reads the store (runtimes, the JobSet's status) and changes nothing but the object admitted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agent.twin import trainjob_build as build
from agent.twin.apierror import (
    ApiError,
    FieldProblem,
    aggregate,
    invalid_fields,
    qualified,
    webhook_forbidden,
)
from agent.twin.crds import MULTIKUEUE, TRAINJOB_CONTROLLER, TrainerRelease
from agent.twin.operator_events import timestamp
from agent.twin.resources import lookup
from agent.twin.store import Store

Obj = dict[str, Any]
TRAINJOBS = lookup("trainjobs")
TRAINING_RUNTIMES = lookup("trainingruntimes")
CLUSTER_TRAINING_RUNTIMES = lookup("clustertrainingruntimes")
JOBSETS = lookup("jobsets")
DEFAULTER = "defaulter.trainjob.trainer.kubeflow.org"
VALIDATOR = "validator.trainjob.trainer.kubeflow.org"
_RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HTTP_PATH = re.compile(r"^[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$")


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = obj.get("spec") or {}
    return found


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _normalized(value: Any) -> Any:
    if isinstance(value, Mapping):
        out = {k: _normalized(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    return value


def domain_prefixed_path(value: str, path: str) -> list[FieldProblem]:
    """apimachinery's IsDomainPrefixedPath, e.g. `kueue.x-k8s.io/manager`."""
    if not value:
        return [FieldProblem(path, "FieldValueRequired", "")]
    host, sep, rest = value.partition("/")
    if not sep or not host or not rest:
        return [FieldProblem(path, "FieldValueInvalid",
                             'must be a domain-prefixed path (such as "acme.io/foo")', f'"{value}"')]
    problems = []
    if len(host) > 253 or not _SUBDOMAIN.match(host):
        problems.append(FieldProblem(path, "FieldValueInvalid",
                                     "a lowercase RFC 1123 subdomain must consist of lower case "
                                     "alphanumeric characters, '-' or '.', and must start and "
                                     "end with an alphanumeric character", f'"{host}"'))
    if not _HTTP_PATH.match(rest):
        problems.append(FieldProblem(path, "FieldValueInvalid", "Invalid path", f'"{rest}"'))
    return problems  # fmt: skip


class TrainJobAdmission:
    """The hooks of one Trainer release over one store."""

    def __init__(self, store: Store, *, release: TrainerRelease) -> None:
        self._store = store
        self.release = release

    # --- the CRD's rules ------------------------------------------------------------------------

    def _crd_rules(self, new: Mapping[str, Any]) -> None:
        name = _name(new)
        problems = []
        if not _RFC1035.match(name):
            problems.append(FieldProblem("", "FieldValueInvalid",
                                         "metadata.name must match RFC 1035 DNS label format",
                                         '"object"'))
        if len(name) > 63:
            problems.append(FieldProblem("", "FieldValueInvalid",
                                         "metadata.name must be no more than 63 characters",
                                         '"object"'))
        managed_by = _spec(new).get("managedBy")
        if managed_by is not None and managed_by not in (TRAINJOB_CONTROLLER, MULTIKUEUE):
            problems.append(FieldProblem("spec.managedBy", "FieldValueInvalid",
                                         f"ManagedBy must be {TRAINJOB_CONTROLLER} or "
                                         f"{MULTIKUEUE} if set", '"string"'))
        if problems:
            raise invalid_fields("trainer.kubeflow.org", "TrainJob", name, problems)  # fmt: skip

    # --- the defaulting webhook -----------------------------------------------------------------

    def default(self, old: Obj | None, new: Obj) -> None:
        if not self.release.runtime_patches:
            return
        now = timestamp()
        before = {str(p.get("manager")): p for p in _spec(old or {}).get("runtimePatches") or []}
        for entry in _spec(new).get("runtimePatches") or []:
            previous = before.get(str(entry.get("manager")))
            if previous is None:
                entry.setdefault("time", now)
                continue
            same = ({k: v for k, v in previous.items() if k != "time"}
                    == {k: v for k, v in entry.items() if k != "time"})  # fmt: skip
            entry["time"] = previous.get("time", now) if same else now

    # --- the validating webhook -----------------------------------------------------------------

    def validate(self, old: Obj | None, new: Obj) -> None:
        self._crd_rules(new)
        problems = self._runtime_problems(old, new)
        if problems:
            raise webhook_forbidden(VALIDATOR, aggregate([p.text() for p in problems]))

    def _runtime(self, trainjob: Mapping[str, Any]) -> tuple[Obj | None, FieldProblem | None]:
        kind, name = build.runtime_ref(trainjob)
        if kind == "TrainingRuntime":
            rt, path, noun = TRAINING_RUNTIMES, "spec.runtimeRef", "trainingRuntime"
            namespace: str | None = str((trainjob.get("metadata") or {}).get("namespace")
                                        or "default")  # fmt: skip
        elif kind == "ClusterTrainingRuntime":
            rt, path, noun, namespace = CLUSTER_TRAINING_RUNTIMES, "spec.RuntimeRef", \
                "clusterTrainingRuntime", None  # fmt: skip
        else:
            return None, FieldProblem("", "InternalError",
                                      f"unsupported runtime: {kind}.trainer.kubeflow.org")
        try:
            return self._store.get(rt, name, namespace=namespace), None
        except ApiError:
            return None, FieldProblem(
                path, "FieldValueInvalid",
                f'{qualified(rt)} "{name}" not found: specified {noun} must be created before the '
                "TrainJob is created", "v1alpha1.RuntimeRef{...}")

    def _runtime_problems(self, old: Mapping[str, Any] | None,
                          new: Mapping[str, Any]) -> list[FieldProblem]:  # fmt: skip
        runtime, missing = self._runtime(new)
        if missing is not None or runtime is None:
            return [missing] if missing is not None else []
        problems: list[FieldProblem] = []
        problems.extend(self._reserved_env(new, runtime))
        if self.release.runtime_patches:
            problems.extend(self._suspension(old, new, "runtimePatches", "RuntimePatches"))
            problems.extend(self._patch_targets(new, runtime))
        else:
            problems.extend(self._suspension(old, new, "podTemplateOverrides",
                                             "PodTemplateOverrides"))
            problems.extend(self._override_targets(new, runtime))
        return problems

    def _reserved_env(self, new: Mapping[str, Any], runtime: Mapping[str, Any]) -> list[FieldProblem]:
        policy = build.ml_policy(runtime)
        env = [str(e.get("name")) for e in (_spec(new).get("trainer") or {}).get("env") or []]
        for source, reserved in (("torch", build.TORCH_RESERVED_ENV),
                                 ("mpi", build.MPI_RESERVED_ENV)):  # fmt: skip
            if source in policy and (used := sorted(set(env) & set(reserved))):
                return [FieldProblem("spec.trainer.env", "FieldValueInvalid",
                                     f"must not have reserved envs, invalid envs configured: "
                                     f"[{' '.join(used)}]", "[]v1.EnvVar{...}")]
        return []

    def _suspension(self, old: Mapping[str, Any] | None, new: Mapping[str, Any], key: str,
                    title: str) -> list[FieldProblem]:  # fmt: skip
        if old is None:
            return []
        if _normalized(_spec(old).get(key)) == _normalized(_spec(new).get(key)):
            return []
        path = f"spec.{key}"
        new_suspended = build.is_suspended(new)
        if self.release is TrainerRelease.V2_3:
            if not (build.is_suspended(old) or new_suspended):
                return [FieldProblem(path, "FieldValueForbidden",
                                     f"{title} can only be modified when the TrainJob is "
                                     "suspended before or after the update")]
        elif not new_suspended:
            return [FieldProblem(path, "FieldValueForbidden",
                                 f"{title} can only be modified when the TrainJob is suspended")]
        try:
            jobset = self._store.get(JOBSETS, _name(new),
                                     namespace=str((new.get("metadata") or {}).get("namespace")))
        except ApiError:
            return []
        return [FieldProblem(path, "FieldValueForbidden",
                             f"{title} cannot be modified when the JobSet's ReplicatedJob "
                             f"{status.get('name')} is still active")
                for status in (jobset.get("status") or {}).get("replicatedJobsStatus") or []
                if int(status.get("active", 0)) > 0]  # fmt: skip

    def _patch_targets(self, new: Mapping[str, Any], runtime: Mapping[str, Any]) -> list[FieldProblem]:
        names = build.replicated_job_names(runtime)
        problems: list[FieldProblem] = []
        value = "[]v1alpha1.RuntimePatch{...}"
        for entry in _spec(new).get("runtimePatches") or []:
            problems.extend(domain_prefixed_path(str(entry.get("manager") or ""),
                                                 "spec.runtimePatches.manager"))
            template = (entry.get("trainingRuntimeSpec") or {}).get("template") or {}
            for rjob in (template.get("spec") or {}).get("replicatedJobs") or []:
                containers = names.get(str(rjob.get("name")))
                if containers is None:
                    problems.append(FieldProblem("spec.runtimePatches", "FieldValueInvalid",
                                                 "must not have replicated job that doesn't exist "
                                                 "in the runtime job template", value))
                    continue
                pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}
                       ).get("spec") or {}  # fmt: skip
                problems.extend(_container_problems(pod, containers, str(rjob.get("name")),
                                                    "spec.runtimePatches", value))
        return problems

    def _override_targets(self, new: Mapping[str, Any], runtime: Mapping[str, Any]) -> list[FieldProblem]:
        names = build.replicated_job_names(runtime)
        problems: list[FieldProblem] = []
        value = "[]v1alpha1.PodTemplateOverride{...}"
        for override in _spec(new).get("podTemplateOverrides") or []:
            for target in override.get("targetJobs") or []:
                containers = names.get(str(target.get("name")))
                if containers is None:
                    problems.append(FieldProblem("spec.podTemplateOverrides", "FieldValueInvalid",
                                                 "must not have targetJob that doesn't exist in "
                                                 "the runtime job template", value))
                    continue
                problems.extend(_container_problems(override.get("spec") or {}, containers,
                                                    str(target.get("name")),
                                                    "spec.podTemplateOverrides", value))
        return problems


def _container_problems(pod: Mapping[str, Any], containers: set[str], rjob: str, path: str,
                        value: str) -> list[FieldProblem]:  # fmt: skip
    problems = []
    for kind, items in (("initContainer", pod.get("initContainers") or []),
                        ("container", pod.get("containers") or [])):  # fmt: skip
        for container in items:
            name = str(container.get("name"))
            if name not in containers:
                problems.append(FieldProblem(path, "FieldValueInvalid",
                                             f"must not have {kind} that doesn't exist in the "
                                             f"runtime job {rjob}", value))
            elif kind == "container" and container.get("env") and name in (
                build.NODE, *build.INITIALIZERS):
                problems.append(FieldProblem(path, "FieldValueInvalid",
                                             f"must not have envs for the "
                                             f"{build.DATASET_INITIALIZER}, "
                                             f"{build.MODEL_INITIALIZER}, {build.NODE} containers",
                                             value))
    return problems  # fmt: skip


def register(store: Store, *, release: TrainerRelease) -> TrainJobAdmission:
    """Install the TrainJob's admission for a Trainer release on the store."""
    admission = TrainJobAdmission(store, release=release)
    store.add_mutation(TRAINJOBS, admission.default)
    store.add_admission(TRAINJOBS, admission.validate)
    return admission
