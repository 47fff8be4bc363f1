"""The CustomResourceDefinitions the twin installs: one per custom kind of its resource table.

The twin serves every custom kind of `resources.RESOURCES`; this module builds the
`apiextensions.k8s.io/v1` CustomResourceDefinition objects that describe them (names, scope,
versions, status subresource, printer columns, schema) so that a client can read, as on a real
cluster, what the installed operators serve. The Kubeflow Trainer's TrainJob schema depends on
the Trainer release, a twin setting (`TrainerRelease`, a scenario option):
- v2.1 serves `spec.labels`, `spec.annotations` and `spec.podTemplateOverrides`;
- v2.2 and v2.3 serve `spec.runtimePatches` (a map list keyed by `manager`) instead, and make
  `spec.trainer` and `spec.initializer` immutable.
The schemas are structural and declare the levels whose semantics the twin enforces from them
(`crd_schema.py`: pruning of undeclared fields, defaults, `x-kubernetes-list-type: map` keys,
the `self == oldSelf` immutability rules); deeper levels (pod templates, ML policies, status)
keep unknown fields, where the upstream schemas spell out every field. The Kubeflow v1 and
Cilium kinds keep all fields.

`crd_documents(release)` builds them; the store installs them (`Store.install_crds`) when it is
built and `TwinCluster` re-installs them for the scenario's release. Pure: it writes nothing.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from agent.twin.resources import RESOURCES, ResourceType, lookup

Obj = dict[str, Any]
CRDS = lookup("customresourcedefinitions")
TRAINER_GROUP = "trainer.kubeflow.org"
JOBSET_GROUP = "jobset.x-k8s.io"
TRAINJOB_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"


class TrainerRelease(StrEnum):
    """The Kubeflow Trainer release whose CRDs and webhooks the twin serves."""

    V2_1 = "v2.1"
    V2_2 = "v2.2"
    V2_3 = "v2.3"

    @property
    def runtime_patches(self) -> bool:
        """v2.2+: `spec.runtimePatches`; before: `spec.podTemplateOverrides`."""
        return self is not TrainerRelease.V2_1


DEFAULT_RELEASE = TrainerRelease.V2_3


def crd_name(rt: ResourceType) -> str:
    return f"{rt.plural}.{rt.group}"


# --- schema building blocks -----------------------------------------------------------------


def _open(kind: str = "object") -> Obj:
    return {"type": kind, "x-kubernetes-preserve-unknown-fields": True}


def _string(**extra: Any) -> Obj:
    return {"type": "string", **extra}


def _immutable(schema: Obj, message: str = "field is immutable") -> Obj:
    return {**schema, "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": message}]}


def _strings_map() -> Obj:
    return {"type": "object", "additionalProperties": {"type": "string"}}


def _object(properties: Obj, **extra: Any) -> Obj:
    return {"type": "object", "properties": properties, **extra}


def _map_list(item: Obj, *keys: str, **extra: Any) -> Obj:
    return {"type": "array", "items": item, "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": list(keys), **extra}  # fmt: skip


def _root(spec: Obj, *, status: bool, root_rules: list[Obj] | None = None) -> Obj:
    properties: Obj = {"apiVersion": _string(), "kind": _string(), "metadata": {"type": "object"},
                       "spec": spec}  # fmt: skip
    if status:
        properties["status"] = _open()
    out = _object(properties)
    if root_rules:
        out["x-kubernetes-validations"] = root_rules
    return out


def _metadata_patch() -> Obj:
    return _object({"labels": _strings_map(), "annotations": _strings_map()})


def _container_patch() -> Obj:
    return _object({"name": _string(), "env": _open("array"), "volumeMounts": _open("array"),
                    "securityContext": _open()}, required=["name"])  # fmt: skip


def _pod_spec_patch(release: TrainerRelease) -> Obj:
    fields: Obj = {
        "serviceAccountName": _immutable(_string()),
        "volumes": _immutable(_open("array")),
        "initContainers": _immutable(_map_list(_container_patch(), "name")),
        "containers": _immutable(_map_list(_container_patch(), "name")),
        "imagePullSecrets": _immutable(_open("array")),
        "securityContext": _immutable(_open()),
        "nodeSelector": _strings_map(),
        "affinity": _open(),
        "tolerations": {"type": "array", "items": _open(), "x-kubernetes-list-type": "atomic"},
        "schedulingGates": _map_list(_object({"name": _string()}), "name"),
    }
    if release is TrainerRelease.V2_3:
        fields["terminationGracePeriodSeconds"] = _immutable({"type": "integer"})
    return _object(fields)


def _runtime_patch(release: TrainerRelease) -> Obj:
    pod_template = _object({"metadata": _metadata_patch(), "spec": _pod_spec_patch(release)})
    replicated_job = _object({
        "name": _string(),
        "template": _object({"metadata": _metadata_patch(),
                             "spec": _object({"template": pod_template})}),
    }, required=["name"])  # fmt: skip
    template = _object({"metadata": _metadata_patch(),
                        "spec": _object({"replicatedJobs": _map_list(replicated_job, "name")})})
    return _object({
        "manager": _immutable(_string(minLength=1, maxLength=253)),
        "time": _string(format="date-time"),
        "trainingRuntimeSpec": _object({"template": template}),
    }, required=["manager"])  # fmt: skip


def _pod_template_override() -> Obj:
    spec = _object({
        "serviceAccountName": _string(), "nodeSelector": _strings_map(), "affinity": _open(),
        "tolerations": {"type": "array", "items": _open(), "x-kubernetes-list-type": "atomic"},
        "volumes": _open("array"), "initContainers": _map_list(_container_patch(), "name"),
        "containers": _map_list(_container_patch(), "name"),
        "schedulingGates": _map_list(_object({"name": _string()}), "name"),
        "imagePullSecrets": _open("array"),
    })  # fmt: skip
    target = _object({"name": _string(minLength=1)}, required=["name"])
    return _object({
        "targetJobs": {"type": "array", "items": target, "x-kubernetes-list-type": "atomic"},
        "metadata": _metadata_patch(), "spec": spec,
    }, required=["targetJobs"])  # fmt: skip


def trainjob_schema(release: TrainerRelease) -> Obj:
    """The TrainJob `openAPIV3Schema` of a Trainer release."""
    later = release is not TrainerRelease.V2_1
    immutable = "field is immutable" if later else "runtimeRef is immutable"
    runtime_ref = _immutable(_object({
        "name": _string(minLength=1),
        "apiGroup": _string(default=TRAINER_GROUP),
        "kind": _string(default="ClusterTrainingRuntime"),
    }, required=["name"]), immutable)  # fmt: skip
    managed_by = _string(default=TRAINJOB_CONTROLLER)
    managed_by["x-kubernetes-validations"] = [
        {"rule": f"self in ['{TRAINJOB_CONTROLLER}', '{MULTIKUEUE}']",
         "message": f"ManagedBy must be {TRAINJOB_CONTROLLER} or {MULTIKUEUE} if set"},
        {"rule": "self == oldSelf",
         "message": "field is immutable" if later else "ManagedBy value is immutable"},
    ]  # fmt: skip
    spec: Obj = {
        "runtimeRef": runtime_ref,
        "initializer": _immutable(_open()) if later else _open(),
        "trainer": _immutable(_open()) if later else _open(),
        "suspend": {"type": "boolean", "default": False},
        "managedBy": managed_by,
    }
    if later:
        spec["runtimePatches"] = _map_list(_runtime_patch(release), "manager", maxItems=16)
        spec["activeDeadlineSeconds"] = _immutable({"type": "integer", "minimum": 1})
    else:
        spec["labels"] = _strings_map()
        spec["annotations"] = _strings_map()
        spec["podTemplateOverrides"] = {"type": "array", "items": _pod_template_override(),
                                        "x-kubernetes-list-type": "atomic"}  # fmt: skip
    rules = [
        {"rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
         "message": "metadata.name must match RFC 1035 DNS label format"},
        {"rule": "size(self.metadata.name) <= 63",
         "message": "metadata.name must be no more than 63 characters"},
    ]  # fmt: skip
    return _root(_object(spec, required=["runtimeRef"]), status=True, root_rules=rules)


def runtime_schema() -> Obj:
    """(Cluster)TrainingRuntime: `mlPolicy`, `podGroupPolicy`, `template` (a JobSet template)."""
    spec = _object({"mlPolicy": _open(), "podGroupPolicy": _open(),
                    "template": _object({"metadata": _open(), "spec": _open()})})  # fmt: skip
    return _root(spec, status=False)


def jobset_schema() -> Obj:
    """JobSet v1alpha2: the spec fields, defaults, map lists and immutable policies."""
    value_immutable = "Value is immutable"
    depends_on = _object({"name": _string(), "status": _string(enum=["Ready", "Complete"])},
                         required=["name", "status"])  # fmt: skip
    replicated_job = _object({
        "name": _string(),
        "groupName": _string(default="default"),
        "replicas": {"type": "integer", "default": 1},
        "template": _open(),
        "dependsOn": _immutable(_map_list(depends_on, "name", maxItems=5), value_immutable),
    }, required=["name", "template"])  # fmt: skip
    failure_policy = _object({
        "maxRestarts": {"type": "integer"},
        "restartStrategy": _string(default="Recreate",
                                   enum=["Recreate", "BlockingRecreate", "InPlaceRestart"]),
        "rules": _open("array"),
    })  # fmt: skip
    spec = _object({
        "replicatedJobs": _map_list(replicated_job, "name"),
        "network": _immutable(_object({"enableDNSHostnames": {"type": "boolean"},
                                       "subdomain": _string(),
                                       "publishNotReadyAddresses": {"type": "boolean"}}),
                              value_immutable),
        "successPolicy": _immutable(_object({
            "operator": _string(enum=["All", "Any"]),
            "targetReplicatedJobs": {"type": "array", "items": _string(),
                                     "x-kubernetes-list-type": "atomic"},
        }, required=["operator"]), value_immutable),
        "failurePolicy": _immutable(failure_policy, value_immutable),
        "startupPolicy": _immutable(_object({"startupPolicyOrder": _string(
            enum=["AnyOrder", "InOrder"])}), value_immutable),
        "suspend": {"type": "boolean"},
        "coordinator": _object({"replicatedJob": _string(), "jobIndex": {"type": "integer"},
                                "podIndex": {"type": "integer"}}, required=["replicatedJob"]),
        "managedBy": _string(),
        "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
        "volumeClaimPolicies": _immutable(_open("array"), value_immutable),
    })  # fmt: skip
    return _root(spec, status=True)


def schema_for(rt: ResourceType, release: TrainerRelease) -> Obj:
    if rt.group == TRAINER_GROUP and rt.plural == "trainjobs":
        return trainjob_schema(release)
    if rt.group == TRAINER_GROUP:
        return runtime_schema()
    if rt.group == JOBSET_GROUP:
        return jobset_schema()
    return _open()


# --- the CRD objects ------------------------------------------------------------------------


def crd_documents(release: TrainerRelease = DEFAULT_RELEASE) -> list[Obj]:
    """One CustomResourceDefinition per custom kind (kinds served in two versions share one)."""
    by_name: dict[str, list[ResourceType]] = {}
    for rt in RESOURCES:
        if not rt.builtin:
            by_name.setdefault(crd_name(rt), []).append(rt)
    return [_crd(name, rows, release) for name, rows in by_name.items()]


def _crd(name: str, rows: list[ResourceType], release: TrainerRelease) -> Obj:
    first = rows[0]
    names: Obj = {"kind": first.kind, "listKind": first.list_kind, "plural": first.plural,
                  "singular": first.singular}  # fmt: skip
    if first.short_names:
        names["shortNames"] = list(first.short_names)
    if first.categories:
        names["categories"] = list(first.categories)
    versions = []
    for index, rt in enumerate(rows):
        version: Obj = {"name": rt.version, "served": True, "storage": index == 0,
                        "schema": {"openAPIV3Schema": schema_for(rt, release)}}  # fmt: skip
        if "status" in rt.subresources:
            version["subresources"] = {"status": {}}
        if rt.printer_columns:
            version["additionalPrinterColumns"] = [c.as_crd() for c in rt.printer_columns]
        versions.append(version)
    annotations = {}
    if first.group == TRAINER_GROUP:
        annotations["twin.zonemedic.io/trainer-release"] = release.value
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"group": first.group, "names": names,
                 "scope": "Namespaced" if first.namespaced else "Cluster", "versions": versions},
        "status": {
            "acceptedNames": dict(names),
            "storedVersions": [rows[0].version],
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found"},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted"},
            ],
        },
    }  # fmt: skip


def version_schema(crd: Obj, version: str) -> Obj | None:
    """The `openAPIV3Schema` a stored CRD declares for one version (None when it has none)."""
    for item in (crd.get("spec") or {}).get("versions") or []:
        if item.get("name") == version:
            found: Obj | None = ((item.get("schema") or {}).get("openAPIV3Schema")) or None
            return found
    return None
