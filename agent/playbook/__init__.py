"""Playbooks: what to do when a finding, alert or schedule fires (model, schema, matching)."""
