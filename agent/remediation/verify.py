"""Judges whether a remediation worked: the job's pods and findings after the patch in, a verdict
(fixed, not yet, failed: roll back) out.

Called by the remediation executor after it applied a plan. Pure: no I/O, no clock (`now` is passed
in), no Kubernetes client; it does not read the cluster nor roll anything back itself.
import-linter keeps it that way (pyproject.toml).
"""
