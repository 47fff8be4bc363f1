"""Placement terms (pure, table-driven): Go's integer parsing for Gt/Lt, and which namespaces and
pods a pod (anti-)affinity term selects."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.scheduling import go_int, resolve_pod_affinity_term


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", 42), ("+42", 42), ("-7", -7), ("007", 7),
        ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -(2**63)),
        ("9223372036854775808", None), (" 42", None), ("42 ", None), ("1_000", None),
        ("٤٢", None), ("4.2", None), ("", None), ("+", None), ("0x10", None),
    ],
)  # fmt: skip
def test_go_int_reads_what_strconv_parseint_base_10_reads(text: str, expected: int | None) -> None:
    assert go_int(text) == expected


NS_LABELS = {"ml": {"team": "ml"}, "x": {"team": "x"}, "y": {"team": "y"}}
SELECT_DB = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "h"}


@pytest.mark.parametrize(
    ("case", "extra", "known", "selected", "unresolved"),
    [
        ("neither set: the owner's namespace", {}, NS_LABELS, {"ml"}, False),
        ("listed", {"namespaces": ["x"]}, NS_LABELS, {"x"}, False),
        ("empty selector: every namespace", {"namespaceSelector": {}}, NS_LABELS,
         {"ml", "x", "y", "other"}, False),
        ("selector united with the list",
         {"namespaces": ["y"], "namespaceSelector": {"matchLabels": {"team": "x"}}}, NS_LABELS,
         {"x", "y"}, False),
        ("selector matching nothing selects nothing",
         {"namespaceSelector": {"matchLabels": {"team": "none"}}}, NS_LABELS, set(), False),
        ("selector without namespace labels: every namespace, said so",
         {"namespaceSelector": {"matchLabels": {"team": "x"}}}, None, {"ml", "x", "y", "other"},
         True),
    ],
)  # fmt: skip
def test_term_namespaces(case: str, extra: dict[str, Any], known: Any, selected: set[str],
                         unresolved: bool) -> None:  # fmt: skip
    term = resolve_pod_affinity_term({**SELECT_DB, **extra}, namespace="ml", labels={},
                                     namespace_labels=known)  # fmt: skip
    found = {ns for ns in ("ml", "x", "y", "other") if term.matches(ns, {"app": "db"})}
    assert found == selected, case
    assert term.unresolved is unresolved, case


@pytest.mark.parametrize(
    ("case", "term", "pod_labels", "expected"),
    [
        ("no labelSelector selects no pod", {"topologyKey": "h"}, {"app": "db"}, False),
        ("an invalid labelSelector selects no pod",
         {"topologyKey": "h", "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]}},
         {"app": "db"}, False),
        ("empty labelSelector: every pod", {"topologyKey": "h", "labelSelector": {}}, {}, True),
        ("matchLabelKeys: the owner's value", {**SELECT_DB, "matchLabelKeys": ["rev"]},
         {"app": "db", "rev": "1"}, True),
        ("matchLabelKeys: another value", {**SELECT_DB, "matchLabelKeys": ["rev"]},
         {"app": "db", "rev": "2"}, False),
        ("mismatchLabelKeys: the owner's value", {**SELECT_DB, "mismatchLabelKeys": ["rev"]},
         {"app": "db", "rev": "1"}, False),
        ("mismatchLabelKeys: another value", {**SELECT_DB, "mismatchLabelKeys": ["rev"]},
         {"app": "db", "rev": "2"}, True),
    ],
)  # fmt: skip
def test_term_pods(case: str, term: dict[str, Any], pod_labels: dict[str, str],
                   expected: bool) -> None:  # fmt: skip
    resolved = resolve_pod_affinity_term(term, namespace="ml", labels={"rev": "1"},
                                         namespace_labels=None)  # fmt: skip
    assert resolved.matches("ml", pod_labels) is expected, case
