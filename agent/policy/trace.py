"""The decision trace of one flow: what the evaluator looked at at each hop, and why it decided.

Built by `agent.policy.evaluator.PolicySet.trace` (the same code path as `check`: the trace is the
evaluator's own record, never a second evaluation), read by `agent.policy.explanation` to answer
"why is this flow dropped". A `HopTrace` is one hop (egress at the source, ingress at the
destination) for one concrete protocol: the policy blocks selecting the endpoint, those that make
the direction enforced (with why: `Enforcement`), every rule that matched the peer and a port of
the flow, and the hop's verdict. The flow's `verdict` is exactly what `check` returns; every
denying hop is listed, not only the first. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from agent.model.network import DenyReason, FlowVerdict, Hop, Protocol
from agent.policy.rule import Enforcement, PolicyKind, Rule


class RuleEffect(StrEnum):
    """What a matched rule does to the flow at its hop."""

    ALLOW = "allow"
    DENY = "deny"
    L7 = "l7"  # an allow rule giving L7 rules to a port of the flow: Cilium's proxy handles it


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """One rule that matched the flow: the policy, its rule block (`section`: `spec`,
    `specs[1]`), the rule list (`ingress`, `egressDeny`, ...) and the rule's index in it, the
    rule itself, and the port intervals of the flow's protocol it covers."""

    policy: str
    kind: PolicyKind
    section: str
    field: str
    index: int
    rule: Rule
    effect: RuleEffect
    protocol: Protocol
    intervals: tuple[tuple[int, int], ...]

    @property
    def path(self) -> str:
        """Where the rule is in its manifest: `spec.egress[0]`."""
        return f"{self.section}.{self.field}[{self.index}]"


@dataclass(frozen=True, slots=True)
class SelectingBlock:
    """A policy block selecting the hop's endpoint and how it sets the hop's direction."""

    policy: str
    kind: PolicyKind
    section: str
    enforcement: Enforcement
    enforces: bool


@dataclass(frozen=True, slots=True)
class HopTrace:
    """One hop for one protocol: `verdict` None when the hop lets every port of the flow through."""

    hop: Hop
    protocol: Protocol
    selecting: tuple[SelectingBlock, ...]
    matched: tuple[RuleMatch, ...]
    verdict: FlowVerdict | None

    @property
    def enforced(self) -> bool:
        """True when some selecting block puts the endpoint in default deny for this direction."""
        return any(block.enforces for block in self.selecting)

    @property
    def enforcing(self) -> tuple[str, ...]:
        """The policies that make this direction enforced, sorted, each once."""
        return tuple(sorted({b.policy for b in self.selecting if b.enforces}))

    @property
    def reason(self) -> DenyReason | None:
        return None if self.verdict is None else self.verdict.reason


@dataclass(frozen=True, slots=True)
class FlowTrace:
    """The evaluator's answer for one flow (`verdict`, equal to `check`'s) and every hop it
    evaluated, egress first, each protocol of the flow in turn."""

    verdict: FlowVerdict
    hops: tuple[HopTrace, ...]

    def denials(self) -> tuple[HopTrace, ...]:
        """Every hop that denies the flow."""
        return tuple(h for h in self.hops if h.verdict is not None)
