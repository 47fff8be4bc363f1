"""`zonemedic diagnose`: diagnose every training job of offline snapshot files.

`zonemedic diagnose --snapshot FILE [--snapshot FILE ...] [--config FILE] [--output table|json]`
reads the files, parses them (`agent.snapshot`), runs the pure diagnosis and prints a table or one
JSON object `{"findings": [...]}`. Warnings (skipped kinds) go to stderr, one line each. Exit 0
whatever the verdicts; bad input raises `InputError` (the CLI prints one line, exit 2). It talks to
no cluster.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.errors import SnapshotError

if TYPE_CHECKING:
    from agent.settings import DiagnosisSettings
    from agent.snapshot.collection import Snapshot


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help="diagnose training jobs in snapshot files",
        description="Say for every training job in the snapshot whether it is split across "
        "zones, whether network policies block it, and where to co-locate it.",
    )
    parser.add_argument(
        "--snapshot",
        action="append",
        required=True,
        metavar="FILE",
        type=Path,
        help="YAML or JSON file (kind: List, multi-document YAML, or a JSON List); repeatable",
    )
    parser.add_argument("--config", type=Path, metavar="FILE", help="diagnosis config (YAML)")
    parser.add_argument("--output", choices=("table", "json"), default="table")
    parser.set_defaults(handler=run)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read snapshot: {exc.strerror or exc}") from None


def load_snapshot(paths: Sequence[Path]) -> Snapshot:
    """Read and parse the snapshot files.

    The cyclic garbage collector is paused while parsing and the parsed objects are then frozen
    (`gc.freeze`): a snapshot of 150,000 pods is millions of long-lived objects that full
    collections would otherwise rescan again and again, making parse and diagnosis superlinear.
    """
    from agent.snapshot.collection import parse_snapshot

    enabled = gc.isenabled()
    gc.disable()
    try:
        return parse_snapshot((str(p), _read(p)) for p in paths)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _use_colour() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def run(args: argparse.Namespace) -> int:
    from agent.settings import load_diagnosis_settings

    settings = load_diagnosis_settings(args.config)
    try:
        return _diagnose(args, settings, load_snapshot(args.snapshot))
    finally:
        gc.unfreeze()  # in-process callers (tests) get an ordinary heap back


def _diagnose(args: argparse.Namespace, settings: DiagnosisSettings, snapshot: Snapshot) -> int:
    import orjson

    from agent.diagnosis.diagnose import diagnose_cluster
    from agent.diagnosis.report import render_table
    from agent.policy import PolicySet

    for warning in snapshot.warnings:
        print(f"zonemedic: warning: {warning}", file=sys.stderr)
    result = diagnose_cluster(snapshot.state, PolicySet(snapshot.policies), settings=settings)
    if args.output == "json":
        body = {"findings": [f.to_dict() for f in result.findings]}
        sys.stdout.buffer.write(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
    else:
        sys.stdout.write(render_table(result.findings, colour=_use_colour()))
    return 0
