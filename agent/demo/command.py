"""`zonemedic demo [--scenario seed-degraded|seed-blocked|lab|trainjob|trainjob-mpi|kueue|prevent] [--gitops] [--interactive] [--output json]`.

`--gitops` (with `lab` only): the lab deployed from Git; the story goes on after the fix
(`agent.demo.gitops_revert`): the sync undoes half of it, the agent names the revert, holds the
automatic approval and posts the kustomize patch for the source.

`prevent` tells another story (`agent.demo.prevention`): the agent's admission webhook places a
job that would split in one zone at its creation, and no incident is opened.

Registered by `agent.cli` (offered only where the cluster twin is installed). Runs the story of
`agent.demo.story` once: everything on 127.0.0.1, in one temporary directory, stopped and removed
at the end, on an error, on Ctrl-C or SIGTERM (exit 130). It prints the story live on the terminal
(on stderr with `--output json`, or its alias `--json`, whose stdout is one summary object;
without a terminal at `PIPE_WIDTH` columns, lines never wrapped) and writes the utilization chart
(`--chart`, default `zonemedic-demo-<scenario>.png` in the working directory). `--interactive` asks
the person at the terminal to approve, reject or snooze, and sends that click. Exit 0 when the
story ran to its end, 1 when a step did not happen in time, 2 on bad flags.
Heavy imports stay inside `run`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.panel import Panel

    from agent.demo.story import Summary

SCENARIOS = ("seed-degraded", "seed-blocked", "lab", "trainjob", "trainjob-mpi", "kueue", "prevent")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="the whole story on this machine: twin, Prometheus, fake Slack, the agent (~30 s)",
        description="Run the cluster twin with a split training job, a real Prometheus, a fake "
        "Slack and the agent, all on 127.0.0.1, and narrate detection, approval, co-location "
        "and recovery.",
    )
    parser.add_argument("--scenario", choices=SCENARIOS, default="seed-degraded",
                        help="seed-degraded (slow, ~40%% GPU utilization), seed-blocked (a "
                        "policy blocks the job), lab (a Deployment + batch Job group), trainjob "
                        "(a Kubeflow Trainer v2 torch TrainJob split across two GPU zones), "
                        "trainjob-mpi (an MPI TrainJob whose CPU-only launcher is blocked from "
                        "its GPU nodes); default: %(default)s")
    parser.add_argument("--gitops", action="store_true",
                        help="with --scenario lab: the lab deployed from Git by Argo CD "
                        "(simulated); after the fix, the sync undoes half of it and the agent "
                        "names the revert, holds automatic approval and posts the kustomize patch")
    parser.add_argument("--interactive", action="store_true",
                        help="ask at the terminal before approving (approve, reject or snooze)")
    parser.add_argument("--output", choices=("text", "json"), default="text",
                        help="json: print one summary object on stdout (the story and its "
                        "summary go to stderr); text (default): the story and its summary on the "
                        "terminal")
    parser.add_argument("--chart", metavar="FILE", type=Path,
                        help="where to write the utilization chart PNG "
                        "(default: zonemedic-demo-SCENARIO.png in the working directory)")
    parser.add_argument("--no-metrics", action="store_true",
                        help="run without Prometheus (no utilization figures, no chart)")
    parser.set_defaults(handler=run)


CHOICES = "[a]pprove / [r]eject / [s]nooze"
PIPE_WIDTH = 100  # columns of the story without a terminal (a pipe, a log), unless COLUMNS says


def question(incident: Any) -> str:
    """The interactive question, as console markup (the choices' brackets escaped, so they show)."""
    from rich.markup import escape

    job = escape(f"{incident.kind} {incident.namespace}/{incident.name}")
    zone = escape(incident.target_zone or "one zone")
    return (f"\n[bold]You are dana, an approver.[/bold] Co-locate {job} in {zone}? "
            f"{escape(CHOICES)}: ")


def _ask(console: Any) -> Any:
    from agent.chatops.blocks import ButtonAction

    choices = {"a": ButtonAction.APPROVE, "approve": ButtonAction.APPROVE, "y": ButtonAction.APPROVE,
               "r": ButtonAction.REJECT, "reject": ButtonAction.REJECT, "n": ButtonAction.REJECT,
               "s": ButtonAction.SNOOZE, "snooze": ButtonAction.SNOOZE}
    echo = not sys.stdin.isatty()  # a piped answer is not echoed by a terminal: the story shows it

    def answer(incident: Any) -> ButtonAction:
        while True:
            try:
                # printed whole (a pipe's log keeps it on one line), then read
                console.print(question(incident), end="", soft_wrap=True)
                reply = console.input()
            except EOFError:
                console.print("(no answer: end of input) reject", markup=False)
                return ButtonAction.REJECT
            if echo:
                console.print(reply.strip(), markup=False, highlight=False)
            chosen = choices.get(reply.strip().lower())
            if chosen is not None:
                return chosen
            console.print("please answer a, r or s")

    return answer


def story_console(*, stderr: bool) -> Any:
    """The console the story is told on: a terminal's own width, else `PIPE_WIDTH` columns (not
    rich's 80) unless COLUMNS is set."""
    import os

    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = PIPE_WIDTH
    return console


def run(args: argparse.Namespace) -> int:
    from agent.runtime.logging import configure_logging, verbosity_level

    # the story is the output: the agent's own log lines only for errors, unless -v
    configure_logging(verbosity_level(args.verbose) if args.verbose else "error",
                      fmt=args.log_format, timestamps=False)
    return narrate(args, story_console(stderr=args.output == "json"))


def narrate(args: argparse.Namespace, console: Any) -> int:
    """The story told on `console` (a rich Console), then the summary (also on stdout as one
    JSON object with `--output json`)."""
    from agent.demo.story import tell

    if args.gitops and args.scenario != "lab":
        from agent.errors import InputError

        raise InputError(f"--gitops: only with --scenario lab (the lab deployed from Git), not "
                         f"{args.scenario}")
    if args.gitops and args.interactive:
        from agent.errors import InputError

        raise InputError("--gitops: the fix is approved automatically, --interactive has "
                         "nothing to ask")
    if args.scenario == "prevent":
        return _prevent(args, console)
    chart = args.chart or Path.cwd() / f"zonemedic-demo-{args.scenario}.png"
    if not chart.parent.is_dir():
        from agent.errors import InputError

        raise InputError(f"--chart {chart}: the directory {chart.parent} does not exist")
    if args.interactive and not sys.stdin.isatty():
        console.print("note: --interactive reads the answer from standard input")

    interrupted = False

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        nonlocal interrupted
        if interrupted:  # a second Ctrl-C while stopping: stopping goes on
            return
        interrupted = True
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        summary = tell(args.scenario, console=console,
                       answer=_ask(console) if args.interactive else None,
                       chart_path=chart, metrics=not args.no_metrics, gitops=args.gitops)
    except KeyboardInterrupt:
        console.print("demo interrupted: everything it started is stopped and its files removed")
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    console.print(summary_panel(summary))
    if args.output == "json":
        print(json.dumps(summary.to_dict()), flush=True)
    return 0


def _prevent(args: argparse.Namespace, console: Any) -> int:
    """The prevention story (`agent.demo.prevention`) and its summary."""
    from rich.markup import escape
    from rich.panel import Panel

    from agent.demo.prevention import tell as tell_prevention

    summary = tell_prevention(console=console)
    zones = ", ".join(f"{z} ×{n}" for z, n in sorted(summary.zones.items()))
    lines = [f"[bold]{escape(summary.job)}[/bold]: placed at admission ({escape(summary.outcome)}), "
             f"pods {escape(zones)}, {escape(summary.verdict)}, {summary.incidents} incident(s)",
             escape(f"the webhook said: {summary.warning}"),
             f"the whole story took {summary.duration_s:.0f}s"]
    console.print(Panel("\n".join(lines), title="demo summary", title_align="left",
                        border_style="green"))
    if args.output == "json":
        print(json.dumps(summary.to_dict()), flush=True)
    return 0


def summary_panel(summary: Summary) -> Panel:
    """The story's last words: what happened, measured (a rich Panel)."""
    from rich.markup import escape
    from rich.panel import Panel

    lines = [f"[bold]{escape(summary.job)}[/bold]: incident {summary.incident_status}"]
    if summary.detected_after_s is not None:
        lines.append(f"split detected {summary.detected_after_s:.1f}s after the last pod was "
                     "bound (before any GPU-second was wasted)")
    if summary.utilization_before is not None and summary.utilization_after is not None:
        lines.append(f"GPU utilization {summary.utilization_before:.0f}% → "
                     f"{summary.utilization_after:.0f}%")
    elif summary.utilization_before is not None:
        lines.append(f"GPU utilization {summary.utilization_before:.0f}%, split (not co-located)")
    if summary.egress_usd_per_day is not None:
        how = ("measured by Beyla" if summary.egress_source == "measured"
               else f"{summary.egress_source}")  # fmt: skip
        volume = (f"{summary.egress_gb_per_day:,.0f} GB/day, "
                  if summary.egress_gb_per_day is not None else "")  # fmt: skip
        lines.append(f"cross-zone egress while split: {volume}"
                     f"${summary.egress_usd_per_day:,.2f}/day ({how})")
    lines.append("pods per zone: " + " → ".join(
        ", ".join(f"{z} ×{c}" for z, c in sorted(zones.items())) or "-"
        for zones in (summary.zones_before, summary.zones_after)))
    if summary.redetected_incident_id is not None:
        lines.append(escape(
            f"then the GitOps sync undid half of it: incident #{summary.redetected_incident_id}, "
            f"fix reverted by {summary.reverted_by}, automatic approval held "
            f"({summary.redetected_status}), the kustomize patch posted: `zonemedic incidents "
            f"patch {summary.redetected_incident_id} --format kustomize`"))
    if summary.chart:
        shown = Path(summary.chart)
        if shown.parent == Path.cwd():
            shown = Path(shown.name)
        lines.append(escape(f"chart: {shown}"))
    lines.append(f"the whole story took {summary.duration_s:.0f}s; next: `make test`, then "
                 "README.md for a real cluster")
    return Panel("\n".join(lines), title="demo summary", title_align="left",
                 border_style="green")
