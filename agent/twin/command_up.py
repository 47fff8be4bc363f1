"""`zonemedic twin up`: run a whole twin cluster from a scenario until interrupted.

Registered by `agent.twin.command` (one row of TWIN_SUBCOMMANDS). Starts `cluster.TwinCluster`
with the scenario, serves the emulated Kubernetes API and the metrics endpoint on 127.0.0.1, writes
a kubeconfig when asked, prints both addresses, and waits for Ctrl-C (or SIGTERM). Heavy imports
stay inside `run_up`. Bad flags or an unknown scenario give one line and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agent.errors import InputError
from agent.twin.scenario_registry import GENERATED_SPEC, scenario_names


def register_up(twin: Any) -> None:
    parser = twin.add_parser(
        "up",
        help="run a twin cluster (API, scheduler, operators, dataplane, metrics) from a scenario",
        description="Run the cluster twin from a scenario until interrupted.",
    )
    parser.add_argument("--scenario", required=True, metavar="SCENARIO",
                        help=f"a packaged scenario ({', '.join(scenario_names())}), a YAML path, "
                        f"or {GENERATED_SPEC}")  # fmt: skip
    parser.add_argument("--port", type=int, default=0, help="API port on 127.0.0.1 (default: free)")
    parser.add_argument("--metrics-port", type=int, default=0,
                        help="metrics port on 127.0.0.1 (default: free)")  # fmt: skip
    parser.add_argument("--kubeconfig", help="write a kubeconfig for the twin here")
    parser.add_argument("--speed", type=float, default=1.0,
                        help="model time runs this many times faster than wall time (default 1)")  # fmt: skip
    parser.set_defaults(handler=run_up)


def run_up(args: argparse.Namespace) -> int:
    from agent.twin import kubeconfig
    from agent.twin.cluster import TwinCluster
    from agent.twin.interrupt import wait_until_interrupted
    from agent.twin.scenario import load_scenario

    for flag, port in (("--port", args.port), ("--metrics-port", args.metrics_port)):
        if not 0 <= port <= 65535:
            raise InputError(f"{flag} {port}: must be between 0 and 65535")
    if not args.speed > 0:
        raise InputError(f"--speed {args.speed}: must be a positive number")
    scenario = load_scenario(args.scenario)
    try:
        cluster = TwinCluster(scenario, speed=args.speed, metrics_port=args.metrics_port)
    except OSError as exc:
        raise InputError(
            f"--metrics-port {args.metrics_port}: cannot listen: {exc.strerror}"
        ) from exc
    try:
        api = cluster.serve_api(port=args.port)
    except OSError as exc:
        cluster.metrics.stop()
        raise InputError(f"--port {args.port}: cannot listen on 127.0.0.1: {exc.strerror}") from exc
    cluster.start()
    print(
        f"twin scenario {scenario.name}: {len(scenario.nodes)} nodes, speed x{args.speed:g}",
        flush=True,
    )
    print(f"twin API serving at {api.url}", flush=True)
    print(f"twin metrics at {cluster.metrics.url}/metrics", flush=True)
    if args.kubeconfig:
        path = kubeconfig.write(args.kubeconfig, api.url)
        print(f"kubeconfig written to {path}", flush=True)
    try:
        wait_until_interrupted()
    finally:
        print("twin stopping", file=sys.stderr, flush=True)
        cluster.stop()
    return 0
