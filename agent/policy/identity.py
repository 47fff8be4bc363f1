"""Cilium security identity of a pod, and how selector keys with source prefixes map onto it.

Called by `agent.policy.manifest` (to normalise selector keys) and `agent.policy.evaluator` (to turn
an `Endpoint` into the label map selectors are matched against). Pure; knows nothing of policies.

Identity labels (all of source `k8s`): the pod's labels minus Cilium's default exclusions (see
`is_identity_label`), `io.kubernetes.pod.namespace`, every namespace label as
`io.cilium.k8s.namespace.labels.<key>` (Kubernetes always sets `kubernetes.io/metadata.name`),
`io.cilium.k8s.policy.serviceaccount` and `io.cilium.k8s.policy.cluster`.
"""

from __future__ import annotations

from agent.model.network import Endpoint

NAMESPACE_KEY = "io.kubernetes.pod.namespace"
NAMESPACE_LABELS_PREFIX = "io.cilium.k8s.namespace.labels."
SERVICE_ACCOUNT_KEY = "io.cilium.k8s.policy.serviceaccount"
CLUSTER_KEY = "io.cilium.k8s.policy.cluster"
DEFAULT_CLUSTER = "default"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

# Selector keys of a source no pod label carries (reserved:, cidr:, fqdn:, container:, ...) are
# rewritten behind this marker: no identity holds them, so they match like absent labels.
UNMATCHABLE_PREFIX = "\x00"

_POD_SOURCES = frozenset({"k8s", "any"})

# Cilium's default identity-label filter (pkg/labelsfilter): key prefixes that never enter a
# pod's identity. `app.kubernetes.io` is kept (an inclusive pattern, longer than `!kubernetes.io`
# would be if it matched). `topology.kubernetes.io` is excluded since Cilium PR #43725 (2026).
_EXCLUDED_PREFIXES = (
    "io.kubernetes",
    "io.cilium.k8s",
    "kubernetes.io",
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "batch.kubernetes.io/job-completion-index",
    "batch.kubernetes.io/controller-uid",
    "beta.kubernetes.io",
    "k8s.io",
    "pod-template-generation",
    "pod-template-hash",
    "controller-revision-hash",
    "annotation",
    "controller-uid",
    "etcd_node",
    "topology.kubernetes.io",
)
_INCLUDED_PREFIXES = ("app.kubernetes.io",)


def is_identity_label(key: str) -> bool:
    """True when a pod label of this key is part of the pod's Cilium identity."""
    if key.startswith(_INCLUDED_PREFIXES):
        return True
    return not key.startswith(_EXCLUDED_PREFIXES)


def is_pod_label_key(key: str) -> bool:
    """True when an identity key comes from a pod label (not namespace, account, cluster, source)."""
    if key.startswith(UNMATCHABLE_PREFIX) or key in (
        NAMESPACE_KEY,
        SERVICE_ACCOUNT_KEY,
        CLUSTER_KEY,
    ):
        return False
    return not key.startswith(NAMESPACE_LABELS_PREFIX) and is_identity_label(key)


def selector_key(raw: str) -> str:
    """Map a Cilium selector key (`k8s:app`, `any:app`, `app`, `reserved:host`) to an identity key.

    Unprefixed keys and `any:` match any source; `k8s:` matches the pod's k8s labels; every other
    source matches nothing a pod carries.
    """
    if raw.startswith("$"):
        return UNMATCHABLE_PREFIX + "reserved:" + raw[1:]
    source, sep, rest = raw.partition(":")
    if not sep:
        return raw
    if source in _POD_SOURCES:
        return rest
    return UNMATCHABLE_PREFIX + raw


def identity_labels(endpoint: Endpoint) -> dict[str, str]:
    """The label map Cilium matches selectors against for this endpoint."""
    labels = {k: v for k, v in endpoint.labels.items() if is_identity_label(k)}
    labels[NAMESPACE_KEY] = endpoint.namespace
    for key, value in endpoint.namespace_labels.items():
        labels[NAMESPACE_LABELS_PREFIX + key] = value
    labels.setdefault(NAMESPACE_LABELS_PREFIX + NAMESPACE_NAME_LABEL, endpoint.namespace)
    labels[SERVICE_ACCOUNT_KEY] = endpoint.service_account
    labels[CLUSTER_KEY] = DEFAULT_CLUSTER
    return labels
