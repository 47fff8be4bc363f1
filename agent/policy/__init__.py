"""Pure network-policy evaluation with Cilium semantics (CNP, CCNP) and Kubernetes NetworkPolicy.

Public API (used by the snapshot loader and the diagnosis):
- `parse_policy(manifest) -> Policy` (raises `agent.errors.PolicyError` naming policy and field);
  `Policy.id` is `CiliumNetworkPolicy/<ns>/<name>`, `CiliumClusterwideNetworkPolicy/<name>` or
  `NetworkPolicy/<ns>/<name>`.
- `PolicySet(policies).check(src, dst, ports) -> FlowVerdict`; `equivalence_key(endpoint)` groups
  endpoints the set cannot tell apart; `pod_label_keys()` lists the pod label keys selectors read.
"""

from agent.policy.evaluator import PolicySet
from agent.policy.manifest import parse_policy
from agent.policy.rule import Policy, PolicyKind

__all__ = ["Policy", "PolicyKind", "PolicySet", "parse_policy"]
