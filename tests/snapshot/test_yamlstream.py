"""The streaming YAML builder: the same values as PyYAML's SafeLoader (C and pure-Python parsers),
Lists handed out item by item, and SafeLoader's safety (no arbitrary tags)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from agent.snapshot.yamlstream import C_PARSER, Part, iter_values

LOADERS = [yaml.SafeLoader, *([yaml.CSafeLoader] if C_PARSER else [])]

SAME_AS_SAFE_LOADER = [
    "a: 1\nb: [1, 2.5, true, null, ~, '3', \"x\", 0o17, 0x1f, .inf]\n",
    "created: 2026-11-30T09:00:00Z\nday: 2026-11-30\nbin: !!binary aGVsbG8=\n",
    "ports:\n- containerPort: 23456\n  protocol: TCP\n- {name: x, containerPort: '80'}\n",
    "base: &b {cpu: '4', gpu: 1}\nuse: *b\nover:\n  <<: *b\n  gpu: 2\n",
    "m: &m {a: 1}\nn: &n {b: 2}\nboth: {<<: [*m, *n], a: 9}\n",
    "'<<': quoted\nstr: !!str 12\nint: !!int '12'\nempty:\nlist: []\nmap: {}\n",
    "---\nkind: Pod\n---\nseq:\n- 1\n- [2, 3]\n---\n~\n---\ntext: |\n  line one\n  line two\n",
    "? [a, b]\n: tuple-ish keys are refused by SafeLoader too\n",
    "items: 1\n? [a]\n: a sequence key after `items` is not a List's items\n",
]


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("text", SAME_AS_SAFE_LOADER)
def test_values_match_safe_loader(loader: type[Any], text: str) -> None:
    try:
        expected: Any = [d for d in yaml.load_all(text, Loader=yaml.SafeLoader) if d is not None]
    except yaml.YAMLError:
        with pytest.raises(yaml.YAMLError, match="unhashable"):
            list(iter_values(text, loader=loader))
        return
    got = [v for part, v in iter_values(text, loader=loader)]
    assert all(part is Part.DOCUMENT for part, _ in iter_values(text, loader=loader))
    assert got == expected


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
def test_list_items_are_handed_out_one_by_one(loader: type[Any]) -> None:
    # kubectl's key order: `items` before `kind`
    text = "apiVersion: v1\nitems:\n- {kind: Pod, n: 1}\n- {kind: List, items: [{kind: Node}]}\nkind: List\n"
    parts = list(iter_values(text, loader=loader))
    assert parts[:2] == [
        (Part.ITEM, {"kind": "Pod", "n": 1}),
        (Part.ITEM, {"kind": "List", "items": [{"kind": "Node"}]}),  # nested Lists are whole
    ]
    assert parts[2] == (Part.LIST_END, {"apiVersion": "v1", "items": [], "kind": "List"})
    # a top-level sequence of objects: its elements, nothing else
    assert list(iter_values("- {kind: Pod}\n- {kind: Node}\n", loader=loader)) == [
        (Part.ITEM, {"kind": "Pod"}),
        (Part.ITEM, {"kind": "Node"}),
    ]
    # a kind read before `items` that is not a List: the document is whole
    assert list(iter_values("kind: Thing\nitems: [1]\n", loader=loader)) == [
        (Part.DOCUMENT, {"kind": "Thing", "items": [1]})
    ]


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "text",
    [
        "a: !!python/object/apply:os.system ['true']\n",
        "a: !!python/name:os.system\n",
        "!!python/object:collections.OrderedDict {}\n",
        "a: !custom 1\n",
        "a: !!set {x}\n",
        "a: !!omap [{x: 1}]\n",
        "a: *nowhere\n",
    ],
)
def test_unsafe_or_unknown_tags_are_refused(loader: type[Any], text: str) -> None:
    with pytest.raises(yaml.YAMLError) as err:
        list(iter_values(text, loader=loader))
    assert getattr(err.value, "problem_mark", None) is not None  # the caller names the line


def test_libyaml_is_used_when_pyyaml_has_it() -> None:
    assert bool(getattr(yaml, "__with_libyaml__", False)) == C_PARSER
