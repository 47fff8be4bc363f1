"""Benchmark: incident history queries on 100,000 incidents with 1,000,000 timeline events.

Loads the data set into a fresh SQLite file and a throwaway PostgreSQL database (executemany of
pre-serialised rows on SQLite, COPY on PostgreSQL), then times what `zonemedic incidents list --job
NS/NAME` and `zonemedic incidents stats --since 30d` do: the repository call (warm, median and p95
of 30 runs) and the whole command in-process (flag parsing, settings, engine, schema check, query,
rendering; median of 10). Target: each <= 200 ms on both backends. Prints the figures; exits 0.

Figures go to bench/results.json. `--quick`: 5,000 incidents, SQLite only.
Run: .venv/bin/python bench/store_queries.py [--quick] [--incidents N] [--events-per-incident K]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.cli import main as cli_main
from agent.model.incident import IncidentQuery, Verdict
from agent.model.lifecycle import TERMINAL, EventKind, IncidentStatus, fingerprint
from agent.settings import DatabaseSettings
from agent.store.engine import make_engine
from agent.store.migrate import upgrade
from agent.store.repository import open_store
from bench.results import Figure, Results
from tests.support.postgres import available, create_database, drop_database, url_for

NAMESPACES = [f"team-{i:02d}" for i in range(50)]
JOBS_PER_NAMESPACE = 200  # 10,000 distinct jobs
VERDICTS = [Verdict.ZONE_SPLIT_BLOCKED, Verdict.ZONE_SPLIT_DEGRADED, Verdict.POLICY_BLOCKED,
            Verdict.GPU_UTILIZATION_DROP, Verdict.ALERT]
CLOSED = [IncidentStatus.RESOLVED, IncidentStatus.RESOLVED, IncidentStatus.REJECTED,
          IncidentStatus.SUPERSEDED, IncidentStatus.EXPIRED, IncidentStatus.ROLLED_BACK]
OPEN = [IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL, IncidentStatus.SNOOZED]
EVENT_KINDS = [EventKind.REDETECTED, EventKind.EVIDENCE, EventKind.NOTE]

INCIDENT_COLUMNS = (
    "id", "cluster", "job_kind", "job_namespace", "job_name", "job_uid", "verdict", "fingerprint",
    "status", "status_by", "severity", "opened_at", "updated_at", "closed_at", "onset_at",
    "decided_at", "target_zone", "diagnosis", "utilization_before", "utilization_after", "gpus",
    "detections", "estimated_cost",
)
SPLIT = frozenset({Verdict.ZONE_SPLIT_BLOCKED, Verdict.ZONE_SPLIT_DEGRADED})
EVENT_COLUMNS = ("incident_id", "at", "kind", "actor", "detail")


def generate(n_incidents: int, events_per: int, *, now: datetime, seed: int = 7) -> tuple[
    list[tuple[object, ...]], Callable[[], Iterator[tuple[object, ...]]]
]:
    """Incidents opened over the last 365 days (about 8% in the last 30), ~10% still open."""
    rng = random.Random(seed)
    incidents: list[tuple[object, ...]] = []
    for i in range(1, n_incidents + 1):
        ns = rng.choice(NAMESPACES)
        name = f"job-{rng.randrange(JOBS_PER_NAMESPACE):03d}"
        verdict = rng.choice(VERDICTS)
        opened = now - timedelta(seconds=rng.uniform(0, 365 * 86400))
        still_open = rng.random() < 0.1
        status = rng.choice(OPEN) if still_open else rng.choice(CLOSED)
        # Open incidents need distinct fingerprints (one open per job + class): own uid each.
        uid = f"uid-{i}" if still_open else f"uid-{ns}-{name}"
        fp = fingerprint(cluster="prod", kind="PyTorchJob", namespace=ns, name=name, uid=uid,
                         verdict=verdict)
        decided = opened + timedelta(minutes=rng.uniform(1, 120))
        closed = None if still_open else decided + timedelta(minutes=rng.uniform(5, 600))
        before = rng.uniform(20, 50)
        after = rng.uniform(70, 95) if status is IncidentStatus.RESOLVED else None
        diagnosis: dict[str, object] = {
            "job": {"kind": "PyTorchJob", "namespace": ns, "name": name},
            "verdict": verdict.value, "zones": {"zone-a": 3, "zone-b": 1}, "target_zone": "zone-a"}
        egress: float | None = None
        if verdict in SPLIT:  # a split finding carries its egress figure, measured or estimated
            egress = round(rng.uniform(0.5, 50.0), 4)
            diagnosis["waste"] = {
                "egress_usd_per_day": egress, "cross_zone_gb_per_day": egress * 50,
                "egress_source": rng.choice(["measured", "estimated"]),
                "egress_basis": "measured by Beyla over the last 1h: ..."}
        incidents.append((
            i, "prod", "PyTorchJob", ns, name, uid, verdict.value, fp, status.value, "agent",
            "critical", opened, closed or decided, closed,
            opened - timedelta(seconds=rng.uniform(1, 90)), decided, "zone-a",
            orjson.dumps(diagnosis).decode(), before, after, rng.choice([4, 8, 16, 32]),
            events_per, egress,
        ))
    assert all(IncidentStatus(row[8]) in TERMINAL or row[13] is None for row in incidents)

    def events() -> Iterator[tuple[object, ...]]:
        for row in incidents:
            incident_id, opened = row[0], row[11]
            assert isinstance(opened, datetime)
            yield (incident_id, opened, EventKind.DETECTED.value, "detector",
                   '{"verdict": "zone_split_blocked"}')
            for k in range(1, events_per):
                yield (incident_id, opened + timedelta(minutes=5 * k),
                       EVENT_KINDS[k % len(EVENT_KINDS)].value, "detector",
                       '{"utilization_now": 41.5}')

    return incidents, events


def _sqlite_time(value: object) -> object:
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
    return value


def load_sqlite(url: str, *, incidents: list[tuple[object, ...]],
                events: Callable[[], Iterator[tuple[object, ...]]]) -> None:
    engine = make_engine(url)
    upgrade(engine, DatabaseSettings())
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute("BEGIN")
        cur.executemany(
            f"INSERT INTO incidents ({', '.join(INCIDENT_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(INCIDENT_COLUMNS))})",
            ([_sqlite_time(v) for v in row] for row in incidents),
        )
        cur.executemany(
            f"INSERT INTO incident_events ({', '.join(EVENT_COLUMNS)}) VALUES (?, ?, ?, ?, ?)",
            ((r[0], _sqlite_time(r[1]), r[2], r[3], r[4]) for r in events()),
        )
        cur.execute("COMMIT")
        cur.execute("ANALYZE")
        cur.close()
    finally:
        raw.close()
    engine.dispose()


def load_postgres(url: str, *, incidents: list[tuple[object, ...]],
                  events: Callable[[], Iterator[tuple[object, ...]]]) -> None:
    engine = make_engine(url)
    upgrade(engine, DatabaseSettings())
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        with cur.copy(f"COPY incidents ({', '.join(INCIDENT_COLUMNS)}) FROM STDIN") as copy:
            for row in incidents:
                copy.write_row(row)
        with cur.copy(f"COPY incident_events ({', '.join(EVENT_COLUMNS)}) FROM STDIN") as copy:
            for event in events():
                copy.write_row(event)
        cur.execute("SELECT setval(pg_get_serial_sequence('incidents', 'id'), "
                    "(SELECT max(id) FROM incidents))")
        raw.commit()
        raw.autocommit = True
        cur.execute("ANALYZE")
        cur.close()
    finally:
        raw.close()
    engine.dispose()


def timed(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    fn()  # warm
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.95))]


def run_cli(argv: list[str]) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli_main(argv)
    if code != 0:
        raise SystemExit(f"command failed: zonemedic {' '.join(argv)}")


def bench_backend(label: str, url: str, *, incidents: list[tuple[object, ...]],
                  events: Callable[[], Iterator[tuple[object, ...]]], n_events: int,
                  results: Results) -> bool:
    loader = load_sqlite if label == "sqlite" else load_postgres
    start = time.perf_counter()
    loader(url, incidents=incidents, events=events)
    load_s = time.perf_counter() - start
    print(f"[{label}] loaded {len(incidents):,} incidents + {n_events:,} events in {load_s:.1f} s")
    store = open_store(DatabaseSettings(), url=url)
    now = datetime.now(UTC)
    ns, name = str(incidents[len(incidents) // 2][3]), str(incidents[len(incidents) // 2][4])
    job_rows = len(store.list_incidents(IncidentQuery(namespace=ns, name=name)).incidents)
    stats = store.stats(since=now - timedelta(days=30), now=now)
    ok = True
    figures = {
        f"list --job {ns}/{name} ({job_rows} rows), repository": timed(
            lambda: store.list_incidents(IncidentQuery(namespace=ns, name=name)), 30),
        f"stats --since 30d ({stats.total:,} incidents), repository": timed(
            lambda: store.stats(since=now - timedelta(days=30), now=now), 30),
        "list --job, whole command in-process": timed(
            lambda: run_cli(["incidents", "list", "--job", f"{ns}/{name}", "--database", url]), 10),
        "stats --since 30d, whole command in-process": timed(
            lambda: run_cli(["incidents", "stats", "--since", "30d", "--database", url]), 10),
    }
    store.close()
    sizes = {"incidents": len(incidents), "events": n_events}
    results.add(Figure(f"[{label}] bulk load", "s", load_s, sizes=sizes))
    short = ["incidents list --job, repository", "incidents stats --since 30d, repository",
             "incidents list --job, command", "incidents stats --since 30d, command"]
    for label_short, (median, p95) in zip(short, figures.values(), strict=True):
        results.add(Figure(f"[{label}] {label_short}", "ms", median, p95=p95, target=200.0,
                           sizes=sizes))
    for what, (median, p95) in figures.items():
        verdict = "ok" if median <= 200 else "MISSED"
        ok = ok and median <= 200
        print(f"[{label}] {what}: median {median:.1f} ms, p95 {p95:.1f} ms (target <= 200 ms: "
              f"{verdict})")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--incidents", type=int, default=100_000)
    parser.add_argument("--events-per-incident", type=int, default=10)
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--quick", action="store_true", help="5,000 incidents, SQLite only")
    args = parser.parse_args()
    if args.quick:
        args.incidents, args.skip_postgres = 5_000, True
    out = Results("store_queries", quick=args.quick)
    now = datetime.now(UTC)
    start = time.perf_counter()
    incidents, events = generate(args.incidents, args.events_per_incident, now=now)
    n_events = args.incidents * args.events_per_incident
    print(f"generated {len(incidents):,} incidents in {time.perf_counter() - start:.1f} s")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results.append(bench_backend("sqlite", f"sqlite:///{tmp}/bench.db", incidents=incidents,
                                     events=events, n_events=n_events, results=out))
    if args.skip_postgres:
        pass
    elif not available():
        print("[postgres] skipped: no server on 127.0.0.1:5432")
    else:
        name = create_database("zonemedic_bench")
        try:
            results.append(bench_backend("postgres", url_for(name), incidents=incidents,
                                         events=events, n_events=n_events, results=out))
        finally:
            drop_database(name)
    print("all targets met" if all(results) else "some targets MISSED (see above)")
    out.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
