"""Cluster snapshots: decode YAML/JSON documents and parse their objects into model objects.

Pure parsing: the caller (the `diagnose` command) reads the files and hands their bytes in. Errors
are `SnapshotError` (or `PolicyError`) naming the file and the item index.
"""
