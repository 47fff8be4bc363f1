"""A separate process deciding one incident from several threads (the concurrency test's 2nd replica).

Usage: python -m tests.store.decider URL INCIDENT_ID ACTOR_PREFIX THREADS
Prints "ready", blocks until a line ("go") arrives on stdin, lets THREADS threads approve at once,
then prints one JSON line per thread: {"actor", "applied", "status", "status_by", "winner"}.
"""

from __future__ import annotations

import json
import sys
import threading
from datetime import UTC, datetime

from agent.model.incident import Actor
from agent.model.lifecycle import DecisionOutcome, DecisionSource
from agent.settings import DatabaseSettings
from agent.store.repository import open_store


def main() -> None:
    url, incident_id, prefix, threads = sys.argv[1:5]
    store = open_store(DatabaseSettings(pool_size=int(threads)), url=url)
    store.ping()
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        sys.exit("decider: expected 'go' on stdin")
    results: list[dict[str, object]] = []
    lock = threading.Lock()

    def decide(i: int) -> None:
        actor = Actor(f"{prefix}-{i}", f"{prefix} user {i}", DecisionSource.SLACK)
        r = store.record_decision(int(incident_id), DecisionOutcome.APPROVE, actor=actor,
                                  now=datetime.now(UTC))
        with lock:
            results.append({"actor": actor.id, "applied": r.applied, "status": r.status.value,
                            "status_by": r.status_by,
                            "winner": r.decision.actor_id if r.decision else None})

    workers = [threading.Thread(target=decide, args=(i,)) for i in range(int(threads))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for r in results:
        print(json.dumps(r), flush=True)
    store.close()


if __name__ == "__main__":
    main()
