"""Benchmark: 100 concurrent signed button clicks against the agent's /slack/events.

Runs the chat layer as the agent does (built by `agent.runtime.chat.build_chat`, served by uvicorn
on 127.0.0.1, a migrated SQLite store, the fake Slack Web API), then sends 100 clicks at once from
three approvers, from a separate process (as Slack is: the clicks do not share the agent's
interpreter): once on 100 different incidents (100 decisions), once all on one incident (one
decision, 99 told who decided). It times each click from sending to the HTTP response (the
acknowledgement: the decision and the replies happen after it) and waits until every click was
answered ephemerally. Target: p99 <= 200 ms. Prints the figures, writes them to bench/results.json
and exits 0 (a missed target is reported, not failed). `--quick`: one round instead of three.

Run: .venv/bin/python bench/slack_clicks.py [--quick] [--clicks N] [--rounds R]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.chatops.blocks import ButtonAction
from agent.fakes.slack import FakeSlack
from agent.settings import DatabaseSettings
from agent.store.engine import make_engine
from agent.store.migrate import upgrade
from bench.results import Figure, Results, percentile
from tests.chatops.harness import ChatRig, start_rig

APPROVERS = ["U1", "U2", "U3"]
TARGET_P99_MS = 200.0


def template(directory: Path) -> Path:
    path = directory / "template.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine, DatabaseSettings())
    engine.dispose()
    return path


def fire(url: str, requests: list[tuple[bytes, dict[str, str]]]) -> list[float]:
    """In the clicker process: send every request at once; the response times in seconds."""
    gate = threading.Barrier(len(requests))
    times: list[float] = []
    lock = threading.Lock()

    def click(body: bytes, headers: dict[str, str]) -> None:
        gate.wait()
        answer = FakeSlack.post(url, body, headers)
        if answer.status != 200:
            raise SystemExit(f"click answered {answer.status}: {answer.body!r}")
        with lock:
            times.append(answer.seconds)

    threads = [threading.Thread(target=click, args=r) for r in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times


def burst(rig: ChatRig, incidents: list[int], pool: Any) -> list[float]:
    """Click once per entry of `incidents`, all at once, from another process (as Slack would:
    the clicks do not share the agent's interpreter); wait until each was answered."""
    before = len(rig.slack.ephemeral())
    requests = []
    for i, incident in enumerate(incidents):
        body = rig.slack.action_body(user=APPROVERS[i % 3], action_id=ButtonAction.APPROVE.value,
                                     value=str(incident))
        requests.append((body, rig.slack.signed_headers(body)))
    times: list[float] = pool.apply(fire, (rig.url, requests))
    rig.wait(lambda: len(rig.slack.ephemeral()) >= before + len(incidents), timeout=120)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clicks", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=None, help="default 3 (1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="one round")
    args = parser.parse_args()
    rounds = args.rounds if args.rounds is not None else 1 if args.quick else 3
    with tempfile.TemporaryDirectory() as tmp, FakeSlack(
        users={"U1": "alice", "U2": "bob", "U3": "carol"}, usergroups={"S1": ["U3"]}
    ) as slack:
        rig = start_rig(slack, template(Path(tmp)), Path(tmp))
        pool = multiprocessing.get_context("spawn").Pool(1)
        try:
            warm = rig.open_incident("warm-up")
            burst(rig, [warm], pool)
            results: dict[str, list[float]] = {"distinct incidents": [], "one incident": []}
            for r in range(rounds):
                many = [rig.open_incident(f"job-{r}-{i}") for i in range(args.clicks)]
                results["distinct incidents"] += burst(rig, many, pool)
                one = rig.open_incident(f"one-{r}")
                results["one incident"] += burst(rig, [one] * args.clicks, pool)
                decisions = len(rig.store.get_incident(one).decisions)
                if decisions != 1:
                    raise SystemExit(f"{decisions} decisions on one incident, expected 1")
        finally:
            pool.close()
            pool.join()
            rig.stop()
    print(f"{args.clicks} concurrent signed clicks x {rounds} rounds, time to HTTP response")
    out = Results("slack_clicks", quick=args.quick)
    sizes = {"clicks": args.clicks, "rounds": rounds}
    for name, times in results.items():
        ms = [t * 1000 for t in times]
        out.add(Figure(f"click -> HTTP response, {name}", "ms", statistics.median(ms),
                       p95=percentile(ms, 0.95), p99=percentile(ms, 0.99), target=TARGET_P99_MS,
                       target_on="p99", note=f"max {max(ms):.0f} ms", sizes=sizes))
    out.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
