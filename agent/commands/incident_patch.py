"""`zonemedic incidents patch ID --format manifest|kustomize|json6902`: hand a fix over to its source.

Prints the latest plan's hand-over (`agent.model.handover`) of the incident: the manifest of each
object it changes as kubectl apply last applied it (else as it is live) with the fix, a
strategic-merge patch file per object and its `kustomization.yaml` entry, or a JSON 6902 patch
naming its target; with a Helm values hint where the fix sets pod-template keys. `--output json`
gives the files by name. Who calls it: `agent.cli` through the `incidents` parsers. A bad id or
format is one line on stderr and exit 2; an incident without a plan (or a refused one) says so,
exit 1. It reads the store only.
"""

from __future__ import annotations

import argparse
import json
import sys

from agent.commands.db import add_database_arguments, open_cli_store
from agent.errors import InputError
from agent.model.handover import PatchFormat, document, parse_format, render
from agent.model.incident import parse_incident_id
from agent.model.proposal import proposed_fix
from agent.parsing.printable import printable


def add_parser(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = actions.add_parser("patch", help="the fix as a change for the objects' source")
    parser.add_argument("id", metavar="ID", help="the incident id")
    parser.add_argument("--format", metavar="FORMAT", default=PatchFormat.KUSTOMIZE.value,
                        help="manifest, kustomize (default) or json6902")
    parser.add_argument("--output", metavar="FORMAT", default="text", help="text or json")
    add_database_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    incident_id = parse_incident_id(args.id, field="ID")
    fmt = parse_format(args.format)
    if args.output not in ("text", "json"):
        raise InputError(f"--output: expected text or json, got {args.output!r}")
    _, store = open_cli_store(args)
    try:
        detail = store.get_incident(incident_id)
    finally:
        store.close()
    fix = proposed_fix(detail.actions)
    if fix is None or not fix.handovers:
        why = fix.refusal if fix is not None and fix.refusal else "no plan with a change recorded"
        print(f"incident {incident_id}: nothing to hand over ({why})", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(document(incident_id, fix.handovers, fmt), indent=2))
    else:
        print("\n".join(printable(line) for line in render(fix.handovers, fmt).splitlines()))
    return 0
