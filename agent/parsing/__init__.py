"""Parsing untrusted text safely: bounded numbers and durations, bounded YAML.

The one place where user-supplied numbers, durations, sizes and YAML documents are turned into
values. Every other module (settings, playbooks, snapshots, the HTTP API, the CLI) calls these
instead of `int()`, `str.isdigit()` or `yaml.safe_load` on input it did not produce itself.
"""
