"""`zonemedic whatif`: what a policy change would do to every job, before it is made.

`zonemedic whatif [--snapshot FILE ...] [--apply FILE ...] [--delete KIND/NS/NAME ...]
[--config FILE] [--output text|json]` parses the dump (or, without `--snapshot`, the live cluster
through the kubeconfig: `--kubeconfig`/`--context`, read-only, `agent.commands.live_cluster`) as it is and as the change would leave it
(`--apply`: the file's objects added or replacing those of the same kind, namespace and name, as a
later snapshot file does; `--delete`: a NetworkPolicy, CiliumNetworkPolicy or Pod `KIND/NS/NAME`,
or `CiliumClusterwideNetworkPolicy/NAME`, removed; `--move NS/NAME --zone Z`: the job co-located in
Z as the planner's fix leaves it, `agent.diagnosis.whatif.moved`), then prints the blast radius
(`agent.diagnosis.whatif`): each job whose verdict changes and each required flow whose verdict
changes. Exit 0 whatever changes; bad input (an unreadable file, an object that is not there, a kind
it cannot delete) is one line, exit 2; an unreachable cluster exit 1. It applies nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.errors import WhatIfError

if TYPE_CHECKING:
    from agent.settings import DiagnosisSettings
    from agent.snapshot.collection import Snapshot

def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "whatif",
        help="show which jobs and flows a policy change would change",
        description="Diagnose every job of a dump as it is and as a policy change would leave it, "
        "and print each job and each required flow whose verdict changes.",
    )
    parser.add_argument("--snapshot", action="append", default=[], metavar="FILE", type=Path,
                        help="a `kubectl get -o yaml` dump (repeatable; default: the live "
                        "cluster)")
    parser.add_argument("--kubeconfig", metavar="FILE", help="the kubeconfig of the live cluster")
    parser.add_argument("--context", metavar="NAME", help="the kubeconfig context")
    parser.add_argument("--apply", action="append", default=[], metavar="FILE", type=Path,
                        help="objects (policies) to apply (repeatable)")
    parser.add_argument("--delete", action="append", default=[], metavar="KIND/NS/NAME",
                        help="an object to delete: NetworkPolicy/NS/NAME, CiliumNetworkPolicy/NS/"
                        "NAME, CiliumClusterwideNetworkPolicy/NAME, Pod/NS/NAME (repeatable)")
    parser.add_argument("--move", metavar="NS/NAME",
                        help="a training job to co-locate in --zone (as the planner's fix does: "
                        "zone-mirroring labels set, pods placed in the zone)")
    parser.add_argument("--zone", metavar="ZONE", help="the zone --move moves the job to")
    parser.add_argument("--policy-fix", metavar="NS/NAME",
                        help="propose the smallest allow policy that admits the job's denied "
                        "flows, with its blast radius (never applied)")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="diagnosis config (YAML): the agent's diagnosis: keys")
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.set_defaults(handler=run)


def _delete(snapshot: Snapshot, targets: list[str]) -> Snapshot:
    from agent.diagnosis.whatif import delete_objects

    left = delete_objects(targets, policies=snapshot.policies, unreadable=snapshot.unreadable,
                          pods=snapshot.state.pods, flag="--delete", where="the snapshot")  # fmt: skip
    state = dataclasses.replace(snapshot.state, pods=left.pods)
    return dataclasses.replace(snapshot, state=state, policies=left.policies,
                               unreadable=left.unreadable)  # fmt: skip


def _move(snapshot: Snapshot, args: argparse.Namespace, settings: DiagnosisSettings, *,
          items: Sequence[Mapping[str, Any]] | None) -> tuple[Snapshot, dict[str, Any]]:
    """The snapshot with the job re-created as the planner's fix to `--zone` leaves it
    (`agent.remediation.rehearsal`): planned from the dump's objects (`items`), or, live
    (`items` None), from the objects the plan preview reads, read-only; and what the move is:
    the zone, the planner's diff and each moved pod's node."""
    from agent.diagnosis.diagnose import JobScope, diagnose_cluster
    from agent.diagnosis.whatif import find_job
    from agent.remediation.rehearsal import live_objects, plan_move, rehearse
    from agent.topology.jobs import find_jobs

    state = snapshot.state
    zones = sorted({z for n in state.nodes.values() if (z := n.zone)})
    if args.zone not in zones:
        raise WhatIfError(f"--zone: no node in zone {args.zone!r} (zones: "
                          f"{', '.join(zones) or 'none'})")  # fmt: skip
    job = find_job(find_jobs(state, settings.groups), args.move)
    diagnosis = diagnose_cluster(state, snapshot.policy_set(settings), settings=settings,
                                 only=JobScope(jobs=frozenset({job.ref})))  # fmt: skip
    finding = next(f for f in diagnosis.findings if f.job == job.ref)
    if items is None:
        from agent.remediation.observe import ClusterReader
        from agent.settings import KubernetesSettings
        from agent.sources.kubeapi import KubeApi, build_api_client

        api = KubeApi(build_api_client(KubernetesSettings(kubeconfig=args.kubeconfig,
                                                          context=args.context)))  # fmt: skip
        try:
            reader = ClusterReader(api)
            raw = reader.job(job.ref) if job.ref.kind.value != "Group" else None
            live = reader.live_objects(job.ref, target_zone=args.zone, job=raw,
                                       pod_names=[p.name for p in job.pods])  # fmt: skip
            if finding.kueue is not None:
                live = dataclasses.replace(live, queued=reader.kueue_workload(job.ref),
                                           kueue=state.kueue)  # fmt: skip
        finally:
            api.api_client.close()
        items = [*live.pods, *live.nodes, *live.bound_pods, *live.workloads]
    else:
        live = live_objects(items, job, zone=args.zone, kueue=state.kueue)
    plan = plan_move(finding, live, zone=args.zone, mirror_keys=diagnosis.mirror_keys)
    moved = rehearse(state, job, plan, live=live, items=items, mirror_keys=diagnosis.mirror_keys)
    members = {(p.namespace, p.name) for p in job.pods}
    placement = {f"{p.namespace}/{p.name}": p.node_name for p in moved.pods
                 if (p.namespace, p.name) in members}  # fmt: skip
    move = {"job": str(job.ref), "zone": args.zone, "diff": plan.diff, "placement": placement}
    return dataclasses.replace(snapshot, state=moved), move


def _policy_fix(args: argparse.Namespace) -> int:
    """`--policy-fix NS/NAME`: the proposal, its YAML and diff, its proof and the blast radius of
    applying it over every job."""
    import orjson

    from agent.commands.diagnose import load_snapshot
    from agent.diagnosis.flow_universe import Cluster
    from agent.diagnosis.policy_fix import base_labels, offer, propose_fix, with_fix
    from agent.diagnosis.whatif import blast_radius, find_job
    from agent.model.cluster import ZONE_LABEL
    from agent.parsing.printable import printable
    from agent.settings import load_diagnosis_settings
    from agent.topology.jobs import find_jobs
    from agent.topology.zones import mirror_label_keys

    settings = load_diagnosis_settings(args.config)
    try:
        if args.snapshot:
            snapshot = load_snapshot(args.snapshot)
        else:
            from agent.commands.live_cluster import live_snapshot, read_live

            snapshot = live_snapshot(read_live(kubeconfig=args.kubeconfig, context=args.context))
        state, policies = snapshot.state, snapshot.policy_set(settings)
        job = find_job(find_jobs(state, settings.groups), args.policy_fix)
        base = base_labels(job, {g.name: g.selector for g in settings.groups})
        avoid = frozenset((*mirror_label_keys(settings.pod_zone_label, pods=state.pods,
                                              nodes=state.nodes), ZONE_LABEL))  # fmt: skip
        fix = propose_fix(job, state, policies, base=base, avoid=avoid)
        if fix is None:
            body: dict[str, Any] = {"job": str(job.ref), "policy_fix": None,
                                    "note": "no required flow of the job is denied"}  # fmt: skip
            text = f"{job.ref}: no required flow is denied: no policy change is needed\n"
        else:
            proof = offer(job, state, policies, base=base, avoid=avoid)
            assert proof is not None
            result = blast_radius(Cluster(state, policies), Cluster(state, with_fix(policies, fix)),
                                  settings=settings)  # fmt: skip
            others = [f for f in result.all_flows() if f.job != str(job.ref)]
            other_jobs = [j for j in result.jobs if j.job != str(job.ref)]
            contained = not others and not other_jobs and proof.exact
            body = {"job": str(job.ref),
                    "policy_fix": {"kind": fix.kind, "manifests": list(fix.manifests),
                                   "manifest": fix.manifests[0], "yaml": fix.yaml,
                                   "diff": fix.diff(), "exact": proof.exact,
                                   "proof": dict(proof.blast)},
                    "blast_radius": result.to_dict(), "only_this_job": contained,
                    "apply": f"{fix.apply_command()} ({proof.note})"}  # fmt: skip
            text = (f"proposed policy for {job.ref} ({fix.kind}; {proof.note}):\n"
                    f"{fix.diff()}\napply it with: {fix.apply_command()}\n{result.render()}"
                    f"exactly the job's {fix.opened} denied required flow(s) change, nothing "
                    f"else: {'yes' if contained else 'NO'}\n")
    finally:
        gc.unfreeze()
    if args.output == "json":
        sys.stdout.buffer.write(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        sys.stdout.write("".join(printable(line) + "\n" for line in text.splitlines()))
    sys.stdout.flush()
    return 0


def _items(path: Path) -> list[dict[str, Any]]:
    """The objects of an `--apply` file."""
    from agent.errors import SnapshotError
    from agent.snapshot.documents import iter_items

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return list(iter_items(data, source=str(path)))


def run(args: argparse.Namespace) -> int:
    import orjson

    from agent.commands.diagnose import load_snapshot
    from agent.diagnosis.flow_universe import Cluster
    from agent.diagnosis.whatif import blast_radius
    from agent.parsing.printable import printable
    from agent.settings import load_diagnosis_settings

    if args.policy_fix:
        if args.apply or args.delete or args.move:
            raise WhatIfError("whatif: --policy-fix goes alone (it is the change)")
        return _policy_fix(args)
    if not args.apply and not args.delete and not args.move:
        raise WhatIfError("whatif: give a change: --apply FILE, --delete KIND/NS/NAME or "
                          "--move NS/NAME --zone Z")
    if bool(args.move) != bool(args.zone):
        raise WhatIfError("whatif: --move NS/NAME and --zone Z go together")
    settings = load_diagnosis_settings(args.config)
    try:
        items: list[Mapping[str, Any]] | None = None
        if args.snapshot:
            before = load_snapshot(args.snapshot)
            changed = load_snapshot([*args.snapshot, *args.apply])
            if args.move:
                items = [item for path in (*args.snapshot, *args.apply) for item in _items(path)]
        else:
            from agent.commands.live_cluster import live_snapshot, read_live

            applied = [item for path in args.apply for item in _items(path)]
            live = read_live(kubeconfig=args.kubeconfig, context=args.context)
            before, changed = live_snapshot(live), live_snapshot(live, applied)
        after = _delete(changed, args.delete)
        move: dict[str, Any] | None = None
        if args.move:
            after, move = _move(after, args, settings, items=items)
        elif after.state == before.state:  # a policy change only: one state, its jobs found once
            after = dataclasses.replace(after, state=before.state)
        for warning in after.warnings:
            print(f"zonemedic: warning: {printable(str(warning))}", file=sys.stderr)
        result = blast_radius(
            Cluster(before.state, before.policy_set(settings)),
            Cluster(after.state, after.policy_set(settings)),
            settings=settings,
        )
    finally:
        gc.unfreeze()
    if args.output == "json":
        body = result.to_dict() if move is None else {**result.to_dict(), "move": move}
        sys.stdout.buffer.write(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
    else:
        text = result.render()
        if move is not None:
            text = (f"move {move['job']} to {move['zone']} with the planner's patches:\n"
                    f"{move['diff']}\n" + text)
        sys.stdout.write("".join(printable(line) + "\n" for line in text.splitlines()))
    return 0
