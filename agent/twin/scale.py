"""The scale subresource of the twin's Deployments and ReplicaSets (autoscaling/v1 Scale).

`kubectl scale` and autoscalers read and write `.../deployments/NAME/scale`: a Scale object whose
`spec.replicas` is the parent's and whose `status` carries the parent's replica count and label
selector (as a selector string). `as_scale` builds that view from a stored object; `replicas_of`
reads the wanted count from a Scale a client sent, refusing anything else with 422. Used by the
verb module (apiverbs.py), which writes the count into the parent with a merge patch; pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.twin.apierror import ApiError


def _selector(spec: Mapping[str, Any]) -> str:
    selector = spec.get("selector") or {}
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or ():
        values = ",".join(expr.get("values") or ())
        op = expr.get("operator")
        if op == "In":
            terms.append(f"{expr['key']} in ({values})")
        elif op == "NotIn":
            terms.append(f"{expr['key']} notin ({values})")
        elif op == "Exists":
            terms.append(str(expr["key"]))
        elif op == "DoesNotExist":
            terms.append(f"!{expr['key']}")
    return ",".join(terms)


def as_scale(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The autoscaling/v1 Scale view of a Deployment or ReplicaSet."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in meta
        },
        "spec": {"replicas": int(spec.get("replicas", 1))},
        "status": {
            "replicas": int((obj.get("status") or {}).get("replicas", 0)),
            "selector": _selector(spec),
        },
    }


def replicas_of(scale: Any, *, name: str) -> int:
    """`spec.replicas` of a Scale body: a non-negative integer, or 422 naming the field."""
    spec = scale.get("spec") if isinstance(scale, Mapping) else None
    replicas = spec.get("replicas", 0) if isinstance(spec, Mapping) else None
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise ApiError(
            422,
            "Invalid",
            f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: '
            f"{replicas!r}: must be greater than or equal to 0",
        )
    return replicas
