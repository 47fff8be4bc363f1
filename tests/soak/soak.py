"""The soak itself: `run_soak(tmp_path, seconds=..., seed=...)` starts the rig (twin, private
PostgreSQL, Prometheus, fake Slack, two `zonemedic run` replicas), then for `seconds` changes the
workload, clicks like people do and injects faults, each at a bounded rate and from one seeded
RNG (the seed is printed first: a failing run can be replayed, up to thread timing). Then it heals
every fault, lets the agents settle (bounded), and checks the guarantees (guarantees.py); it prints
the counts and returns the report.

Rates: a workload change every 0.3-1 s; a fault every 2-5 s (a leader SIGKILL at most every 15 s,
a database restart at most every 10 s); clicks as findings are posted.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent.errors import ZonemedicError
from agent.model.incident import IncidentQuery
from agent.model.lifecycle import IncidentStatus, MessageStatus
from agent.settings import DatabaseSettings
from agent.store.repository import IncidentStore, open_store
from agent.twin.resources import lookup
from tests.soak.approvers import APPROVE, Approvers
from tests.soak.faults import Faults
from tests.soak.guarantees import ACTIVE, Report, check, twin_counts_for
from tests.soak.rig import APPROVERS, CHANNEL, Rig, running_rig
from tests.soak.workload import (
    BATCH_JOBS,
    DEPLOYMENTS,
    GROUP_LABEL,
    GROUPS,
    PYTORCHJOBS,
    ZONE,
    JobRecord,
    Workload,
    group_of_object,
)

PODS = lookup("pods")
NODES = lookup("nodes")
EVENTS = lookup("events")
JOB_NAME = "training.kubeflow.org/job-name"
DELIVERY_WAIT = 60.0  # seconds for messages queued after the quiet moment to be delivered
QUEUED_MARGIN = timedelta(seconds=2)  # a message queued this close to a read may be missed by it


class SplitObserver:
    """Samples the twin: for each job and group, its longest run of samples with every pod running
    (its three: a job's master and two workers, a group's coordinator and two workers) and the
    pods in more than one zone (first, last time seen)."""

    def __init__(self, rig: Rig, workload: Workload) -> None:
        self.rig = rig
        self.workload = workload
        self.streak: dict[tuple[str, str], float] = {}
        self.longest: dict[tuple[str, str], tuple[float, float]] = {}

    def sample(self) -> None:
        store = self.rig.cluster.store
        zones = {n["metadata"]["name"]: n["metadata"]["labels"].get(ZONE)
                 for n in store.list(NODES)[0]}
        now = time.time()
        for job in self.workload.live():
            key = (job.namespace, job.name)
            label = GROUP_LABEL if job.kind == "Group" else JOB_NAME
            pods = store.list(PODS, namespace=job.namespace,
                              label_selector=f"{label}={job.name}")[0]
            running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"
                       and not p["metadata"].get("deletionTimestamp")]
            split = (len(running) == 3 and len(running) == len(pods)
                     and len({zones.get(p["spec"].get("nodeName")) for p in running}) > 1)
            if not split:
                self.streak.pop(key, None)
                continue
            start = self.streak.setdefault(key, now)
            first, last = self.longest.get(key, (start, start))
            if now - start >= last - first:
                self.longest[key] = (start, now)


def _every(seconds: float, last: float) -> bool:
    return time.monotonic() - last >= seconds


def run_soak(tmp_path: Path, *, seconds: float, seed: int, settle: float = 120.0,
             out: Callable[[str], Any] = print) -> Report:
    out(f"soak: seed {seed}, {seconds:.0f} s of workload changes, clicks and faults")
    rng = random.Random(seed)
    with running_rig(tmp_path, groups=GROUPS) as rig:
        workload, faults, store, approvers, observer = _parts(rig, rng)
        stop = threading.Event()
        fault_errors: list[BaseException] = []

        def inject() -> None:
            while not stop.wait(faults.rng.uniform(2, 5)):
                try:
                    faults.inject()
                except BaseException as exc:  # a fault that cannot be injected fails the soak
                    fault_errors.append(exc)
                    return

        injector = threading.Thread(target=inject, name="soak-faults", daemon=True)
        injector.start()
        try:
            end = time.monotonic() + seconds
            marks = {"change": 0.0, "look": 0.0, "sample": 0.0}
            change_every = 0.5
            while time.monotonic() < end and not fault_errors:
                if _every(change_every, marks["change"]):
                    workload.step()
                    marks["change"] = time.monotonic()
                    change_every = workload.rng.uniform(0.3, 1.0)
                if _every(0.3, marks["look"]):
                    approvers.look()
                    marks["look"] = time.monotonic()
                if _every(1.0, marks["sample"]):
                    observer.sample()
                    marks["sample"] = time.monotonic()
                time.sleep(0.05)
        finally:
            stop.set()
            injector.join(60)
        if fault_errors:
            raise fault_errors[0]
        faults.heal()
        workload.calm()
        out(f"soak: changes over ({workload.counts}); faults {dict(faults.log.counts)}; settling")
        return _settled_report(tmp_path, rig, store=store, workload=workload, faults=faults,
                               approvers=approvers, observer=observer, settle=settle, out=out)


def run_quiet(tmp_path: Path, *, settle: float = 120.0,
              out: Callable[[str], Any] = print) -> Report:
    """The soak's rig and checks without the soak: no workload changes and no faults. The seed
    job's split is detected and posted, one approver approves it by one click (no random
    behaviour), and it is remediated; then the run settles and is checked as a soak is."""
    out("soak (quiet): the seed job approved by one click; no workload changes, no faults")
    with running_rig(tmp_path, groups=GROUPS) as rig:
        workload, faults, store, approvers, observer = _parts(rig, random.Random(0))
        deadline = time.monotonic() + settle
        incident = None
        while incident is None:
            assert time.monotonic() < deadline, "the seed job's finding was not posted"
            observer.sample()
            incident = next((int(block["elements"][0]["value"])
                             for message in rig.slack.messages()
                             if message.thread_ts is None and message.channel == CHANNEL
                             for block in message.blocks if block.get("type") == "actions"), None)
            time.sleep(0.2)
        approvers.seen.add(incident)  # clicked here, once: no random behaviour planned for it
        click = approvers.click(APPROVERS[0], APPROVE, incident)
        assert click.status == 200, click
        return _settled_report(tmp_path, rig, store=store, workload=workload, faults=faults,
                               approvers=approvers, observer=observer,
                               settle=deadline - time.monotonic(), out=out)


def _parts(rig: Rig, rng: random.Random,
           ) -> tuple[Workload, Faults, IncidentStore, Approvers, SplitObserver]:
    """The soak's workload (its namespaces and the seed job recorded), faults (none injected
    yet), the store it reads, its approvers and its split observer, each with its own RNG drawn
    from `rng`."""
    workload = Workload(rig.cluster, random.Random(rng.random()))
    workload.setup()
    seed_job = rig.cluster.store.get(PYTORCHJOBS, "llm-finetune", namespace="ml")
    workload.jobs.append(JobRecord("ml", "llm-finetune", seed_job["metadata"]["uid"],
                                   time.time(), False))
    faults = Faults(rig, random.Random(rng.random()))
    store = open_store(DatabaseSettings(connect_timeout=timedelta(seconds=2),
                                        write_retry=timedelta(seconds=2)), url=rig.pg.url)
    approvers = Approvers(rig, random.Random(rng.random()), store)
    return workload, faults, store, approvers, SplitObserver(rig, workload)


def _settled_report(tmp_path: Path, rig: Rig, *, store: IncidentStore, workload: Workload,
                    faults: Faults, approvers: Approvers, observer: SplitObserver,
                    settle: float, out: Callable[[str], Any]) -> Report:
    """Settle (bounded), wait for the deliveries, check every guarantee, print and return the
    report (the evidence written beside the run when one is violated)."""
    settled = _settle(rig, store, approvers, observer, deadline=time.monotonic() + settle)
    out(f"soak: {'settled' if settled else 'NOT settled'}")
    caches, twin_counts = _caches(rig)
    # the agents keep working after the quiet moment (a re-detection queues updates, a job
    # found again opens an incident): what they queued since gets its own bounded wait, so
    # a message still pending at the check is one the deliverer did not deliver in time
    delivered_by = _delivered(store, deadline=time.monotonic() + DELIVERY_WAIT)
    report = check(
        store=store,
        writes=rig.access.server.accounting.writes(),
        agent_user=rig.access.user.name,
        jobs=workload.jobs,
        split_seen=observer.longest,
        clicks=approvers.clicks,
        twin_events=rig.cluster.store.list(EVENTS)[0],
        live_jobs=rig.cluster.store.list(PYTORCHJOBS)[0],
        live_workloads=[*rig.cluster.store.list(DEPLOYMENTS)[0],
                        *rig.cluster.store.list(BATCH_JOBS)[0]],
        caches=caches,
        twin_counts=twin_counts,
        struck=faults.struck,
        queued_before=delivered_by,
    )
    report.counts["faults injected"] = sum(faults.log.counts.values())
    report.counts["faults"] = dict(faults.log.counts)
    report.counts["workload"] = vars(workload.counts)
    report.counts["approver retries"] = approvers.retried
    report.counts["slack posts"] = len(rig.slack.calls("chat.postMessage", ok_only=True))
    report.counts["findings posted twice"] = _posted_twice(rig)
    report.counts["replicas started"] = len(rig.replicas) + len(rig.retired)
    report.counts["leases renewed late (new terms)"] = sum(
        b"renewed after the renew deadline" in raw
        for replica in [*rig.retired, *rig.replicas] for raw in replica.raw)
    for line in report.lines():
        out(f"soak: {line}")
    _write_logs(tmp_path, rig, workload, faults, observer)
    if report.violated:
        evidence = _evidence(tmp_path, report, rig, workload, faults, store=store)
        for line in evidence.read_text().splitlines()[:400]:
            out(f"soak evidence: {line[:600]}")
    store.close()
    return report


def _evidence(tmp_path: Path, report: Report, rig: Rig, workload: Workload,
              faults: Faults, *, store: Any) -> Path:
    """What a violated guarantee needs to be understood: the violations, the workload's and the
    faults' timelines, the twin's write log and the incidents (timeline and remediation steps)
    of the jobs the violations name, every agent error, every agent log line that names such a
    job, and every agent line (any level) within 30 s before to 5 s after the violation windows
    the report gives (`HH:MM:SS` ... `Ns`), replica by replica (their whole logs are beside it,
    `_write_logs`)."""
    named = set(re.findall(r"job-\d+|grp-\d+|llm-finetune", "\n".join(report.lines())))
    windows = [(start - 30, start + float(length) + 5) for start, length in (
        (_clock(m.group(2)), m.group(1)) for m in re.finditer(
            r"split (\d+)s from (\d\d:\d\d:\d\d)", "\n".join(report.lines())))]
    lines = ["== violations", *report.lines(), "== workload", *workload.log,
             "== faults", *faults.log.lines, "== writes to those jobs (as they arrived)"]
    lines += [f"{time.strftime('%H:%M:%S', time.gmtime(w.at))}.{int(w.at % 1 * 1000):03d} "
              f"{w.user} {w.verb} {w.resource} {w.namespace}/{w.name}"
              f"{' (dry run)' if w.dry_run else ''}"
              for w in rig.access.server.accounting.writes()
              if w.name in named or group_of_object(w.name) in named]
    lines.append("== incidents of those jobs")
    lines += _incident_lines(store, named)
    lines.append("== agent log lines naming those jobs or in their window")
    for replica in [*rig.retired, *rig.replicas]:
        texts = [raw.decode("utf-8", "replace").rstrip() for raw in replica.raw]
        for text in texts:
            stamp = re.search(r'"time": ?"[^"]*T(\d\d:\d\d:\d\d)', text)
            at = _clock(stamp.group(1)) if stamp else None
            if '"level": "error"' in text or '"level":"error"' in text or any(
                    re.search(rf"\b{name}\b", text) for name in named) or (
                    at is not None and any(a <= at <= b for a, b in windows)):
                lines.append(f"[{replica.proc.pid}] {text}")
    path = tmp_path / "soak-evidence.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _write_logs(tmp_path: Path, rig: Rig, workload: Workload, faults: Faults,
                observer: SplitObserver) -> None:
    """Every agent's whole log (`agent-<pid>.log`), the workload's and the faults' timelines and
    each job's longest split as the soak saw it (`splits.log`: start, seconds) beside the run,
    violated or not: a clean run's detection latencies are measured from them."""
    (tmp_path / "workload.log").write_text("\n".join(workload.log) + "\n")
    (tmp_path / "faults.log").write_text("\n".join(faults.log.lines) + "\n")
    (tmp_path / "splits.log").write_text("".join(
        f"{ns}/{name} {time.strftime('%H:%M:%S', time.gmtime(first))}.{int(first % 1 * 1000):03d}"
        f" {last - first:.1f}\n" for (ns, name), (first, last) in sorted(observer.longest.items())))
    for replica in [*rig.retired, *rig.replicas]:
        texts = [raw.decode("utf-8", "replace").rstrip() for raw in replica.raw]
        (tmp_path / f"agent-{replica.proc.pid}.log").write_text("\n".join(texts) + "\n")


def _incident_lines(store: Any, named: set[str]) -> list[str]:
    """Each incident of a job in `named`: its status, then its timeline and remediation steps
    in time order."""
    out: list[str] = []
    try:
        listing = store.list_incidents(IncidentQuery(limit=100_000)).incidents
        for summary in listing:
            if summary.name not in named:
                continue
            d = store.get_incident(summary.id)
            out.append(f"#{summary.id} {summary.namespace}/{summary.name} "
                       f"{summary.status.value} uid {summary.uid}")
            rows = [(e.at, f"event {e.kind.value} by {e.actor}: {dict(e.detail)}") for e in d.events]
            rows += [(a.at, f"action {a.kind.value} {a.payload.get('step')} succeeded="
                            f"{a.succeeded}: {a.message}") for a in d.actions]
            out += [f"  {at:%H:%M:%S.%f} {text}"[:600] for at, text in sorted(rows, key=lambda r: r[0])]
    except ZonemedicError as exc:
        out.append(f"(the store could not be read: {exc})")
    return out


def _clock(hms: str) -> float:
    """Seconds since midnight of an `HH:MM:SS` time (the soak's logs and the report use UTC)."""
    h, m, s = (int(part) for part in hms.split(":"))
    return float(h * 3600 + m * 60 + s)


def _posted_twice(rig: Rig) -> int:
    """Findings whose message with buttons is in the channel more than once (at-least-once
    delivery: a deliverer killed between Slack's answer and recording it posts again)."""
    seen: dict[str, int] = {}
    for message in rig.slack.messages():
        if message.thread_ts is None:
            for block in message.blocks:
                if block.get("type") == "actions":
                    value = str(block["elements"][0]["value"])
                    seen[value] = seen.get(value, 0) + 1
    return sum(1 for n in seen.values() if n > 1)


def _caches(rig: Rig, *, wait: float = 15.0) -> tuple[dict[str, str], dict[str, int]]:
    """Each live replica's /metrics and the twin's counts of the resources they cache, taken
    again (for up to `wait` s) while they differ: the twin's controllers still move."""
    deadline = time.monotonic() + wait
    while True:
        caches = {r.url: rig.metrics(r) for r in rig.live()}
        held = [(line.split('"')[1], int(float(line.rsplit(" ", 1)[1])))
                for text in caches.values() for line in text.splitlines()
                if line.startswith("zonemedic_cache_objects{")]
        counts = twin_counts_for(sorted({name for name, _ in held}), rig.cluster.store)
        if all(counts.get(name, n) == n for name, n in held) or time.monotonic() > deadline:
            return caches, counts
        time.sleep(0.5)


def _settle(rig: Rig, store: Any, approvers: Approvers, observer: SplitObserver, *,
            deadline: float) -> bool:
    """Keep clicking and observing until nothing is in flight and the caches match the twin."""
    last_check = 0.0
    while time.monotonic() < deadline:
        approvers.look()
        observer.sample()
        if _every(2.0, last_check):
            last_check = time.monotonic()
            if _quiet(rig, store, approvers):
                return True
        time.sleep(0.3)
    return False


def _delivered(store: Any, *, deadline: float) -> datetime | None:
    """Wait (until `deadline`) for every queued message to be delivered (or dead); the moment
    (less `QUEUED_MARGIN`, for a message written as the read began) before which every queued
    message was seen delivered, or None when that moment did not come. The agents go on queueing
    (a metrics refresh attaches evidence, a re-detection updates a post): a message queued after
    it had less time to be delivered than the check gives, so the check leaves it out."""
    while time.monotonic() < deadline:
        began = datetime.now(UTC) - QUEUED_MARGIN
        try:
            listing = store.list_incidents(IncidentQuery(limit=100_000)).incidents
            if all(m.status is not MessageStatus.PENDING
                   for incident in listing for m in store.get_incident(incident.id).messages):
                return began
        except ZonemedicError:
            pass
        time.sleep(1.0)
    return None


def _quiet(rig: Rig, store: Any, approvers: Approvers) -> bool:
    try:
        listing = store.list_incidents(IncidentQuery(limit=100_000)).incidents
        if any(i.status in ACTIVE for i in listing):
            return False
        clicked = {c.incident for c in approvers.clicks if c.user in APPROVERS}
        if any(i.id in clicked and i.status is IncidentStatus.AWAITING_APPROVAL for i in listing):
            return False
        for incident in listing:
            if any(m.delivered_at is None for m in store.get_incident(incident.id).messages):
                return False
    except ZonemedicError:
        return False
    caches, counts = _caches(rig, wait=0)
    return all(counts.get(line.split('"')[1], -1) in (-1, int(float(line.rsplit(" ", 1)[1])))
               for text in caches.values() for line in text.splitlines()
               if line.startswith("zonemedic_cache_objects{"))
