"""The write fence (pure): a run writes only in the leadership term it started in."""

from __future__ import annotations

import pytest

from agent.remediation.fence import SOLE_WRITER, Fence, FenceClosedError, WhileLeading, open_fence
from tests.remediation.harness import Terms


def test_a_run_starts_only_while_leading_and_writes_only_in_its_term() -> None:
    terms = Terms()
    fence = open_fence(terms)
    assert fence == Fence(terms, 0) and fence.holds()
    fence.check("delete Job ml/x")  # holds: nothing raised
    terms.lose()
    assert open_fence(terms) is None and not fence.holds()
    with pytest.raises(FenceClosedError, match=r"^delete Job ml/x: not sent, the leadership term 0 ended \(no term now\)$"):
        fence.check("delete Job ml/x")
    terms.lead()  # leading again, in a new term: still closed for the old run
    with pytest.raises(FenceClosedError, match=r"term 0 ended \(term 1 now\)"):
        fence.check("create Job ml/x")
    assert open_fence(terms) == Fence(terms, 1)


def test_a_sole_writer_always_holds_and_a_yes_no_leader_is_term_zero_while_it_leads() -> None:
    fence = open_fence(SOLE_WRITER)
    assert fence is not None and fence.holds()
    leading = [True]
    yes_no = WhileLeading(lambda: leading[0])
    held = open_fence(yes_no)
    assert held is not None and held.holds()
    leading[0] = False
    assert not held.holds() and open_fence(yes_no) is None
