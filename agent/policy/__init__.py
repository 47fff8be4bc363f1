"""Pure network-policy evaluation with Cilium semantics (CNP, CCNP) and Kubernetes NetworkPolicy."""
