"""`zonemedic explain`: why a flow between two pods is allowed or denied by the network policies.

`zonemedic explain --from NS/POD --to NS/POD --port PORT[/PROTO] [--snapshot FILE ...]
[--config FILE] [--output text|json]` reads the cluster (live through the kubeconfig:
`--kubeconfig`/`--context`, else in-cluster, else ~/.kube/config; or `kubectl get -o yaml` dumps
with `--snapshot`, repeatable) and prints the evaluator's explanation
(`agent.policy.explanation`): per hop whether it is enforced and why, the rules that matched, the
verdict, and the identities. `--from NS --from-labels K=V,...` (and `--to-labels`) stands for a
pod that does not exist yet. `--matrix` with `--pods NS/POD,...` (or `--namespace NS`, repeatable:
its live pods) and `--port` (repeatable) prints one reachability table per port, as Kubernetes'
network-policy e2e tests print theirs. The config file holds the agent's `diagnosis:` keys (the
dataplane, the zone label). Exit 0 whatever the verdict (`allowed` in the JSON says it); bad input
(unknown pod, bad port or protocol, malformed labels, an unreadable snapshot) raises `InputError`:
one line, exit 2; a cluster that cannot be reached is exit 1. It changes nothing.
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.errors import ExplainError

if TYPE_CHECKING:
    from agent.settings import DiagnosisSettings
    from agent.snapshot.collection import Snapshot

def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="explain why a flow between two pods is allowed or denied",
        description="Say for a flow (source pod, destination pod, port) whether the network "
        "policies allow it, at which hop it is denied, by which policies and rules, and the "
        "identities both pods were judged by.",
    )
    parser.add_argument("--from", dest="source", metavar="NS/POD",
                        help="the source pod (NS only with --from-labels)")
    parser.add_argument("--to", dest="destination", metavar="NS/POD",
                        help="the destination pod (NS only with --to-labels)")
    parser.add_argument("--from-labels", metavar="K=V,...",
                        help="labels of a source pod that does not exist yet")
    parser.add_argument("--to-labels", metavar="K=V,...",
                        help="labels of a destination pod that does not exist yet")
    parser.add_argument("--from-service-account", metavar="NAME",
                        help="the service account of a source pod to be (default: default)")
    parser.add_argument("--to-service-account", metavar="NAME",
                        help="the service account of a destination pod to be (default: default)")
    parser.add_argument("--port", action="append", default=[], metavar="PORT[/PROTO]",
                        help="the port (80, 80/UDP, 1000-2000/TCP, 53/ANY); repeatable with "
                        "--matrix")
    parser.add_argument("--matrix", action="store_true",
                        help="print the reachability table of --pods / --namespace instead")
    parser.add_argument("--pods", action="append", default=[], metavar="NS/POD,...",
                        help="pods of the matrix (comma-separated; repeatable)")
    parser.add_argument("--namespace", action="append", default=[], metavar="NS",
                        help="every live pod of NS goes into the matrix (repeatable)")
    parser.add_argument("--snapshot", action="append", default=[], metavar="FILE", type=Path,
                        help="read a `kubectl get -o yaml` dump instead of the live cluster "
                        "(repeatable)")
    parser.add_argument("--kubeconfig", metavar="FILE", help="the kubeconfig of the live cluster")
    parser.add_argument("--context", metavar="NAME", help="the kubeconfig context")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="diagnosis config (YAML): the agent's diagnosis: keys")
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.set_defaults(handler=run)


def _matrix_sides(args: argparse.Namespace, index: Any) -> list[Any]:
    from agent.policy.explanation import Side, parse_side

    sides = [parse_side(item.strip(), None, field="pods")
             for group in args.pods for item in group.split(",") if item.strip()]  # fmt: skip
    for namespace in args.namespace:
        sides.extend(Side(namespace, pod=p.name) for p in index.in_namespace(namespace))
    return list(dict.fromkeys(sides))


def run(args: argparse.Namespace) -> int:
    from agent.commands.diagnose import load_snapshot
    from agent.commands.live_cluster import live_snapshot, read_live
    from agent.settings import load_diagnosis_settings

    settings = load_diagnosis_settings(args.config)
    _check_args(args)
    try:
        snapshot = load_snapshot(args.snapshot) if args.snapshot else live_snapshot(
            read_live(kubeconfig=args.kubeconfig, context=args.context))
        return _explain(args, settings, snapshot)
    finally:
        gc.unfreeze()


def _check_args(args: argparse.Namespace) -> None:
    if args.matrix:
        if not args.port:
            raise ExplainError("matrix: give at least one --port")
        if not args.pods and not args.namespace:
            raise ExplainError("matrix: give --pods NS/POD,... or --namespace NS")
        return
    if len(args.port) != 1:
        raise ExplainError("port: give exactly one --port PORT[/PROTO] (several with --matrix)")
    if args.pods or args.namespace:
        raise ExplainError("--pods and --namespace go with --matrix")


def _explain(args: argparse.Namespace, settings: DiagnosisSettings, snapshot: Snapshot) -> int:
    import orjson

    from agent.parsing.printable import printable
    from agent.policy.explain_report import render_explanation, render_matrices
    from agent.policy.explanation import PodIndex, explain, matrix, parse_ports, parse_query
    from agent.topology.zones import mirror_label_keys

    where = "the snapshot" if args.snapshot else "the cluster"
    policies = snapshot.policy_set(settings)
    for warning in (*snapshot.warnings, *policies.warnings()):
        print(f"zonemedic: warning: {printable(str(warning))}", file=sys.stderr)
    index = PodIndex(snapshot.state)
    body: dict[str, Any]
    if args.matrix:
        ports = [parse_ports(p) for p in args.port]
        tables = matrix(index, policies, _matrix_sides(args, index), ports, where=where)
        body = {"matrix": [t.to_dict() for t in tables]}
        text = render_matrices(tables)
    else:
        query = parse_query(source=args.source, destination=args.destination,
                            port=args.port[0], from_labels=args.from_labels,
                            to_labels=args.to_labels,
                            from_service_account=args.from_service_account,
                            to_service_account=args.to_service_account)  # fmt: skip
        state = snapshot.state
        keys = mirror_label_keys(settings.pod_zone_label, pods=state.pods, nodes=state.nodes)
        body = explain(index, policies, query, mirror_keys=keys, where=where).to_dict()
        text = render_explanation(body)
    if args.output == "json":
        sys.stdout.buffer.write(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
    else:
        sys.stdout.write(text)
    return 0
