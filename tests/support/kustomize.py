"""Render deploy/'s kustomizations with `kubectl kustomize` (offline), for the deploy tests.

`OVERLAYS` names every kustomization a person may apply; `render(name)` returns its documents
(cached: a render is a subprocess of about a second). kubectl is required, not optional: the
manifests are part of what `make test` proves, so a missing kubectl fails the tests naming it.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ("base", "overlays/sqlite", "overlays/postgres")


def kubectl() -> str:
    path = shutil.which("kubectl")
    assert path is not None, "kubectl is missing: `make test` renders deploy/ with `kubectl kustomize`"
    return path


@functools.cache
def _render(path: str) -> str:
    out = subprocess.run(
        [kubectl(), "kustomize", path], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, f"kubectl kustomize {path} failed:\n{out.stderr}"
    return out.stdout


def render(name: str) -> list[dict[str, Any]]:
    """The documents of deploy/<name> (a fresh copy each call: tests may change them)."""
    return [d for d in yaml.safe_load_all(_render(str(DEPLOY / name))) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The single document of `kind` (and `name`, when given)."""
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def generated(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The ConfigMap kustomize generated as `name` (its rendered name has a content hash appended)."""
    found = [
        d for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].rpartition("-")[0] == name
    ]
    assert len(found) == 1, f"expected one generated ConfigMap {name}, found {len(found)}"
    return found[0]
