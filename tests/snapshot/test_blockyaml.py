"""The line reader of kubectl's block YAML hands out exactly what yamlstream does (values, parts,
errors), reads kubectl-style text itself (no fallback), and defers everything else."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.errors import InputError
from agent.snapshot import blockyaml, yamlstream
from agent.snapshot.blockyaml import UnsupportedError, block_values, iter_values


def outcome(read: Any, text: str) -> tuple[str, str]:
    """What a reader makes of a text: its parts (repr: types and key order count) or its error."""
    try:
        return "parts", repr(list(read(text)))
    except (yaml.YAMLError, InputError, ValueError, KeyError) as exc:
        return "error", f"{type(exc).__name__}: {exc}"


def same_as_yamlstream(text: str) -> bool:
    """Asserts the two readers agree; True when the line reader read the text itself."""
    assert outcome(iter_values, text) == outcome(yamlstream.iter_values, text)
    try:
        list(block_values(text))
    except UnsupportedError:
        return False
    return True


KUBECTL_STYLE = [
    # kubectl's List: keys sorted (`items` before `kind`), sequences at their key's column
    "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    labels:\n"
    "      app: web\n    name: p-0\n    ownerReferences:\n    - apiVersion: apps/v1\n"
    "      controller: true\n      kind: ReplicaSet\n      name: web-rs\n  spec:\n    containers:\n"
    "    - image: x:1.0\n      name: main\n      ports:\n      - containerPort: 8080\n"
    "        protocol: TCP\n      resources: {}\n    nodeName: n-1\n  status:\n"
    "    conditions:\n    - lastProbeTime: null\n      status: 'True'\n      type: Ready\n"
    "    phase: Running\n    startTime: '2026-11-30T09:00:02Z'\nkind: List\nmetadata:\n"
    "  resourceVersion: ''\n",
    # sequences indented under their key, `-` alone, a pending key, comments and blank lines
    "# a dump\nkind: List\nitems:\n  -\n    kind: Node\n    spec:\n\n    status:\n      x: []\n"
    "  - kind: Pod\n    metadata: {}\n",
    # literal block scalars: chomping, blank lines, deeper lines, one that ends at once
    "a: |\n  line one\n\n    deeper\n  line three\nb: |-\n  no newline\nc: |+\n  kept\n\n\nd: |\n"
    "e: end\n",
    "seq:\n- |\n  in a sequence\n-   key: |\n      under a key\n    next: 1\n",
    # plain scalars folded over lines (as kubectl folds long ones), with blank lines between
    "message: 0/5 nodes are available: x\n",  # not in the subset (`: ` inside): deferred
    "message: 0/5 nodes are available\n  to run this pod\n\n  after a blank\nnext: 2\n",
    "seq:\n- a long item\n  folded\n- b\n- - nested\n  - - deeper\n- []\n- {}\n",
    # single-quoted scalars on one line and over several
    "a: 'it''s'\nb: 'x: y'\n'quoted key': 1\nc: 'one\n  two\n\n  three  '\nd: ''\n",
    # resolution as SafeLoader resolves: numbers, booleans, null, dates, strings that look alike
    "i: 12\nf: 1.5\ne: 1e3\nh: 0x1f\no: 0o17\nb: yes\nn: ~\nd: 2026-11-30\n"
    "t: 2026-11-30T09:00:00Z\ns: '12'\nq: \"x\"\nc: a:b\nm: -1\nk: :x\nw: a#b\n",
    # several documents, an empty one, a top-level sequence of objects
    "---\nkind: A\n---\n---\n- kind: B\n- kind: C\n",
    # `items` as a flow [], and a kind read before `items` that is not a List
    "items: []\nkind: List\n",
    "kind: Thing\nitems:\n- 1\n- 2\n",
]


@pytest.mark.parametrize("text", KUBECTL_STYLE)
def test_hand_written_documents_read_as_yamlstream_reads_them(text: str) -> None:
    read_itself = same_as_yamlstream(text)
    assert read_itself == ("available: x" not in text)


DEFERRED = [
    "a: &x 1\nb: *x\n",  # anchors and aliases
    "a: !!str 1\n",  # tags
    "a: {b: 1}\n",  # flow mappings
    "a: [1, 2]\n",  # flow sequences
    "a:\n  <<: {b: 1}\n",  # merge keys
    'a: "tab\\there"\n',  # double-quoted escapes
    "a: >\n  folded\n",  # folded block scalars
    "a: |2\n   indicated\n",  # an indentation indicator
    "%YAML 1.1\n---\na: 1\n",  # directives
    "a: 1 # trailing comment\n",
    "a:\tb\n",  # tabs
    "a: 1\r\nb: 2\r\n",  # carriage returns
    "a: 1\n...\n",  # document end marker
    "items:\n- plain scalar item\nkind: List\n",  # a List's scalar item: yamlstream judges it
    "? complex\n: key\n",
    "a: 1",  # no final newline
    # invalid YAML: yamlstream's error, from the same line
    "a: 1\n b: 2\n",
    "a:\n  - x\n  y: 1\n",
    "a: b: c\n",
    "a: 'unterminated\n",
    "- a\nb: 1\n",
    "a: 1\n- b\n",
    "a: 2026-13-45\n",  # a timestamp that does not exist
    "key: x\n  sub: 1\n",
]


@pytest.mark.parametrize("text", DEFERRED)
def test_text_outside_the_subset_is_left_to_yamlstream(text: str) -> None:
    assert not same_as_yamlstream(text)


def test_a_deferred_document_hands_out_nothing_twice() -> None:
    # the line reader hands out the first items, then meets an alias: yamlstream goes on
    text = "items:\n- kind: A\n  n: 1\n- kind: B\n  x: &a 2\n- kind: C\n  y: *a\nkind: List\n"
    parts = list(iter_values(text))
    assert parts == list(yamlstream.iter_values(text))
    assert [p for p, _ in parts] == [yamlstream.Part.ITEM] * 3 + [yamlstream.Part.LIST_END]


def test_nesting_past_the_limit_is_left_to_yamlstream() -> None:
    depth = blockyaml._MAX_DEPTH + 5
    text = "".join(f"{'  ' * i}k{i}:\n" for i in range(depth)) + f"{'  ' * depth}leaf: 1\n"
    with pytest.raises(InputError, match="nested deeper"):
        list(iter_values(text))
    assert not same_as_yamlstream(text)


# -- generated documents: PyYAML's block-style dumps of random data ---------------------------

TRICKY = ["yes", "no", "on", "null", "~", "1e3", "0x1f", "012", "1_000", ".inf", "2026-11-30",
          "a: b", "- a", "#x", "x #y", " lead", "trail ", "it's", 'q"uote', "<<", "=", "", "'",
          "k:{\"type\":\"PodScheduled\"}", "a\nb", "a\n\nb\n", "ends\n", "x" * 130,
          "many words " * 12, "üñí", "line\n  indented\n"]
STRINGS = st.one_of(st.sampled_from(TRICKY), st.text(max_size=40))
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False), st.dates(min_value=dt.date(1900, 1, 1)), STRINGS,
)
KEYS = st.one_of(st.sampled_from(["items", "kind", "name", "nvidia.com/gpu", "f:spec", "1", "true",
                                  "a b", "-x", ":x"]), STRINGS)
DATA = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=25,
)


DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter: faster


class LiteralDumper(DUMPER):  # type: ignore[misc,valid-type]
    """Multi-line strings as literal block scalars (kubectl prints them so)."""


def _literal(dumper: Any, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


LiteralDumper.add_representer(str, _literal)


def dump(data: Any, options: dict[str, Any]) -> str:
    dumper = LiteralDumper if options.pop("literal") else DUMPER
    return yaml.dump_all(data, Dumper=dumper, default_flow_style=False, **options)


OPTIONS = st.fixed_dictionaries({
    "width": st.sampled_from([20, 60, 80, 4096]),
    "indent": st.sampled_from([2, 4]),
    "allow_unicode": st.booleans(),
    "sort_keys": st.booleans(),
    "explicit_start": st.booleans(),
    "literal": st.booleans(),
})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=st.lists(DATA, min_size=1, max_size=3), options=OPTIONS)
def test_generated_documents_read_as_yamlstream_reads_them(docs: list[Any], options: dict[str, Any]) -> None:
    same_as_yamlstream(dump(docs, options))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(st.dictionaries(KEYS, DATA, min_size=1, max_size=5), max_size=5),
       options=OPTIONS)
def test_generated_lists_read_as_yamlstream_reads_them(items: list[Any], options: dict[str, Any]) -> None:
    same_as_yamlstream(dump([{"apiVersion": "v1", "items": items, "kind": "List"}], options))


PLAIN_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-./_", min_size=1, max_size=12)
SIMPLE = st.one_of(st.none(), st.booleans(), st.integers(0, 10**6), PLAIN_WORDS,
                   st.lists(PLAIN_WORDS, min_size=1, max_size=8).map(" ".join))
KUBE = st.recursive(SIMPLE, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(PLAIN_WORDS.filter(lambda k: k[0].isalpha()), inner, max_size=4),
                    max_leaves=20)


@settings(max_examples=40, deadline=None)
@given(items=st.lists(st.dictionaries(PLAIN_WORDS.filter(lambda k: k[0].isalpha()), KUBE,
                                      min_size=1, max_size=5), max_size=4),
       width=st.sampled_from([20, 80]))
def test_kubectl_like_dumps_are_read_by_the_line_reader(items: list[Any], width: int) -> None:
    # what kubectl prints (block style, plain words, long values folded) never needs yamlstream
    text = yaml.dump({"apiVersion": "v1", "items": items, "kind": "List"}, Dumper=DUMPER,
                     default_flow_style=False, width=width)
    assert same_as_yamlstream(text), text


# --------------------------------------------------------------------------------------------
# values written out again (a job's pods: the same containers, the same owner) read once


def _pod_yaml(i: int, *, extra: str = "") -> str:
    return (f"- apiVersion: v1\n  kind: Pod\n  metadata:\n    labels:\n      job: j{i // 10}\n"
            f"    name: p-{i}\n    ownerReferences:\n    - apiVersion: v1\n      controller: true\n"
            f"      kind: Job\n      name: j{i // 10}\n  spec:\n    containers:\n    - image: x:1\n"
            f"      ports:\n      - containerPort: 80\n      resources:\n        limits:\n"
            f"          gpu: '1'\n{extra}    nodeName: n-{i}\n")  # fmt: skip


def test_a_repeated_value_is_read_once_and_equals_yamlstreams() -> None:
    text = "apiVersion: v1\nitems:\n" + "".join(_pod_yaml(i) for i in range(200)) + "kind: List\n"
    assert same_as_yamlstream(text)
    items = [v for part, v in block_values(text) if part is yamlstream.Part.ITEM]
    assert len(items) == 200
    owners = {id(item["metadata"]["ownerReferences"]) for item in items}
    containers = {id(item["spec"]["containers"]) for item in items}
    assert len(owners) == 20 and len(containers) == 1  # one per job; one for all
    assert len({id(item["metadata"]) for item in items}) == 200


@pytest.mark.parametrize(
    "extra",
    [
        "      script: |+\n        kept\n\n\n",  # a block scalar keeping its trailing breaks
        "      note: a long\n        folded text\n",  # a plain scalar over two lines
        "      args:\n      -\n      - x\n",  # an empty entry
        "# a comment at the left margin\n",  # ends the value: the rest is read line by line
        "\n      late: 1\n",  # a blank line, then the value goes on
    ],
)
def test_values_with_blank_lines_scalars_and_comments_read_as_yamlstream(extra: str) -> None:
    text = ("apiVersion: v1\nitems:\n" + "".join(_pod_yaml(i, extra=extra) for i in range(60))
            + "kind: List\n")  # fmt: skip
    same_as_yamlstream(text)


def test_the_same_lines_at_another_depth_are_not_taken_for_each_other() -> None:
    block = "  a:\n    b:\n      c: 1\n      d: 2\n"
    text = "".join(f"k{i}:\n{block}" for i in range(40)) + "deep:\n  x:\n" + "".join(
        "  " + line + "\n" for line in block.splitlines())
    assert same_as_yamlstream(text)


@pytest.mark.parametrize("char", ["\x01", "\x7f", "\x0b", "\x1f"])
def test_a_control_character_is_left_to_yamlstream(char: str) -> None:
    text = f"a: b\nc: d{char}e\n"
    assert not same_as_yamlstream(text)
    assert same_as_yamlstream("a: b\nc: d\u00e9\n")  # non-ASCII printable: read here
