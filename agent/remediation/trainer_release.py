"""Which pod-template override a cluster's Kubeflow Trainer serves, as its TrainJob CRD shows it.

Who calls it: `agent.remediation.observe.ClusterReader.trainer_overrides` reads the
`trainjobs.trainer.kubeflow.org` CustomResourceDefinition from the API server and hands it here;
the TrainJob planner (`agent.remediation.jobset_plan`) plans with what it returns. Pure: the CRD
as the API returns it (a plain dict) in, a `TrainerOverrides` out; it does not read the cluster.

The rule, from the `v1alpha1` schema's `spec` properties (kubeflow/trainer's CRDs, v2.0-v2.3):
- `runtimePatches` (v2.2+): a map list keyed by `manager`; zonemedic writes its own entry. The
  Trainer's webhook lets it change only while the TrainJob is suspended: v2.2 wants the new
  object suspended, v2.3 the old or the new one, so on v2.3 the patch and the resume may be one
  request. v2.3 is told from v2.2 by the pod-spec patch's `terminationGracePeriodSeconds`, which
  v2.3 added to `runtimePatches`;
- `podTemplateOverrides` (v2.1): an atomic list of `{targetJobs, metadata, spec}`, changed only
  while the new object is suspended;
- `podSpecOverrides` (v2.0) carries no pod labels (the zone-mirroring label cannot be set), and
  no CRD at all means no Trainer: both are `OverrideField.NONE`, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agent.model.workload import TRAINJOB

TRAINJOB_CRD = f"{TRAINJOB.plural}.{TRAINJOB.group}"
TRAINJOB_VERSION = TRAINJOB.versions[0]


class OverrideField(StrEnum):
    """The TrainJob field zonemedic writes its pod-template changes into."""

    RUNTIME_PATCHES = "runtimePatches"  # v2.2+
    POD_TEMPLATE_OVERRIDES = "podTemplateOverrides"  # v2.1
    NONE = "none"  # v2.0, or no Trainer: nothing zonemedic can write


@dataclass(frozen=True)
class TrainerOverrides:
    """What the installed Trainer serves: the field, whether the patch and the resume may be one
    request (v2.3+), and why not when the field is NONE."""

    field: OverrideField
    resume_with_patch: bool = False
    refusal: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field.value, "resume_with_patch": self.resume_with_patch,
                "refusal": self.refusal}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainerOverrides:
        return cls(OverrideField(data["field"]), bool(data.get("resume_with_patch")),
                   str(data.get("refusal") or ""))  # fmt: skip


def _props(schema: Any) -> Mapping[str, Any]:
    found = schema.get("properties") if isinstance(schema, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _path(schema: Any, *keys: str) -> Any:
    node = schema
    for key in keys:
        if key == "[]":
            node = node.get("items") if isinstance(node, Mapping) else None
        else:
            node = _props(node).get(key)
    return node


def served_overrides(crd: Mapping[str, Any] | None) -> TrainerOverrides:
    """What the Trainer whose TrainJob CRD is `crd` serves (None: no TrainJob CRD served)."""
    if crd is None:
        return TrainerOverrides(OverrideField.NONE, refusal=(
            f"no {TRAINJOB_CRD} CustomResourceDefinition is served: the Kubeflow Trainer is not "
            "installed"))  # fmt: skip
    schema = None
    for version in (crd.get("spec") or {}).get("versions") or []:
        if isinstance(version, Mapping) and version.get("name") == TRAINJOB_VERSION:
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
    spec = _props(_path(schema, "spec"))
    if OverrideField.RUNTIME_PATCHES.value in spec:
        pod_spec = _path(spec[OverrideField.RUNTIME_PATCHES.value], "[]", "trainingRuntimeSpec",
                         "template", "spec", "replicatedJobs", "[]", "template", "spec",
                         "template", "spec")  # fmt: skip
        v23 = "terminationGracePeriodSeconds" in _props(pod_spec)
        return TrainerOverrides(OverrideField.RUNTIME_PATCHES, resume_with_patch=v23)
    if OverrideField.POD_TEMPLATE_OVERRIDES.value in spec:
        return TrainerOverrides(OverrideField.POD_TEMPLATE_OVERRIDES)
    if "podSpecOverrides" in spec:
        return TrainerOverrides(OverrideField.NONE, refusal=(
            "the installed Kubeflow Trainer is v2.0 (its TrainJob serves podSpecOverrides, which "
            "cannot set pod labels): zonemedic needs v2.1+ (podTemplateOverrides) or v2.2+ "
            "(runtimePatches)"))  # fmt: skip
    return TrainerOverrides(OverrideField.NONE, refusal=(
        f"the {TRAINJOB_CRD} CRD serves neither runtimePatches (Trainer v2.2+) nor "
        "podTemplateOverrides (v2.1): zonemedic cannot change the TrainJob's pod templates"))
