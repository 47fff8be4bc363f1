"""Decoding snapshot files: kind List, multi-document YAML, JSON, and errors naming file and item."""

from __future__ import annotations

import pytest

from agent.errors import SnapshotError
from agent.snapshot.documents import decode_items

POD = "{apiVersion: v1, kind: Pod, metadata: {name: p}}"


@pytest.mark.parametrize(
    ("source", "text", "kinds"),
    [
        (
            "list.yaml",
            "apiVersion: v1\nkind: List\nitems:\n- " + POD + "\n- {kind: Node}\n",
            ["Pod", "Node"],
        ),
        ("multi.yaml", f"{POD}\n---\nkind: Node\n---\n", ["Pod", "Node"]),
        ("empty-docs.yaml", "---\n---\n", []),
        ("single.yaml", POD, ["Pod"]),
        ("pods.yaml", "kind: PodList\nitems:\n- " + POD + "\n", ["Pod"]),
        ("null-items.yaml", "kind: List\nitems: null\n", []),
        ("nested.yaml", "kind: List\nitems:\n- kind: List\n  items:\n  - " + POD + "\n", ["Pod"]),
        (
            "list.json",
            '{"kind": "List", "items": [{"kind": "Pod"}, {"kind": "Node"}]}',
            ["Pod", "Node"],
        ),
        ("array.json", '[{"kind": "Pod"}]', ["Pod"]),
        ("no-extension", '{"kind": "Pod"}', ["Pod"]),
        ("flow.yaml", "{kind: Pod}", ["Pod"]),  # starts like JSON, is YAML
    ],
)
def test_decodes(source: str, text: str, kinds: list[str]) -> None:
    assert [i["kind"] for i in decode_items(text.encode(), source=source)] == kinds


@pytest.mark.parametrize(
    ("source", "text", "message"),
    [
        ("bad.yaml", "kind: Pod\n  name: [x\n", r"^bad\.yaml: line \d+: invalid YAML"),
        ("bad.json", '{"kind": "Pod",', r"^bad\.json: invalid JSON"),
        (
            "scalar.yaml",
            "kind: List\nitems:\n- {kind: Pod}\n- 3\n",
            r"^scalar\.yaml: item 1: expected a Kubernetes object, got int",
        ),
        (
            "nokind.yaml",
            "kind: List\nitems:\n- {kind: Pod}\n- {metadata: {}}\n",
            r"^nokind\.yaml: item 1: missing or invalid `kind`",
        ),
        (
            "items.yaml",
            "kind: List\nitems: {a: 1}\n",
            r"^items\.yaml: item 0: List\.items: expected a list",
        ),
        ("latin1.yaml", b"kind: Pod\nname: \xe9\n", r"^latin1\.yaml: not UTF-8"),
        (
            "not-a-list.yaml",
            "items:\n- {kind: Pod}\nkind: Thing\n",
            r"^not-a-list\.yaml: a document with a top-level `items` sequence must be a List \(kind: 'Thing'\)",
        ),
        (
            "unsafe.yaml",
            "kind: List\nitems:\n- !!python/object/apply:os.system ['true']\n",
            r"^unsafe\.yaml: line 3: invalid YAML: could not determine a constructor",
        ),
    ],
)
def test_errors_name_file_and_item(source: str, text: str | bytes, message: str) -> None:
    data = text if isinstance(text, bytes) else text.encode()
    with pytest.raises(SnapshotError, match=message):
        decode_items(data, source=source)
