"""Plain dataclasses shared by every layer: pods, nodes, jobs, policies, flows, findings.

Pure data only: no I/O, no clock, no parsing of Kubernetes manifests (that is `agent.snapshot`).
"""
