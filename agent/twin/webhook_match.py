"""Which admission webhooks a request must call: kube-apiserver's matching rules, pure.

A webhook is called for a request when one of its rules matches (operation, API group, version,
resource with subresource, scope), its `namespaceSelector` matches the labels of the request's
namespace, and its `objectSelector` matches the labels of the object or of the old object:
- `operations` `*` or the request's; `apiGroups`/`apiVersions` `*` or the request's;
- `resources`: `*` is every resource but no subresource, `pods/*` pods and all their
  subresources, `*/status` every status subresource, `*/*` everything;
- `scope`: `*`, `Cluster` (a cluster-scoped object, a Namespace included, though its request
  carries its own name as namespace) or `Namespaced` (an object in a namespace);
- `namespaceSelector` on a Namespace request is matched against the Namespace's own labels; other
  cluster-scoped objects always match it;
- `matchPolicy: Equivalent` (the default) also matches a rule naming another version or group of
  the same resource (`equivalents`), the request then sent as that resource; `Exact` does not.
It reads nothing: the caller passes the namespace's labels and the equivalents it serves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.errors import PolicyError
from agent.model.selector import parse_label_selector


@dataclass(frozen=True)
class Resource:
    """A group, version and resource (plural), as a rule names them."""

    group: str
    version: str
    resource: str


@dataclass(frozen=True)
class Attributes:
    """What a request is, for matching: operation, resource, subresource and namespace
    (a Namespace request carries its own name), its object's and old object's labels."""

    operation: str
    resource: Resource
    subresource: str = ""
    namespace: str = ""
    labels: Mapping[str, str] | None = None
    old_labels: Mapping[str, str] | None = None


NAMESPACES = Resource("", "v1", "namespaces")


def _in(values: Any, value: str) -> bool:
    listed = [str(v) for v in values or ()]
    return "*" in listed or value in listed


def _resource_matches(resources: Any, resource: str, subresource: str) -> bool:
    for entry in resources or ():
        res, _, sub = str(entry).partition("/")
        if res in ("*", resource) and sub in ("*", subresource):
            return True
    return False


def _scope_matches(scope: str, attrs: Attributes) -> bool:
    is_namespace = attrs.resource == NAMESPACES
    if scope == "Cluster":
        return is_namespace or attrs.namespace == ""
    if scope == "Namespaced":
        return not is_namespace and attrs.namespace != ""
    return scope == "*"


def rule_matches(rule: Mapping[str, Any], attrs: Attributes, resource: Resource) -> bool:
    """One rule against the request as `resource` (itself, or an equivalent)."""
    return (
        _in(rule.get("operations"), attrs.operation)
        and _in(rule.get("apiGroups"), resource.group)
        and _in(rule.get("apiVersions"), resource.version)
        and _resource_matches(rule.get("resources"), resource.resource, attrs.subresource)
        and _scope_matches(str(rule.get("scope") or "*"), attrs)
    )


def matched_resource(
    hook: Mapping[str, Any], attrs: Attributes, *, equivalents: Sequence[Resource] = ()
) -> Resource | None:
    """The resource the webhook is called as (the request's own first), or None: no rule
    matches."""
    rules = [r for r in hook.get("rules") or () if isinstance(r, Mapping)]
    if any(rule_matches(r, attrs, attrs.resource) for r in rules):
        return attrs.resource
    if hook.get("matchPolicy", "Equivalent") == "Exact":
        return None
    for other in equivalents:
        if any(rule_matches(r, attrs, other) for r in rules):
            return other
    return None


def selector_matches(selector: Any, labels: Mapping[str, str] | None) -> bool:
    """A LabelSelector against a label map; one that does not parse matches nothing (the
    server validated it when the configuration was stored)."""
    try:
        return parse_label_selector(selector or None, where="selector").matches(labels or {})
    except PolicyError:
        return False


def namespace_matches(
    hook: Mapping[str, Any], attrs: Attributes, namespace_labels: Mapping[str, str] | None
) -> bool:
    """`namespaceSelector` against the namespace's labels (the Namespace's own for a Namespace
    request; always true for other cluster-scoped objects)."""
    selector = hook.get("namespaceSelector")
    if not selector:
        return True
    if attrs.resource == NAMESPACES:
        return selector_matches(selector, attrs.labels)
    if not attrs.namespace:
        return True
    return selector_matches(selector, namespace_labels)


def object_matches(hook: Mapping[str, Any], attrs: Attributes) -> bool:
    """`objectSelector` against the object's labels or the old object's (either matching)."""
    selector = hook.get("objectSelector")
    if not selector:
        return True
    return any(selector_matches(selector, labels)
               for labels in (attrs.labels, attrs.old_labels) if labels is not None)
