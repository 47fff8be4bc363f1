"""The `zonemedic twin ...` command group.

`register(subparsers)` adds `twin` with one sub-command per entry of TWIN_SUBCOMMANDS (name ->
function that adds its parser and sets `handler`); adding a sub-command (e.g. `twin up`) is one
function plus one row. `twin apiserver --kubeconfig PATH [--port P] [--rbac FILE] [--token T]
[--identity TOKEN=USER[,GROUP...]] [--service-account TOKEN=NAMESPACE/NAME]` serves the emulated
API until interrupted. Heavy imports stay
inside the handlers so other commands do not pay for them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from agent.errors import InputError
from agent.twin.command_up import register_up


def _parse_identity(text: str) -> tuple[str, str, tuple[str, ...]]:
    """TOKEN=USER[,GROUP...] (user names may contain ':', as system:serviceaccount:ns:name)."""
    token, sep, who = text.partition("=")
    if not sep or not token or not who:
        raise InputError(f"--identity {text!r}: expected TOKEN=USER[,GROUP...]")
    user, *groups = who.split(",")
    if not user:
        raise InputError(f"--identity {text!r}: the user name is empty")
    return token, user, tuple(g for g in groups if g)


def _parse_service_account(text: str) -> tuple[str, str, str]:
    token, sep, who = text.partition("=")
    namespace, slash, name = who.partition("/")
    if not sep or not token or not slash or not namespace or not name:
        raise InputError(f"--service-account {text!r}: expected TOKEN=NAMESPACE/NAME")
    return token, namespace, name


def _register_apiserver(twin: Any) -> None:
    parser = twin.add_parser(
        "apiserver",
        help="serve the emulated Kubernetes API on 127.0.0.1 until interrupted",
        description="Serve the twin's emulated Kubernetes API server and write a kubeconfig.",
    )
    parser.add_argument("--kubeconfig", required=True, help="where to write the kubeconfig")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: free)")
    parser.add_argument(
        "--rbac",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML with Role/ClusterRole/bindings to load (repeatable)",
    )
    parser.add_argument("--token", help="admin bearer token (system:masters); enables auth")
    parser.add_argument(
        "--identity",
        action="append",
        default=[],
        metavar="TOKEN=USER[,GROUP...]",
        help="another bearer token and its identity for RBAC (repeatable)",
    )
    parser.add_argument(
        "--service-account",
        action="append",
        default=[],
        metavar="TOKEN=NAMESPACE/NAME",
        help="a bearer token for a service account, as bound in RBAC subjects (repeatable)",
    )
    parser.set_defaults(handler=run_apiserver)


def run_apiserver(args: argparse.Namespace) -> int:
    from agent.twin import kubeconfig
    from agent.twin.apierror import ApiError
    from agent.twin.apiserver import ApiServer
    from agent.twin.auth import (
        ADMIN,
        AUTHENTICATED,
        Authenticator,
        UserInfo,
        ensure_namespaces,
        load_rbac,
        read_rbac_file,
    )
    from agent.twin.interrupt import wait_until_interrupted
    from agent.twin.store import Store

    if not 0 <= args.port <= 65535:
        raise InputError(f"--port {args.port}: must be between 0 and 65535")
    identities = [_parse_identity(text) for text in args.identity]
    accounts = [_parse_service_account(text) for text in args.service_account]
    documents = [doc for path in args.rbac for doc in read_rbac_file(path)]
    store = Store()
    try:
        ensure_namespaces(store, documents)
        loaded = load_rbac(store, documents)
    except ApiError as exc:
        raise InputError(f"--rbac: {exc.message}") from exc
    authenticator = Authenticator()
    if args.token:
        authenticator.add(args.token, ADMIN)
    for token, user, groups in identities:
        authenticator.add(token, UserInfo(user, (*groups, AUTHENTICATED)))
    for token, namespace, name in accounts:
        authenticator.add(token, UserInfo.service_account(namespace, name))
    try:
        # kubectl sends bearer tokens only over TLS, so a twin with tokens serves HTTPS.
        server = ApiServer(
            store, port=args.port, authenticator=authenticator, tls=bool(authenticator.tokens)
        )
    except OSError as exc:
        raise InputError(f"--port {args.port}: cannot listen on 127.0.0.1: {exc.strerror}") from exc
    path = kubeconfig.write(args.kubeconfig, server.url, token=args.token, ca_pem=server.ca_pem)
    print(f"twin apiserver serving at {server.url}", flush=True)
    print(f"kubeconfig written to {path} (RBAC objects loaded: {loaded})", flush=True)
    server.start()
    try:
        wait_until_interrupted()
        print("twin apiserver stopping", file=sys.stderr)
    finally:
        server.stop()
        store.close()
    return 0


# name -> adds that sub-command's parser. Adding `twin up` is one function and one row.
TWIN_SUBCOMMANDS: dict[str, Callable[[Any], None]] = {
    "apiserver": _register_apiserver,
    "up": register_up,
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "twin",
        help="run the cluster twin (emulated Kubernetes API, scheduler, operators)",
        description="The cluster twin: an emulated Kubernetes cluster for tests and demos.",
    )
    twin = parser.add_subparsers(dest="twin_command", metavar="TWIN_COMMAND")
    twin.required = True
    for add in TWIN_SUBCOMMANDS.values():
        add(twin)
