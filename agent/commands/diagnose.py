"""`zonemedic diagnose`: diagnose every training job of offline snapshot files.

`zonemedic diagnose FILE [FILE ...] [--snapshot FILE ...] [--config FILE] [--output table|json]`
reads the files (positional or `--snapshot`, both repeatable), parses them (`agent.snapshot`), runs
the pure diagnosis and prints a table or one JSON object `{"findings": [...]}` (`--json` is
`--output json`). The config file holds the agent's `diagnosis:` keys, bare or under `diagnosis:`
(the agent's own config file works). In JSON each finding also carries `owners`: who owns each
object its fix would write (`agent.diagnosis.fix_owners`: a GitOps tool, Helm, a pipeline,
kubectl apply, a controller, or nobody), as far as the snapshot holds those objects (null
otherwise). The files together may hold at most `--max-input-size`
bytes (default 1G): a larger or endless input (`/dev/zero`) is refused with one line, having read
no more than the limit. Warnings (skipped kinds, policies that cannot be read, Cilium policies a
plain Kubernetes dataplane does not enforce) go to stderr, one line each; when no training job is
found, a note says how a coordinator/worker group is declared. Exit 0 whatever the verdicts; bad
input raises `InputError` (the CLI prints one line, exit 2). It talks to no cluster.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.errors import InputError, SnapshotError
from agent.parsing.numbers import parse_size
from agent.parsing.printable import printable

DEFAULT_MAX_INPUT = "1G"  # all snapshot files together; YAML needs ~50x its size in memory, JSON ~5x

if TYPE_CHECKING:
    from agent.model.ownership import ObjectOwnership
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
        "files",
        nargs="*",
        metavar="FILE",
        type=Path,
        help="YAML or JSON file (kind: List, multi-document YAML, or a JSON List)",
    )
    parser.add_argument(
        "--snapshot",
        action="append",
        default=[],
        metavar="FILE",
        type=Path,
        help="a snapshot file, as FILE; repeatable",
    )
    parser.add_argument(
        "--config", type=Path, metavar="FILE",
        help="diagnosis config (YAML): the agent's diagnosis: keys (e.g. groups), bare or under "
        "diagnosis:",
    )
    parser.add_argument(
        "--max-input-size",
        metavar="SIZE",
        default=DEFAULT_MAX_INPUT,
        help=f"refuse snapshot files larger than SIZE in total (bytes, or 512M, 2G; default "
        f"{DEFAULT_MAX_INPUT})",
    )
    parser.add_argument("--output", choices=("table", "json"), default="table")
    parser.set_defaults(handler=run)


def _read(path: Path, *, limit: int) -> bytes:
    """The file's bytes, never more than `limit` read: a larger (or endless) file is refused."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > limit:  # a regular file: refused before reading
                raise SnapshotError(_too_large(path, limit))
            data = handle.read(limit + 1)  # a pipe or device (/dev/zero): read to the limit only
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read snapshot: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise SnapshotError(_too_large(path, limit))
    return data


def _too_large(path: Path, limit: int) -> str:
    return f"{path}: the snapshot input is larger than {limit} bytes (raise --max-input-size)"


def _read_all(paths: Sequence[Path], *, limit: int) -> Iterator[tuple[str, bytes]]:
    left = limit
    for path in paths:
        data = _read(path, limit=left)
        left -= len(data)
        yield str(path), data


def load_snapshot(paths: Sequence[Path], *, max_input: int = 1 << 30) -> Snapshot:
    """Read and parse the snapshot files.

    The cyclic garbage collector is paused while parsing and the parsed objects are then frozen
    (`gc.freeze`): a snapshot of 150,000 pods is millions of long-lived objects that full
    collections would otherwise rescan again and again, making parse and diagnosis superlinear.
    """
    from agent.snapshot.collection import parse_snapshot
    from agent.sources.gcpause import freeze_at_end, gc_paused

    with gc_paused():
        freeze_at_end()
        return parse_snapshot(_read_all(paths, limit=max_input))


def _use_colour() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def run(args: argparse.Namespace) -> int:
    from agent.settings import load_diagnosis_settings

    files = [*args.files, *args.snapshot]
    if not files:
        raise InputError("diagnose: give a snapshot file: zonemedic diagnose FILE "
                         "(kubectl get nodes,pods,... -A -o yaml > FILE)")
    max_input = parse_size(args.max_input_size, field="--max-input-size")
    settings = load_diagnosis_settings(args.config)
    try:
        return _diagnose(args, settings, load_snapshot(files, max_input=max_input))
    finally:
        gc.unfreeze()  # in-process callers (tests) get an ordinary heap back


def _diagnose(args: argparse.Namespace, settings: DiagnosisSettings, snapshot: Snapshot) -> int:
    import orjson

    from agent.diagnosis.diagnose import diagnose_cluster
    from agent.diagnosis.fix_owners import fix_owners
    from agent.diagnosis.policy_fix import with_offers
    from agent.diagnosis.report import render_table

    policies = snapshot.policy_set(settings)
    for warning in (*snapshot.warnings, *policies.warnings()):
        print(f"zonemedic: warning: {printable(str(warning))}", file=sys.stderr)
    result = diagnose_cluster(snapshot.state, policies, settings=settings)
    findings = with_offers(result, snapshot.state, policies,
                           groups={g.name: g.selector for g in settings.groups})  # fmt: skip
    if not findings:
        print(f"zonemedic: note: {no_jobs_hint(settings)}", file=sys.stderr)
    if args.output == "json":
        body = {"findings": [_with_owners(f.to_dict(), fix_owners(f, result, snapshot.state))
                             for f in findings]}  # fmt: skip
        sys.stdout.buffer.write(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
    else:
        sys.stdout.write(render_table(findings, colour=_use_colour()))
    return 0


def _with_owners(found: dict[str, Any], owners: Sequence[ObjectOwnership] | None) -> dict[str, Any]:
    """A finding's JSON with `owners`: who owns each object its fix would write, as far as the
    snapshot tells (null: no fix, or the snapshot holds none of those objects)."""
    found["owners"] = [o.to_dict() for o in owners] if owners is not None else None
    return found


def no_jobs_hint(settings: DiagnosisSettings) -> str:
    """What to do when a snapshot holds no training job: Kubeflow jobs are found by their pods'
    labels; any other coordinator/worker group only once it is declared."""
    if settings.groups:
        names = ", ".join(g.name for g in settings.groups)
        return (f"no live pods match the declared group(s) {names} (diagnosis.groups: check "
                "their namespace and selector labels against the pods)")
    return ("Kubeflow jobs are found by their pods' labels; a coordinator/worker group of "
            "other workloads (a Deployment with a batch Job, ...) must be declared in "
            "diagnosis.groups of the --config file, e.g. groups: [{name: lab, namespace: ml, "
            "selector: {app: lab}, coordinator: {role: head}, workers: {role: worker}}]")
