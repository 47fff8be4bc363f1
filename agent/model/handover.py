"""The hand-over: a fix as a change for the object's source, in the formats its owner applies.

A `Handover` is one object a plan changes: its identity, the fix as a JSON merge patch from the
object's root, and the manifest the patch is for: the one `kubectl apply` last applied (its
`last-applied-configuration` annotation) where the object carries it, else the live object
without its server-set fields. `render` gives, per format:

- `manifest`: that manifest with the fix merged in (YAML), ready to commit where it comes from;
- `kustomize`: a strategic-merge patch file naming its target (`apiVersion`, `kind`, `metadata.
  name`/`namespace`) and the `kustomization.yaml` entry (`patches: - path: ...`);
- `json6902`: the RFC 6902 operations from that manifest to the fixed one, and the
  `kustomization.yaml` entry naming the target (group, version, kind, name, namespace);

each with a Helm values hint (the pod-template keys the fix sets: `nodeSelector`, `tolerations`,
`affinity`, pod labels) for a chart that exposes them, since `helm get values` is the user's:
only for an object Helm renders (`Handover.helm`, from `agent.model.ownership.helm_release`).

Used by the planner (built from the live objects), the proposal read-back, `zonemedic incidents
patch`, the HTTP API and the chat message. Pure: plain dicts in, text out.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import yaml

from agent.errors import InputError

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
                    "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds",
                    "ownerReferences")  # fmt: skip


class PatchFormat(StrEnum):
    MANIFEST = "manifest"
    KUSTOMIZE = "kustomize"
    JSON6902 = "json6902"


class SourceKind(StrEnum):
    LAST_APPLIED = "last-applied"  # the manifest kubectl apply last applied
    LIVE = "live"  # the live object without server-set fields: no applied manifest readable


def parse_format(value: str) -> PatchFormat:
    try:
        return PatchFormat(value)
    except ValueError:
        raise InputError(f"--format: expected one of {', '.join(f.value for f in PatchFormat)}, "
                         f"got {value!r}") from None


def source_manifest(obj: Mapping[str, Any]) -> tuple[dict[str, Any], SourceKind]:
    """The manifest a fix of `obj` is handed over against, and where it comes from."""
    meta = obj.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(LAST_APPLIED)
    if isinstance(raw, str):
        try:
            found = json.loads(raw)
        except ValueError:
            found = None
        if isinstance(found, dict):
            return found, SourceKind.LAST_APPLIED
    out = {k: copy.deepcopy(v) for k, v in obj.items() if k != "status"}
    kept = {k: v for k, v in meta.items() if k not in _SERVER_METADATA}
    annotations = {k: v for k, v in (kept.get("annotations") or {}).items() if k != LAST_APPLIED}
    if annotations:
        kept["annotations"] = annotations
    else:
        kept.pop("annotations", None)
    out["metadata"] = kept
    return out, SourceKind.LIVE


@dataclass(frozen=True)
class Handover:
    """One object's fix for its source: identity, the merge patch, the manifest it applies to."""

    api_version: str
    kind: str
    namespace: str
    name: str
    patch: Mapping[str, Any]  # a JSON merge patch from the object root (None deletes)
    source: Mapping[str, Any]  # the manifest the patch is for
    source_kind: SourceKind
    helm: str | None = None  # the Helm release rendering it ("": unnamed); None: not Helm's

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def fixed(self) -> dict[str, Any]:
        """The source manifest with the fix merged in."""
        out: dict[str, Any] = _merge(copy.deepcopy(dict(self.source)), self.patch)
        return out

    def file_name(self) -> str:
        return f"zonemedic-{self.kind.lower()}-{self.name}.yaml"

    def to_dict(self) -> dict[str, Any]:
        return {"api_version": self.api_version, "kind": self.kind, "namespace": self.namespace,
                "name": self.name, "patch": copy.deepcopy(dict(self.patch)),
                "source": copy.deepcopy(dict(self.source)),
                "source_kind": self.source_kind.value, "helm": self.helm}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Handover:
        return cls(api_version=str(data.get("api_version") or ""), kind=str(data.get("kind") or ""),
                   namespace=str(data.get("namespace") or ""), name=str(data.get("name") or ""),
                   patch=dict(data.get("patch") or {}), source=dict(data.get("source") or {}),
                   source_kind=SourceKind(str(data.get("source_kind") or SourceKind.LIVE.value)),
                   helm=str(data["helm"]) if data.get("helm") is not None else None)  # fmt: skip


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def json6902(base: Any, patch: Mapping[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """RFC 6902 operations that do to `base` what the merge patch `patch` does."""
    ops: list[dict[str, Any]] = []
    here = base if isinstance(base, Mapping) else {}
    for key, value in patch.items():
        path = f"{prefix}/{_escape(str(key))}"
        if value is None:
            if key in here:
                ops.append({"op": "remove", "path": path})
        elif isinstance(value, Mapping) and isinstance(here.get(key), Mapping):
            ops.extend(json6902(here[key], value, path))
        elif key in here:
            ops.append({"op": "replace", "path": path, "value": _merge(None, value)})
        else:
            ops.append({"op": "add", "path": path, "value": _merge(None, value)})
    return ops


def _strategic_patch(h: Handover) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": h.name}
    if h.namespace:
        meta["namespace"] = h.namespace
    body = copy.deepcopy(dict(h.patch))
    body_meta = body.pop("metadata", None) or {}
    return {"apiVersion": h.api_version, "kind": h.kind, "metadata": {**body_meta, **meta}, **body}


def _target(h: Handover) -> dict[str, Any]:
    out = {"group": h.group, "version": h.version, "kind": h.kind, "name": h.name}
    if h.namespace:
        out["namespace"] = h.namespace
    return {k: v for k, v in out.items() if v}


def _pod_templates(patch: Mapping[str, Any], path: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The pod-template fragments of a patch (a `template` with `spec` or `metadata`)."""
    out = []
    for key, value in patch.items():
        if not isinstance(value, Mapping):
            continue
        if key == "template" and ("spec" in value or "metadata" in value):
            out.append(dict(value))
        else:
            out.extend(_pod_templates(value, (*path, key)))
    return out


def helm_hint(h: Handover) -> str:
    """The values keys to set where a chart exposes the pod template (`helm get values` is the
    user's: these are what to set, not a values file); "" for an object Helm does not render."""
    if h.helm is None:
        return ""
    values: dict[str, Any] = {}
    for template in _pod_templates(h.patch):
        spec = template.get("spec") or {}
        for key in ("nodeSelector", "tolerations", "affinity"):
            if spec.get(key) is not None:
                values[key] = spec[key]
        labels = (template.get("metadata") or {}).get("labels")
        if labels:
            values["podLabels"] = labels
    if not values:
        return ""
    release = f"release {h.helm}'s chart" if h.helm else "the chart"
    return (f"# Helm: where {release} exposes the pod template, set these values (key names "
            "vary by chart: check its values.yaml)\n" + yaml.safe_dump(values, sort_keys=True))


KUSTOMIZATION = "kustomization.yaml"
HELM_HINT = "helm-values-hint.yaml"


def files(handovers: tuple[Handover, ...], fmt: PatchFormat) -> dict[str, str]:
    """The files of one format, by name: the fixed manifests, or the patch files and the
    `kustomization.yaml` entries naming their targets; a Helm values hint where the fix sets
    pod-template keys of an object Helm renders."""
    out: dict[str, str] = {}
    entries: list[dict[str, Any]] = []
    hints: list[str] = []
    for h in handovers:
        said = ("as kubectl apply last applied it" if h.source_kind is SourceKind.LAST_APPLIED
                else "as it is live (no applied manifest was readable)")  # fmt: skip
        where = f"{h.kind} {h.namespace}/{h.name}"
        if fmt is PatchFormat.MANIFEST:
            out[f"{h.kind.lower()}-{h.name}.yaml"] = (
                f"# {where}: the manifest {said}, with the fix\n"
                + yaml.safe_dump(h.fixed(), sort_keys=False))  # fmt: skip
        elif fmt is PatchFormat.KUSTOMIZE:
            out[h.file_name()] = (f"# strategic-merge patch of {where}\n"
                                  + yaml.safe_dump(_strategic_patch(h), sort_keys=False))  # fmt: skip
            entries.append({"path": h.file_name()})
        else:
            out[h.file_name()] = (f"# JSON 6902 patch of {where}, against the manifest {said}\n"
                                  + yaml.safe_dump(json6902(h.source, h.patch), sort_keys=False))  # fmt: skip
            entries.append({"path": h.file_name(), "target": _target(h)})
        hint = helm_hint(h)
        if hint:
            hints.append(f"# {where}\n{hint}")
    if entries:
        out[KUSTOMIZATION] = ("# add to the kustomization.yaml that lists these objects\n"
                              + yaml.safe_dump({"patches": entries}, sort_keys=False))  # fmt: skip
    if hints:
        out[HELM_HINT] = "---\n".join(hints)
    return out


def document(incident_id: int, handovers: tuple[Handover, ...], fmt: PatchFormat) -> dict[str, Any]:
    """The hand-over as JSON (`incidents patch --output json`, the HTTP API): the format, the
    files by name, and the objects they change with where their manifest came from."""
    return {"incident": incident_id, "format": fmt.value, "files": files(handovers, fmt),
            "objects": [{"kind": h.kind, "namespace": h.namespace, "name": h.name,
                         "source": h.source_kind.value} for h in handovers]}  # fmt: skip


def render(handovers: tuple[Handover, ...], fmt: PatchFormat) -> str:
    """Every file of one format as one text, each under a `# file: NAME` line."""
    return "\n".join(f"# file: {name}\n{text}" for name, text in files(handovers, fmt).items())
