"""Parse network policy manifests (dicts from YAML/JSON) into the evaluator's `Policy` form.

Handles cilium.io/v2 CiliumNetworkPolicy and CiliumClusterwideNetworkPolicy (`spec` or `specs`,
read by `agent.policy.cilium_policy`) and networking.k8s.io/v1 NetworkPolicy (its `spec`, read by
`agent.policy.kubernetes_policy`): this module reads what every policy object has (kind, metadata,
apiVersion), makes the policy's id and its `ManifestContext`, and hands the spec to its kind's
reader; Cilium's selector normalisation is `agent.policy.selectors`, port entries
`agent.policy.ports`. Called by `agent.policy.reading`; raises `PolicyError` naming the policy and
the field path. `subject_selectors` reads only the selectors of what a policy applies to,
leniently, for a policy that cannot be read as a whole; `unreadable` is the record of such a
policy. Does not evaluate anything (`agent.policy.evaluator` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.errors import PolicyError
from agent.model.selector import LabelSelector
from agent.policy.cilium_policy import parse_cilium_specs
from agent.policy.context import ManifestContext
from agent.policy.kubernetes_policy import parse_kubernetes_spec
from agent.policy.rule import Policy, PolicyKind, Subject, UnreadablePolicy
from agent.policy.selectors import endpoint_selector, label_selector, with_namespace

_CILIUM_GROUP = "cilium.io/"
_K8S_API = "networking.k8s.io/v1"


def parse_policy(obj: Mapping[str, Any]) -> Policy:
    """Parse one NetworkPolicy, CiliumNetworkPolicy or CiliumClusterwideNetworkPolicy manifest."""
    if not isinstance(obj, Mapping):
        raise PolicyError(f"policy: expected an object, got {type(obj).__name__}")
    kind_raw = obj.get("kind")
    try:
        kind = PolicyKind(str(kind_raw))
    except ValueError:
        raise PolicyError(f"policy: unsupported kind {kind_raw!r}") from None
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        raise PolicyError(f"{kind.value}: metadata: missing or not an object")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise PolicyError(f"{kind.value}: metadata.name: missing or not a non-empty string")
    namespace: str | None
    if kind is PolicyKind.CILIUM_CLUSTERWIDE:
        namespace = None
        policy_id = f"{kind.value}/{name}"
    else:
        ns_raw = metadata.get("namespace", "default")
        if not isinstance(ns_raw, str) or not ns_raw:
            raise PolicyError(f"{kind.value}: metadata.namespace: not a non-empty string")
        namespace = ns_raw
        policy_id = f"{kind.value}/{namespace}/{name}"
    ctx = ManifestContext(policy_id)
    api_version = obj.get("apiVersion")
    if api_version is not None:
        expected = _K8S_API if kind is PolicyKind.KUBERNETES else _CILIUM_GROUP
        if not isinstance(api_version, str) or not api_version.startswith(expected):
            raise ctx.error("apiVersion", f"unexpected {api_version!r} for {kind.value}")
    if kind is PolicyKind.KUBERNETES:
        assert namespace is not None
        subjects: tuple[Subject, ...] = (
            parse_kubernetes_spec(obj.get("spec"), namespace, ctx=ctx),
        )
    else:
        subjects = parse_cilium_specs(obj, namespace, ctx=ctx)
    return Policy(id=policy_id, kind=kind, name=name, namespace=namespace, subjects=subjects)


def policy_identity(obj: Mapping[str, Any]) -> tuple[PolicyKind, str, str | None]:
    """(kind, id, namespace) of a policy object, read leniently (`?` for a missing name).

    `obj["kind"]` must name a policy kind (the caller dispatched on it)."""
    kind = PolicyKind(str(obj.get("kind")))
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = metadata.get("name")
    name = name if isinstance(name, str) and name else "?"
    if kind is PolicyKind.CILIUM_CLUSTERWIDE:
        return kind, f"{kind.value}/{name}", None
    ns = metadata.get("namespace", "default")
    namespace = ns if isinstance(ns, str) and ns else "default"
    return kind, f"{kind.value}/{namespace}/{name}", namespace


def subject_selectors(obj: Mapping[str, Any]) -> tuple[LabelSelector, ...]:
    """What a policy object may select, read leniently: one selector per rule block (identity
    keys, the namespace applied); a block whose selector cannot be read stands for every pod of
    the policy's namespace (every pod, for a clusterwide policy); a host policy's block
    (`nodeSelector`, no `endpointSelector`) selects no pod. Never raises."""
    kind, policy_id, namespace = policy_identity(obj)
    ctx = ManifestContext(policy_id)
    everything = (
        LabelSelector() if namespace is None else with_namespace(LabelSelector(), namespace)
    )
    if kind is PolicyKind.KUBERNETES:
        spec = obj.get("spec")
        assert namespace is not None
        if not isinstance(spec, Mapping):
            return (everything,)
        try:
            return (with_namespace(label_selector(spec.get("podSelector"), path="", ctx=ctx),
                                    namespace),)  # fmt: skip
        except PolicyError:
            return (everything,)
    blocks: list[Any] = []
    if obj.get("spec") is not None:
        blocks.append(obj.get("spec"))
    specs = obj.get("specs")
    if isinstance(specs, list):
        blocks.extend(specs)
    elif specs is not None:
        return (everything,)
    out: list[LabelSelector] = []
    for block in blocks:
        if not isinstance(block, Mapping):
            out.append(everything)
            continue
        if block.get("endpointSelector") is None and block.get("nodeSelector") is not None:
            continue  # a host policy: selects nodes, never pods
        try:
            out.append(endpoint_selector(block.get("endpointSelector"), namespace, path="",
                                          ctx=ctx))  # fmt: skip
        except PolicyError:
            out.append(everything)
    return tuple(out) if blocks else (everything,)


def unreadable(obj: Mapping[str, Any], error: PolicyError) -> UnreadablePolicy:
    """The record of a policy object `parse_policy` refused with `error`."""
    kind, policy_id, namespace = policy_identity(obj)
    message = str(error)
    for prefix in (f"{policy_id}: ", f"{kind.value}: ", "policy: "):
        if message.startswith(prefix):
            message = message[len(prefix):]
            break
    field, sep, problem = message.partition(": ")
    if not sep or " " in field:
        field, problem = "", message
    return UnreadablePolicy(
        id=policy_id,
        kind=kind,
        namespace=namespace,
        field=field,
        problem=problem,
        selects=subject_selectors(obj),
    )
