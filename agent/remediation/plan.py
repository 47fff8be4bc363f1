"""Builds the remediation patch for a finding: plain data in (the job's manifest, the target zone),
the merge patches to apply out.

Called by the remediation executor and by the dry-run shown for approval. Pure: no I/O, no clock,
no Kubernetes client; it does not apply anything (`agent.remediation.execute` is the only module
that writes to the cluster). import-linter keeps it that way (pyproject.toml).
"""
