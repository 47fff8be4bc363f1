"""The anchor index against brute force: on random selectors (namespaced or not, by matchLabels or
`In`) and random endpoints, the candidates it yields that match are exactly the blocks whose
selector matches, in the order the unnarrowed index (every block of each of the endpoint's label
pairs, unanchored ones first) gives them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.model.selector import LabelSelector, Requirement, SelectorOperator
from agent.policy.anchors import AnchorIndex, anchors
from agent.policy.identity import NAMESPACE_KEY

NAMESPACES = ("a", "b", "c")
PAIRS = st.tuples(st.sampled_from(["zone", "app"]), st.sampled_from(["x", "y"]))


@st.composite
def selectors(draw: st.DrawFn) -> LabelSelector:
    labels = draw(st.lists(PAIRS, max_size=2, unique_by=lambda p: p[0]))
    if draw(st.booleans()):
        labels.append((NAMESPACE_KEY, draw(st.sampled_from(NAMESPACES))))
    if draw(st.booleans()):
        labels.reverse()
    expressions = []
    if draw(st.booleans()):
        values = draw(st.frozensets(st.sampled_from(["x", "y", "z"]), min_size=1))
        op = draw(st.sampled_from([SelectorOperator.IN, SelectorOperator.NOT_IN]))
        expressions.append(Requirement(draw(st.sampled_from(["zone", "app"])), op, values))
    return LabelSelector(tuple(labels), tuple(expressions))


@st.composite
def endpoints(draw: st.DrawFn) -> dict[str, str]:
    labels = dict(draw(st.lists(PAIRS, max_size=2)))
    if draw(st.integers(0, 4)):
        labels[NAMESPACE_KEY] = draw(st.sampled_from(NAMESPACES))
    return dict(sorted(labels.items()))


def _unnarrowed(blocks: list[LabelSelector], labels: dict[str, str]) -> list[int]:
    """The order of the index before the namespace narrowing: unanchored, then by label pair."""
    out = {i: None for i, b in enumerate(blocks) if not anchors(b)}
    for pair in labels.items():
        out.update((i, None) for i, b in enumerate(blocks) if pair in anchors(b))
    return [i for i in out if blocks[i].matches(labels)]


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(st.lists(selectors(), max_size=12), st.lists(endpoints(), min_size=1, max_size=6))
def test_candidates_are_brute_force(blocks: list[LabelSelector],
                                    labels: list[dict[str, str]]) -> None:  # fmt: skip
    boxed = [[b] for b in blocks]  # distinct objects (equal selectors may repeat)
    index = AnchorIndex(boxed, lambda box: box[0])
    position = {id(box): i for i, box in enumerate(boxed)}
    for endpoint in labels:
        found = [position[id(box)] for box in index.candidates(endpoint).values()
                 if box[0].matches(endpoint)]  # fmt: skip
        assert found == _unnarrowed(blocks, endpoint)
        assert set(found) == {i for i, b in enumerate(blocks) if b.matches(endpoint)}
