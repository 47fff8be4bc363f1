"""The security identity of a pod, as the dataplane enforcing network policies sees it.

Called by `agent.policy.selectors` (to normalise selector keys), `agent.policy.evaluator` (to turn
an `Endpoint` into the label map selectors are matched against) and `agent.policy.dataplane` (which
picks the filter for the cluster). Pure; knows nothing of policies.

Identity labels (all of source `k8s`): the pod's labels, `io.kubernetes.pod.namespace`, every
namespace label as `io.cilium.k8s.namespace.labels.<key>` (Kubernetes always sets
`kubernetes.io/metadata.name`), `io.cilium.k8s.policy.serviceaccount` and
`io.cilium.k8s.policy.cluster`; then an `IdentityFilter` keeps some of them:

- plain Kubernetes (`kubernetes_identity`): NetworkPolicies select on every pod label, nothing is
  left out;
- Cilium (`cilium_identity`): the agent's label filter. Its release's default pattern list, then the
  patterns of the `labels` key of `cilium-config` (space-separated `[source:][!]regex`), appended.
  A pattern matches a key when its regular expression matches at the key's start; a label is kept
  when no ignore pattern (`!`) matches it and no inclusive pattern was configured, or when the
  longest matching inclusive pattern is longer than the shortest matching ignore pattern. One
  inclusive pattern in `labels` turns the filter into an allow list: then only labels some
  inclusive pattern matches are kept (the default list's own inclusive patterns count).
  `topology.kubernetes.io/*` is ignored by default from Cilium 1.19 (Kubernetes 1.35 copies node
  topology labels onto pods); earlier releases keep them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from agent.errors import PolicyError
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
# Label-filter pattern sources that apply to a pod's (k8s-source) labels; "" is any source.
_FILTER_SOURCES = frozenset({"", "k8s", "any"})

# The first Cilium release whose default filter ignores topology.kubernetes.io labels.
TOPOLOGY_EXCLUDED_SINCE = (1, 19)

# Cilium's default label filter (pkg/labelsfilter), in its order; `!` marks an ignore pattern.
_DEFAULT_PATTERNS = (
    "reserved:.*",
    r"io\.kubernetes\.pod\.namespace",
    r"io\.cilium\.k8s\.namespace\.labels",
    r"app\.kubernetes\.io",
    r"io\.cilium\.k8s\.policy\.cluster",
    r"!io\.kubernetes",
    r"!kubernetes\.io",
    r"!statefulset\.kubernetes\.io/pod-name",
    r"!apps\.kubernetes\.io/pod-index",
    r"!batch\.kubernetes\.io/job-completion-index",
    r"!batch\.kubernetes\.io/controller-uid",
    r"!.*beta\.kubernetes\.io",
    r"!k8s\.io",
    r"!pod-template-generation",
    r"!pod-template-hash",
    r"!controller-revision-hash",
    r"!annotation.*",
    r"!controller-uid",
    r"!etcd_node",
)
_TOPOLOGY_PATTERN = r"!topology\.kubernetes\.io"


@dataclass(frozen=True, slots=True)
class LabelPattern:
    """One label-filter pattern: `source:` (empty: any), `!` (ignore) and a regular expression."""

    source: str
    regex: str
    ignore: bool
    origin: str  # where it comes from, for people: "Cilium 1.19+ default", "cilium-config labels"

    def text(self) -> str:
        prefix = f"{self.source}:" if self.source else ""
        return f"{prefix}{'!' if self.ignore else ''}{self.regex}"


def parse_label_patterns(text: str, *, origin: str) -> tuple[LabelPattern, ...]:
    """Patterns of a `labels` value (space-separated); `PolicyError` names a bad one."""
    out: list[LabelPattern] = []
    for word in text.split():
        source, sep, rest = word.partition(":")
        if not sep:
            source, rest = "", word
        ignore = rest.startswith("!")
        regex = rest[1:] if ignore else rest
        if not rest or (ignore and not regex):
            raise PolicyError(f"{origin}: label pattern {word!r} has no prefix")
        try:
            re.compile(regex)
        except re.error as exc:
            raise PolicyError(f"{origin}: label pattern {word!r}: {exc}") from None
        out.append(LabelPattern(source=source, regex=regex, ignore=ignore, origin=origin))
    return tuple(out)


class IdentityFilter:
    """Which identity label keys the dataplane keeps (see the module docstring for the rule)."""

    def __init__(
        self,
        patterns: Sequence[LabelPattern] | None,
        *,
        allow_list: bool = False,
        description: str,
    ) -> None:
        self._patterns = tuple(
            (p, re.compile(p.regex)) for p in patterns or () if p.source in _FILTER_SOURCES
        )
        self.patterns = tuple(patterns) if patterns is not None else None
        self.allow_list = allow_list
        self.description = description
        self._kept: dict[str, bool] = {}

    @property
    def filters(self) -> bool:
        """False when every label is kept (plain Kubernetes)."""
        return self.patterns is not None

    def _lengths(self, key: str) -> tuple[int, int, LabelPattern | None]:
        included = ignored = 0
        ignored_by: LabelPattern | None = None
        for pattern, regex in self._patterns:
            found = regex.search(key)
            if found is None or found.start() != 0:
                continue
            length = found.end()
            if pattern.ignore:
                if ignored == 0 or length < ignored:
                    ignored, ignored_by = length, pattern
            elif length > included:
                included = length
        return included, ignored, ignored_by

    def keeps(self, key: str) -> bool:
        """True when a label of this key is part of the identity."""
        kept = self._kept.get(key)
        if kept is None:
            if self.patterns is None:
                kept = True
            else:
                included, ignored, _ = self._lengths(key)
                kept = (not self.allow_list and ignored == 0) or included > ignored
            if len(self._kept) < 100_000:
                self._kept[key] = kept
        return kept

    def why_excluded(self, key: str) -> str | None:
        """Why a label of this key is left out of identities (None: it is kept)."""
        if self.keeps(key):
            return None
        _, _, ignored_by = self._lengths(key)
        if ignored_by is not None:
            return f"{ignored_by.text()} ({ignored_by.origin})"
        return "no inclusive pattern matches it and cilium-config `labels` makes the filter an allow list"


def kubernetes_identity() -> IdentityFilter:
    """Plain Kubernetes NetworkPolicy: selectors see every pod label."""
    return IdentityFilter(None, description="Kubernetes NetworkPolicy semantics: every pod label")


def _release(version: tuple[int, int] | None) -> str:
    if version is None:
        return "current Cilium"
    return f"Cilium {version[0]}.{version[1]}"


def cilium_identity(
    labels: str | None = None,
    *,
    version: tuple[int, int] | None = None,
    labels_origin: str = "cilium-config labels",
) -> IdentityFilter:
    """Cilium's label filter: the release's default patterns (`version` None: the newest), then
    the patterns of a `labels` value. `PolicyError` names a bad pattern."""
    release = _release(version)
    default_origin = f"{release} default"
    texts = list(_DEFAULT_PATTERNS)
    if version is None or version >= TOPOLOGY_EXCLUDED_SINCE:
        texts.append(_TOPOLOGY_PATTERN)
    patterns = list(parse_label_patterns(" ".join(texts), origin=default_origin))
    extra = parse_label_patterns(labels, origin=labels_origin) if labels else ()
    patterns.extend(extra)
    description = f"Cilium identity labels: the {release} default filter"
    if extra:
        description += f" plus {labels_origin} {labels!r}"
    return IdentityFilter(
        patterns, allow_list=any(not p.ignore for p in extra), description=description
    )


CILIUM_DEFAULT = cilium_identity()


def is_pod_label_key(key: str, identity: IdentityFilter = CILIUM_DEFAULT) -> bool:
    """True when an identity key comes from a pod label the identity keeps (not the namespace,
    account, cluster or another source)."""
    if key.startswith(UNMATCHABLE_PREFIX) or key in (
        NAMESPACE_KEY,
        SERVICE_ACCOUNT_KEY,
        CLUSTER_KEY,
    ):
        return False
    return not key.startswith(NAMESPACE_LABELS_PREFIX) and identity.keeps(key)


def is_identity_label(key: str, identity: IdentityFilter = CILIUM_DEFAULT) -> bool:
    """True when a pod label of this key is part of the pod's identity."""
    return identity.keeps(key)


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


def identity_labels(
    endpoint: Endpoint, identity: IdentityFilter = CILIUM_DEFAULT
) -> dict[str, str]:
    """The label map the dataplane matches selectors against for this endpoint."""
    labels = dict(endpoint.labels)
    labels[NAMESPACE_KEY] = endpoint.namespace
    for key, value in endpoint.namespace_labels.items():
        labels[NAMESPACE_LABELS_PREFIX + key] = value
    labels.setdefault(NAMESPACE_LABELS_PREFIX + NAMESPACE_NAME_LABEL, endpoint.namespace)
    labels[SERVICE_ACCOUNT_KEY] = endpoint.service_account
    labels[CLUSTER_KEY] = DEFAULT_CLUSTER
    if identity.filters:
        keeps = identity.keeps
        return {k: v for k, v in labels.items() if keeps(k)}
    return labels
