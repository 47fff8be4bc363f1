"""Which dataplane enforces the cluster's network policies, and so which identity filter applies.

Called by whoever builds a `PolicySet` from a cluster: the snapshot loader's callers (the
`diagnose` command, the remediation's re-diagnosis), the agent's mirror of its watch cache and the
twin's dataplane. Each gathers `DataplaneEvidence` from what it sees (Cilium objects or CRDs, the
`cilium.io` API group being served, the `cilium-config` ConfigMap, the Cilium agent's image tag)
and `resolve_dataplane` decides, the `diagnosis.dataplane` setting overriding:

- Cilium when any Cilium evidence exists: Kubernetes NetworkPolicies and Cilium policies select on
  Cilium identities, so the label filter applies: `diagnosis.cilium_labels` if set, else the
  `labels` key of `cilium-config`, appended to the default list of the Cilium release
  (`diagnosis.cilium_version`, else the agent's image tag, else the newest);
- plain Kubernetes otherwise: NetworkPolicies select on every pod label, and Cilium policies (if
  the setting forces it) are not enforced by anyone, so they are left out.
Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from agent.errors import PolicyError
from agent.policy.identity import IdentityFilter, cilium_identity, kubernetes_identity
from agent.settings import DataplaneSetting, DiagnosisSettings, cilium_release

CILIUM_CONFIG = "cilium-config"
CILIUM_CONFIG_NAMESPACE = "kube-system"
LABELS_KEY = "labels"


class DataplaneKind(StrEnum):
    CILIUM = "cilium"
    KUBERNETES = "kubernetes"


@dataclass(frozen=True)
class DataplaneEvidence:
    """What the cluster shows about its dataplane.

    `cilium` names what showed Cilium (a few examples: "CiliumNetworkPolicy ml/x", "API group
    cilium.io/v2"); `cilium_config` is the `data` of the `cilium-config` ConfigMap when one was
    found (`config_where`: its namespace/name); `cilium_image` the Cilium agent's image.
    """

    cilium: tuple[str, ...] = ()
    cilium_config: Mapping[str, str] | None = None
    config_where: str = f"{CILIUM_CONFIG_NAMESPACE}/{CILIUM_CONFIG}"
    cilium_image: str | None = None


@dataclass(frozen=True)
class Dataplane:
    """The resolved dataplane: its kind, the identity filter and, for people, why."""

    kind: DataplaneKind
    identity: IdentityFilter
    reason: str
    warnings: tuple[str, ...] = field(default=())

    @property
    def cilium(self) -> bool:
        return self.kind is DataplaneKind.CILIUM

    def describe(self) -> str:
        return f"{self.kind.value} ({self.reason}); {self.identity.description}"


def _image_release(image: str | None) -> tuple[int, int] | None:
    if not image:
        return None
    tag = image.rsplit("@", 1)[0].rpartition(":")[2]
    return cilium_release(tag.split("-", 1)[0]) if tag else None


def resolve_dataplane(
    evidence: DataplaneEvidence,
    *,
    setting: DataplaneSetting = DataplaneSetting.AUTO,
    cilium_labels: str | None = None,
    cilium_version: str | None = None,
) -> Dataplane:
    """Decide the dataplane and its identity filter (see the module docstring)."""
    if setting is DataplaneSetting.KUBERNETES:
        return Dataplane(DataplaneKind.KUBERNETES, kubernetes_identity(),
                         "setting diagnosis.dataplane: kubernetes")  # fmt: skip
    if setting is DataplaneSetting.CILIUM:
        reason = "setting diagnosis.dataplane: cilium"
    elif evidence.cilium or evidence.cilium_config is not None:
        shown = list(evidence.cilium[:2])
        if evidence.cilium_config is not None:
            shown.append(f"ConfigMap {evidence.config_where}")
        reason = "Cilium found in the cluster: " + ", ".join(shown)
    else:
        return Dataplane(
            DataplaneKind.KUBERNETES,
            kubernetes_identity(),
            "no Cilium object, CRD or cilium-config in the cluster",
        )
    warnings: list[str] = []
    version = cilium_release(cilium_version) if cilium_version else None
    if version is None:
        version = _image_release(evidence.cilium_image)
    labels: str | None
    if cilium_labels is not None:
        labels, origin = cilium_labels, "setting diagnosis.cilium_labels"
    else:
        config = evidence.cilium_config or {}
        raw = config.get(LABELS_KEY)
        labels = raw if isinstance(raw, str) else None
        origin = f"{evidence.config_where} labels"
    try:
        identity = cilium_identity(labels, version=version, labels_origin=origin)
    except PolicyError as exc:
        warnings.append(f"{exc}: using the Cilium default label filter")
        identity = cilium_identity(version=version)
    return Dataplane(DataplaneKind.CILIUM, identity, reason, tuple(warnings))


def dataplane_for(evidence: DataplaneEvidence, settings: DiagnosisSettings) -> Dataplane:
    """`resolve_dataplane` with the diagnosis settings."""
    return resolve_dataplane(
        evidence,
        setting=settings.dataplane,
        cilium_labels=settings.cilium_labels,
        cilium_version=settings.cilium_version,
    )


def cilium_evidence(kinds: Sequence[str]) -> tuple[str, ...]:
    """At most a few examples of Cilium objects, for `DataplaneEvidence.cilium`."""
    return tuple(dict.fromkeys(kinds))[:3]
