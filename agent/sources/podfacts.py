"""What the cluster cache reads off one slim object: its key, its controller, a pod's phase, node,
whether it counts towards its gang (bound, live, not deleting) and the GPUs it requests.

Called by `agent.sources.cache` (indexes and gang completion) and the runtime's mirror (object
keys). Pure: a dict in, a plain value out; an unreadable GPU quantity counts nothing.
"""

from __future__ import annotations

from typing import Any

from agent.model.cluster import GPU_RESOURCE
from agent.parsing.numbers import NumberError, parse_int

Obj = dict[str, Any]
ObjKey = tuple[str, str]  # (namespace or "", name)

MAX_GPUS = 1_000_000  # GPUs one container may request: far above any real value


def metadata_of(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def obj_key(obj: Obj) -> ObjKey:
    meta = metadata_of(obj)
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def controller_ref(obj: Obj) -> dict[str, Any] | None:
    for ref in metadata_of(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def only_live_phase_changed(old: Obj, new: Obj) -> bool:
    """True when two versions of a pod differ only in a live phase (Pending/Running/Unknown):
    the diagnosis only distinguishes live from finished pods."""
    if phase(old) in FINISHED_PHASES or phase(new) in FINISHED_PHASES:
        return False
    return {k: v for k, v in old.items() if k != "status"} == {
        k: v for k, v in new.items() if k != "status"
    }


def node_of(pod: Obj) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return node if isinstance(node, str) and node else None


def bound_live(pod: Obj | None) -> bool:
    """Bound to a node, not finished, not being deleted: a pod that counts towards its gang."""
    return (
        pod is not None
        and node_of(pod) is not None
        and phase(pod) not in FINISHED_PHASES
        and not metadata_of(pod).get("deletionTimestamp")
    )


def pod_gpus(pod: Obj | None) -> int:
    """GPUs the pod's containers request (a container's request, else its limit); unreadable
    quantities count nothing."""
    total = 0
    for container in ((pod or {}).get("spec") or {}).get("containers") or []:
        resources = (container.get("resources") or {}) if isinstance(container, dict) else {}
        wanted = (resources.get("requests") or {}).get(GPU_RESOURCE) or (
            resources.get("limits") or {}
        ).get(GPU_RESOURCE)
        try:  # ASCII digits, 0 to a bound: "٨", "-3" or 2**70 count nothing
            total += parse_int(wanted or 0, field=GPU_RESOURCE, maximum=MAX_GPUS)
        except NumberError:
            continue
    return total


def labels_match(selector: dict[str, str], labels: Any) -> bool:
    return isinstance(labels, dict) and all(labels.get(k) == v for k, v in selector.items())
