"""Remediation: `plan` builds patches (pure), `execute` is the only cluster writer, `verify` judges."""
