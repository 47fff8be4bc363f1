"""Identity labels: Cilium's label filter (default, by release, cilium-config patterns), plain
Kubernetes, source prefixes, special identity keys."""

from __future__ import annotations

import pytest

from agent.errors import PolicyError
from agent.model.network import Endpoint
from agent.policy.identity import (
    cilium_identity,
    identity_labels,
    is_identity_label,
    kubernetes_identity,
    selector_key,
)


@pytest.mark.parametrize(
    ("key", "kept"),
    [
        ("app", True),
        ("training.kubeflow.org/job-name", True),
        ("training.kubeflow.org/replica-index", True),
        ("app.kubernetes.io/name", True),
        ("zone", True),
        ("topology.kubernetes.io/zone", False),
        ("kubernetes.io/hostname", False),
        ("io.kubernetes.pod.namespace", True),  # the identity's own namespace label
        ("io.cilium.k8s.policy.serviceaccount", True),
        ("pod-template-hash", False),
        ("controller-revision-hash", False),
        ("statefulset.kubernetes.io/pod-name", False),
        ("batch.kubernetes.io/job-completion-index", False),
        ("batch.kubernetes.io/controller-uid", False),
        ("controller-uid", False),
        ("beta.kubernetes.io/arch", False),
        ("k8s.io/foo", False),
        ("my.kubernetes.io-lookalike", True),
    ],
)
def test_default_label_filter(key: str, kept: bool) -> None:
    assert is_identity_label(key) is kept


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("app", "app"),
        ("k8s:app", "app"),
        ("any:app", "app"),
        ("k8s:io.kubernetes.pod.namespace", "io.kubernetes.pod.namespace"),
        ("reserved:host", "\x00reserved:host"),
        ("$host", "\x00reserved:host"),
        ("container:app", "\x00container:app"),
        ("cidr:10.0.0.0/8", "\x00cidr:10.0.0.0/8"),
    ],
)
def test_selector_key(raw: str, key: str) -> None:
    assert selector_key(raw) == key


def test_identity_labels() -> None:
    endpoint = Endpoint(
        "ml",
        {"app": "t", "pod-template-hash": "abc", "topology.kubernetes.io/zone": "a"},
        {"team": "x"},
        "trainer",
    )
    assert identity_labels(endpoint) == {
        "app": "t",
        "io.kubernetes.pod.namespace": "ml",
        "io.cilium.k8s.namespace.labels.team": "x",
        "io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name": "ml",
        "io.cilium.k8s.policy.serviceaccount": "trainer",
        "io.cilium.k8s.policy.cluster": "default",
    }


@pytest.mark.parametrize(
    ("labels", "version", "key", "kept"),
    [
        # the default list, by release: topology labels are left out from Cilium 1.19 only
        (None, None, "topology.kubernetes.io/zone", False),
        (None, (1, 19), "topology.kubernetes.io/region", False),
        (None, (1, 18), "topology.kubernetes.io/zone", True),
        (None, (1, 18), "pod-template-hash", False),
        # cilium-config ignore patterns are added to the default list
        ("k8s:!team", None, "team", False),
        ("k8s:!team", None, "app", True),
        ("!app", None, "application", False),  # a pattern matches the key's start
        ("!app", None, "my-app", True),
        # an inclusive pattern makes an allow list: only what some inclusive pattern matches
        ("k8s:app k8s:zone", None, "app", True),
        ("k8s:app k8s:zone", None, "zone", True),
        ("k8s:app k8s:zone", None, "role", False),
        ("k8s:app k8s:zone", None, "app.kubernetes.io/name", True),  # a default inclusive one
        ("k8s:app k8s:zone", None, "io.kubernetes.pod.namespace", True),
        # a longer inclusive match beats a shorter ignore; equal length does not
        ("k8s:pod-template-hash-", None, "pod-template-hash-x", True),
        ("k8s:pod-template-hash", None, "pod-template-hash", False),
        # patterns of another source never apply to a pod's labels
        ("container:!app", None, "app", True),
        ("any:!app", None, "app", False),
    ],
)
def test_cilium_label_filter(
    labels: str | None, version: tuple[int, int] | None, key: str, kept: bool
) -> None:
    assert cilium_identity(labels, version=version).keeps(key) is kept


def test_kubernetes_keeps_every_label_and_says_so() -> None:
    identity = kubernetes_identity()
    assert not identity.filters
    for key in ("topology.kubernetes.io/zone", "pod-template-hash", "controller-revision-hash"):
        assert identity.keeps(key) and identity.why_excluded(key) is None
    endpoint = Endpoint("ml", {"pod-template-hash": "abc", "topology.kubernetes.io/zone": "a"})
    labels = identity_labels(endpoint, identity)
    assert labels["pod-template-hash"] == "abc" and labels["topology.kubernetes.io/zone"] == "a"


def test_why_a_label_is_left_out() -> None:
    identity = cilium_identity("k8s:app", labels_origin="kube-system/cilium-config labels")
    assert identity.why_excluded("app") is None
    assert identity.why_excluded("pod-template-hash") == (
        "!pod-template-hash (current Cilium default)"
    )
    assert "allow list" in (identity.why_excluded("role") or "")
    assert "'k8s:app'" in identity.description


@pytest.mark.parametrize("labels", ["k8s:", "k8s:!", "(unclosed", "k8s:!["])
def test_a_bad_label_pattern_is_refused_naming_it(labels: str) -> None:
    with pytest.raises(PolicyError, match="cilium-config labels: label pattern"):
        cilium_identity(labels)
