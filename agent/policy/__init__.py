"""Pure network-policy evaluation with Cilium semantics (CNP, CCNP) and Kubernetes NetworkPolicy.

`parse_policy(manifest) -> Policy`, then `PolicySet(policies).check(src, dst, ports)`.
"""

from agent.policy.evaluator import PolicySet
from agent.policy.manifest import parse_policy
from agent.policy.rule import Policy, PolicyKind

__all__ = ["Policy", "PolicyKind", "PolicySet", "parse_policy"]
