"""Cilium identity labels: default label filter, source prefixes, special identity keys."""

from __future__ import annotations

import pytest

from agent.model.network import Endpoint
from agent.policy.identity import identity_labels, is_identity_label, selector_key


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
