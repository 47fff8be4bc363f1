"""One pod template retargeted to a zone: the fields that change, how they read back, the pods it makes.

Who calls it: the family planners (`agent.remediation.training_plan`, `agent.remediation.group_plan`)
for every template a plan touches, and `agent.remediation.plan` (a `Target`'s changes are
`TemplateChange`s; its diff renders them). Pure: plain dicts in and out; it does not decide which
templates to touch, read the cluster or write it.

Rules, for every pod template the plan touches (only the fields below change; everything else is
kept as it is):
- zone pin: `nodeSelector[topology.kubernetes.io/zone] = target` (a map: a merge patch adds the key);
  where the template has required nodeAffinity terms, the zone expression goes into EVERY
  `nodeSelectorTerm` (terms are ORed), replacing any zone expression the term had;
- training kinds only, where the kind's descriptor lets `spec.affinity` change while suspended
  (every Kubeflow kind): a required `podAffinity` term on the zone key selecting the job's own
  pods (its job-name label, `training.kubeflow.org/job-name`), appended to the template's
  existing required terms;
- tolerations: the nodes that could take the template's pods are the schedulable nodes of the
  target zone that match its other nodeSelector keys and its (zone-pinned) required node
  affinity and whose allocatable resources cover its pods' requests (a CPU node cannot take a
  pod that asks for a GPU, untainted or not); when none of them accepts the template as it is,
  the tolerations for their NoSchedule and NoExecute taints (read from the nodes) are appended
  to the template's own. Their current use is not weighed (the room check does that);
- the zone-mirroring pod label (the resolved `diagnosis.pod_zone_label` keys) is set to the target
  zone where the template carries it;
- a zone-keyed topologySpreadConstraint is never added; a template that already has a
  `DoNotSchedule` one cannot be co-located, so the plan refuses (`PlanRefusedError`).
A merge patch replaces arrays whole, so tolerations, nodeSelectorTerms and podAffinity terms are
built from the live object and sent complete. `pod_needs` says which pods a template makes as
they will be after the patch (read from `merged_view`: the patched template sharing what the
patch does not reach, never copied), and `require_room` whether the target zone has room for
them (`agent.remediation.room`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import yaml

from agent.model.cluster import ZONE_LABEL
from agent.model.scheduling import required_node_affinity_matches
from agent.remediation.room import (
    PodNeed,
    blocking_taints,
    check_room,
    could_hold,
    node_labels,
    node_name,
    pod_spec_requests,
    schedulable,
    tolerates,
)

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
# libyaml's safe dumper when PyYAML has it (the same YAML, several times faster: the admission
# webhook plans on its request path), else the pure-Python one
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class PlanRefusedError(Exception):
    """No plan: the job cannot be co-located (raised while planning; the message is the
    `Refusal`'s reason, said to people as is)."""


class TemplateState(StrEnum):
    PLANNED = "planned"
    ORIGINAL = "original"
    OTHER = "other"


@dataclass(frozen=True)
class TemplateChange:
    """The touched fields of one pod template, before (live) and after (planned).

    `before`/`after` hold only touched fields, in a flat form: `labels` and `annotations` (key ->
    value or None),
    `nodeSelector` (the zone value or None), `nodeSelectorTerms`, `podAffinity` (the required
    terms or None) and `tolerations` (the list or None). None means absent.
    """

    replica: str
    path: tuple[str, ...]
    before: Mapping[str, Any]
    after: Mapping[str, Any]
    absent: tuple[str, ...] = ()  # `nodeSelector`, `affinity`, `podAffinity`: not in the live template

    def fragment(self, *, restore: bool = False, shared: bool = False) -> dict[str, Any]:
        """The merge patch of the template (None values delete the field). Restoring deletes the
        maps the forward patch created, so the template reads back exactly as it was. `shared`
        (forward only): its lists are this change's own, not copies (to read, never change)."""
        if not restore:
            return template_fragment(self.after, drop_none=False, copied=not shared)
        out = template_fragment(self.before, drop_none=False)
        spec = out.setdefault("spec", {})
        if "nodeSelector" in self.absent and "nodeSelector" in self.before:
            spec["nodeSelector"] = None
        if "affinity" in self.absent:
            spec["affinity"] = None
        elif "podAffinity" in self.absent and "podAffinity" in self.before:
            spec.setdefault("affinity", {})["podAffinity"] = None
        return out

    def nested(self, *, restore: bool = False) -> dict[str, Any]:
        """The template fragment nested at `path` from the object root."""
        out: dict[str, Any] = self.fragment(restore=restore)
        for key in reversed(self.path):
            out = {key: out}
        return out

    def state_of(self, obj: Mapping[str, Any]) -> TemplateState:
        """Whether the live object's template holds the planned or the original values."""
        template: Any = obj
        for key in self.path:
            template = template.get(key) if isinstance(template, Mapping) else None
        current = _touched(template if isinstance(template, Mapping) else {}, self.after)
        if current == _normal(self.after):
            return TemplateState.PLANNED
        if current == _normal(self.before):
            return TemplateState.ORIGINAL
        return TemplateState.OTHER

    def to_dict(self) -> dict[str, Any]:
        return {"replica": self.replica, "path": list(self.path), "before": dict(self.before),
                "after": dict(self.after), "absent": list(self.absent)}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TemplateChange:
        return cls(replica=str(data["replica"]), path=tuple(data["path"]),
                   before=dict(data["before"]), after=dict(data["after"]),
                   absent=tuple(data.get("absent") or ()))  # fmt: skip


# ------------------------------------------------------------------------------------------------
# small dict helpers


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = obj.get("metadata") or {}
    return found


def merge_into(base: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """Deep-merge `patch` into `base` (maps merge, everything else replaces); in place."""
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            merge_into(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch of `target` by `patch` (a new value; inputs untouched): the
    value `merged_view` reads, made of copies (the target and the patch copied once each)."""
    return merged_view(copy.deepcopy(target), copy.deepcopy(patch))


def merged_view(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch of `target` by `patch` as a value that shares with its inputs
    every part the patch does not reach (new maps only along the patch's paths): to read, never
    to change (a change would change `target` or `patch`). Inputs untouched."""
    if type(patch) is not dict and not isinstance(patch, Mapping):
        return patch
    out = dict(target) if type(target) is dict or isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged_view(out.get(key), value)
    return out


def template_fragment(values: Mapping[str, Any], *, drop_none: bool, copied: bool = True) -> dict[str, Any]:
    """The merge patch of a template that sets the flat `values`; `copied` False: its lists
    are those of `values` (to read, never change)."""
    clone = copy.deepcopy if copied else _same
    out: dict[str, Any] = {}
    for key in ("labels", "annotations"):
        entries = values.get(key)
        if entries:
            shown = {k: v for k, v in entries.items() if v is not None or not drop_none}
            if shown:
                out.setdefault("metadata", {})[key] = shown
    spec: dict[str, Any] = {}
    if "nodeSelector" in values and (values["nodeSelector"] is not None or not drop_none):
        spec["nodeSelector"] = {ZONE_LABEL: values["nodeSelector"]}
    if "tolerations" in values and (values["tolerations"] is not None or not drop_none):
        spec["tolerations"] = clone(values["tolerations"])
    affinity: dict[str, Any] = {}
    if "nodeSelectorTerms" in values and (values["nodeSelectorTerms"] is not None or not drop_none):
        terms = values["nodeSelectorTerms"]
        affinity["nodeAffinity"] = {
            REQUIRED: {"nodeSelectorTerms": clone(terms)} if terms is not None else None
        }
    if "podAffinity" in values and (values["podAffinity"] is not None or not drop_none):
        affinity["podAffinity"] = {REQUIRED: clone(values["podAffinity"])}
    if affinity:
        spec["affinity"] = affinity
    if spec:
        out["spec"] = spec
    return out


def _same(value: Any) -> Any:
    return value


def _read(template: Mapping[str, Any]) -> dict[str, Any]:
    """The touchable fields of a template in the flat form of `TemplateChange`."""
    spec = template.get("spec") or {}
    affinity = spec.get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(REQUIRED) or {}
    return {
        "labels": dict(meta_of(template).get("labels") or {}),
        "annotations": dict(meta_of(template).get("annotations") or {}),
        "nodeSelector": (spec.get("nodeSelector") or {}).get(ZONE_LABEL),
        "nodeSelectorTerms": required.get("nodeSelectorTerms") or None,
        "podAffinity": (affinity.get("podAffinity") or {}).get(REQUIRED) or None,
        "tolerations": spec.get("tolerations") or None,
    }


def _normal(values: Mapping[str, Any]) -> dict[str, Any]:
    """Absent and empty are the same (an emptied list or map reads back as absent)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in ("labels", "annotations"):
            out[key] = {k: v for k, v in (value or {}).items()}
        else:
            out[key] = value or None
    return out


def _touched(template: Mapping[str, Any], like: Mapping[str, Any]) -> dict[str, Any]:
    live = _read(template)
    out: dict[str, Any] = {}
    for key in like:
        if key in ("labels", "annotations"):
            out[key] = {k: live[key].get(k) for k in like[key]}
        else:
            out[key] = live[key] or None
    return out


def rendered(values: Mapping[str, Any]) -> list[str]:
    """The touched fields as YAML lines (absent ones left out), for the diff."""
    view = template_fragment(values, drop_none=True)
    if not view:
        return []
    text: str = yaml.dump(view, Dumper=_DUMPER, sort_keys=True, default_flow_style=False)
    return text.splitlines()


# ------------------------------------------------------------------------------------------------
# retargeting one template


def _pin_term(term: Mapping[str, Any], zone: str) -> dict[str, Any]:
    exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") != ZONE_LABEL]
    exprs.append({"key": ZONE_LABEL, "operator": "In", "values": [zone]})
    return {**copy.deepcopy(dict(term)), "matchExpressions": exprs}


def _toleration(taint: Mapping[str, Any]) -> dict[str, Any]:
    value = taint.get("value") or ""
    tol: dict[str, Any] = {"key": taint.get("key"), "operator": "Equal" if value else "Exists"}
    if value:
        tol["value"] = value
    tol["effect"] = taint.get("effect")
    return tol


def _spreads_across_zones(spec: Mapping[str, Any]) -> bool:
    for tsc in spec.get("topologySpreadConstraints") or []:
        if tsc.get("topologyKey") == ZONE_LABEL and (
            tsc.get("whenUnsatisfiable") or "DoNotSchedule"
        ) == "DoNotSchedule":
            return True
    return False


def retarget(
    template: Mapping[str, Any],
    *,
    replica: str,
    path: tuple[str, ...],
    zone: str,
    zone_nodes: Sequence[Mapping[str, Any]],
    mirror_keys: Sequence[str],
    affinity_to: tuple[str, str] | None,
) -> TemplateChange | None:
    spec = template.get("spec") or {}
    if _spreads_across_zones(spec):
        raise PlanRefusedError(
            f"{replica}: its topologySpreadConstraint on {ZONE_LABEL} (DoNotSchedule) spreads the "
            "pods across zones; co-locating it would leave them unschedulable"
        )
    live = _read(template)
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    labels = {k: zone for k in mirror_keys if k in live["labels"] and live["labels"][k] != zone}
    if labels:
        before["labels"] = {k: live["labels"][k] for k in labels}
        after["labels"] = labels
    if live["nodeSelector"] != zone:
        before["nodeSelector"] = live["nodeSelector"]
        after["nodeSelector"] = zone
    terms = live["nodeSelectorTerms"]
    if terms:
        pinned = [_pin_term(t, zone) for t in terms]
        if pinned != terms:
            before["nodeSelectorTerms"] = copy.deepcopy(terms)
            after["nodeSelectorTerms"] = pinned
    if affinity_to is not None:
        term = {"labelSelector": {"matchLabels": {affinity_to[0]: affinity_to[1]}},
                "topologyKey": ZONE_LABEL}  # fmt: skip
        existing = list(live["podAffinity"] or [])
        if term not in existing:
            before["podAffinity"] = copy.deepcopy(live["podAffinity"])
            after["podAffinity"] = [*copy.deepcopy(existing), term]
    tolerations = list(live["tolerations"] or [])
    other_selector = {
        k: v for k, v in (spec.get("nodeSelector") or {}).items() if k != ZONE_LABEL
    }
    placement: dict[str, Any] = {"nodeSelector": other_selector}
    terms_after = after.get("nodeSelectorTerms", terms)
    if terms_after is not None:
        placement["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms_after}}}
    requests = pod_spec_requests(spec)
    candidates = [
        n for n in zone_nodes
        if schedulable(n) and required_node_affinity_matches(placement, node_labels(n), node_name(n))
        and could_hold(n, requests)
    ]  # fmt: skip
    if candidates and not any(
        all(tolerates(tolerations, t) for t in blocking_taints(n)) for n in candidates
    ):
        added: list[dict[str, Any]] = []
        for node in candidates:
            for taint in blocking_taints(node):
                if not tolerates(tolerations + added, taint):
                    added.append(_toleration(taint))
        before["tolerations"] = copy.deepcopy(live["tolerations"])
        after["tolerations"] = [*copy.deepcopy(tolerations), *added]
    if not after:
        return None
    absent = tuple(
        name
        for name, missing in (
            ("nodeSelector", "nodeSelector" not in spec),
            ("affinity", "affinity" not in spec),
            ("podAffinity", "podAffinity" not in (spec.get("affinity") or {})),
        )
        if missing
    )
    return TemplateChange(replica=replica, path=path, before=before, after=after, absent=absent)


# ------------------------------------------------------------------------------------------------
# the pods it makes, and room for them


def pod_needs(
    name: str,
    template: Mapping[str, Any],
    change: TemplateChange | None,
    count: int,
    *,
    namespace: str,
    relabel: Mapping[str, str],
    pod_labels: Callable[[int], Mapping[str, str]] = lambda _: {},
) -> list[PodNeed]:
    """The pods a template makes, as they will be after the patch: its (patched) nodeSelector,
    tolerations and affinity; labels = what the live pod `i` carries besides the template
    (operator labels), the patched template's labels, then `relabel` (the zone-mirroring keys
    set to the target zone) where the pod carries the key."""
    spec = template.get("spec") or {}
    values = merged_view(template, change.fragment(shared=True)) if change is not None else template
    patched = values.get("spec") or {}
    template_labels = meta_of(values).get("labels") or {}
    requests = pod_spec_requests(spec)
    selector = dict(patched.get("nodeSelector") or {})
    tolerations = tuple(patched.get("tolerations") or ())
    affinity = dict(patched.get("affinity") or {})
    out: list[PodNeed] = []
    for i in range(count):
        labels = {**pod_labels(i), **template_labels}
        labels.update({k: v for k, v in relabel.items() if k in labels})
        out.append(PodNeed(
            name=f"{name}-{i}" if count > 1 else name, requests=requests, node_selector=selector,
            tolerations=tolerations, namespace=namespace, labels=labels, affinity=affinity,
        ))  # fmt: skip
    return out


def nodes_in_zone(nodes: Sequence[Mapping[str, Any]], zone: str) -> list[Mapping[str, Any]]:
    return [n for n in nodes if node_labels(n).get(ZONE_LABEL) == zone]


def pod_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = meta_of(pod)
    return str(meta.get("namespace")), str(meta.get("name"))


def require_room(
    needs: Sequence[PodNeed], *, zone: str, nodes: Sequence[Mapping[str, Any]],
    bound_pods: Sequence[Mapping[str, Any]], replaced: frozenset[tuple[str, str]],
) -> None:  # fmt: skip
    """Refuse (`PlanRefusedError`) unless the zone has room for `needs` (see
    `agent.remediation.room`); `replaced`: the (namespace, name) of live pods the plan replaces."""
    reason = check_room(
        needs, zone=zone, zone_label=ZONE_LABEL, nodes=nodes, bound_pods=bound_pods,
        replaced=replaced,
    )  # fmt: skip
    if reason is not None:
        raise PlanRefusedError(reason)
