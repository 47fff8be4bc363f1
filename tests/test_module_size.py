"""The product's rooms stay small: no module over 600 lines, no class over 300.

The twin, the fakes and the rig play the cluster, Slack and the stage around the agent and are
measured by their own needs, not by this rule."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "agent"
OUTSIDE = {"twin", "fakes", "rig"}
MAX_MODULE = 600
MAX_CLASS = 300


def _product_modules() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py")) if p.relative_to(ROOT).parts[0] not in OUTSIDE]


def test_the_rule_sees_the_product() -> None:
    modules = _product_modules()
    assert len(modules) > 100
    assert ROOT / "runtime" / "pipeline.py" in modules
    assert not any(p.relative_to(ROOT).parts[0] == "twin" for p in modules)


def test_no_product_module_is_over_600_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _product_modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE}
    assert long == {}


def test_no_product_class_is_over_300_lines() -> None:
    long = {}
    for path in _product_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (n := node.end_lineno - start + 1) > MAX_CLASS:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = n
    assert long == {}
