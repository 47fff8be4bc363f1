"""The soak's verdict: each guarantee checked against the twin's request audit (the agents'
writes, in order, with time), the store (incidents, decisions, remediation steps, outbox) and the
fake Slack's records (clicks), plus the counts the soak prints.

1. No remediation without a valid approval: every agent write to a training job follows an
   approval of an incident of that job by an approver (or the playbook's `auto` in its
   namespace); none in the protected namespace or on a Kueue-managed job; no decision by a
   non-approver recorded.
2. At most one remediation per approval: per incident at most one `suspended` step; per job
   (uid) no more suspends or resumes (the twin's events) than its approved incidents account for
   (one each, two for one that rolled back after resuming: the restore suspends and resumes); an
   incident recorded without the job's uid counts for the job of its name (counted apart).
3. Never left suspended: no job suspended at the end; no incident left approved, remediating or
   verifying.
4. Nothing lost: every job seen split for SPLIT_SEEN seconds has an incident; no incident an
   approver clicked (HTTP 200) still awaits approval; every message queued before the soak saw
   them all delivered (`queued_before`: the agents go on queueing) delivered, each incident's in
   the order queued.
5. The caches converge: each replica's cache holds as many objects of each resource as the twin.
6. A fault at a remediation's write (tests/soak/faults.py: `record_refused`, `leader_pause`,
   `admission_refused`) ends the remediation it struck as a remediation, never as "all was
   fine": the job's incident remediating then ends resolved, rolled back or failed (superseded
   only when the job was deleted after the fault); one whose write admission refused ends rolled
   back or failed, and a job rolled back (its last incident) carries no zone pin; one that
   resolved (its last incident, the job live) runs unsuspended with the zone pin in place.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agent.model.incident import IncidentDetail, IncidentQuery
from agent.model.lifecycle import (
    DecisionOutcome,
    DecisionSource,
    EventKind,
    IncidentStatus,
    MessageStatus,
    RemediationActionKind,
)
from agent.store.repository import IncidentStore
from agent.twin.faults import WriteRecord
from agent.twin.resources import UnknownResourceError, lookup
from tests.soak.approvers import Click
from tests.soak.faults import Struck
from tests.soak.rig import APPROVERS, NOT_APPROVER
from tests.soak.workload import AUTO, PROTECTED, ZONE, JobRecord

S = IncidentStatus
SPLIT_SEEN = 12.0  # a job split this long (seen by the soak) must have an incident
ACTIVE = {S.APPROVED, S.REMEDIATING, S.VERIFYING}
METRIC = re.compile(r'^zonemedic_cache_objects\{resource="([^"]+)"\} ([0-9.e+]+)$', re.M)


@dataclass
class Report:
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    counts: dict[str, Any] = field(default_factory=dict)

    def violate(self, guarantee: str, what: str) -> None:
        self.violations[guarantee].append(what)

    @property
    def violated(self) -> int:
        return sum(len(v) for v in self.violations.values())

    def lines(self) -> list[str]:
        out = [f"{k}: {v}" for k, v in self.counts.items()]
        out.append(f"guarantees violated: {self.violated}")
        for guarantee, items in sorted(self.violations.items()):
            out += [f"  {guarantee}: {item}" for item in items[:20]]
        return out


def all_incidents(store: IncidentStore) -> list[IncidentDetail]:
    listing = store.list_incidents(IncidentQuery(limit=100_000))
    return [store.get_incident(i.id) for i in listing.incidents]


def valid_approval_at(detail: IncidentDetail) -> datetime | None:
    """When the incident was validly approved (None: never)."""
    for d in sorted(detail.decisions, key=lambda d: d.decided_at):
        if d.outcome is not DecisionOutcome.APPROVE:
            continue
        if d.source is DecisionSource.SLACK and d.actor_id in APPROVERS:
            return d.decided_at
        if d.source is DecisionSource.AUTO and detail.incident.namespace == AUTO:
            return d.decided_at
    return None


def check(
    *,
    store: IncidentStore,
    writes: list[WriteRecord],
    agent_user: str,
    jobs: list[JobRecord],
    split_seen: dict[tuple[str, str], tuple[float, float]],
    clicks: list[Click],
    twin_events: list[dict[str, Any]],
    live_jobs: list[dict[str, Any]],
    caches: dict[str, str],
    twin_counts: dict[str, int],
    struck: Sequence[Struck] = (),
    queued_before: datetime | None = None,
) -> Report:
    report = Report()
    details = all_incidents(store)
    by_job: dict[tuple[str, str], list[IncidentDetail]] = defaultdict(list)
    for d in details:
        by_job[(d.incident.namespace, d.incident.name)].append(d)
    kueue = {(j.namespace, j.name) for j in jobs if j.kueue}

    # 1. no remediation without a valid approval
    job_writes = [w for w in writes if w.user == agent_user and w.group == "kubeflow.org"]
    for w in job_writes:
        key = (w.namespace, w.name)
        what = f"{w.verb} {w.resource} {w.namespace}/{w.name}{' (dry run)' if w.dry_run else ''}"
        if w.namespace == PROTECTED:
            report.violate("1 approval", f"{what} in the protected namespace")
        if key in kueue:
            report.violate("1 approval", f"{what} on a Kueue-managed job")
        approvals = [a for a in (valid_approval_at(d) for d in by_job[key]) if a is not None]
        at = datetime.fromtimestamp(w.at, UTC)
        if not any(a <= at for a in approvals):
            report.violate("1 approval", f"{what} at {at:%H:%M:%S.%f} with no approval before")
    for d in details:
        for decision in d.decisions:
            if decision.actor_id == NOT_APPROVER:
                report.violate("1 approval", f"#{d.incident.id} decision by a non-approver")
        started = any(e.kind is EventKind.REMEDIATION_STARTED for e in d.events)
        if started and valid_approval_at(d) is None:
            report.violate("1 approval", f"#{d.incident.id} remediation started, never approved")

    # 2. at most one remediation per approval (a remediation suspends and resumes the job once;
    # a rollback after the resume suspends and resumes it once more to restore it)
    # an incident recorded before the job's object reached the agent's cache has no uid: it is
    # the job of its namespace and name (the soak never reuses a name), counted as such
    uid_of_name = {(j.namespace, j.name): j.uid for j in jobs}
    name_of_uid = {j.uid: f"{j.namespace}/{j.name}" for j in jobs}
    allowed_of_uid: Counter[str] = Counter()
    incidents_of_uid: dict[str, list[str]] = defaultdict(list)
    without_uid = 0
    for d in details:
        steps = [str(a.payload.get("step")) for a in d.actions]
        if steps.count("suspended") > 1:
            report.violate("2 once", f"#{d.incident.id} suspended {steps.count('suspended')} times")
        uid = d.incident.uid or uid_of_name.get((d.incident.namespace, d.incident.name))
        if valid_approval_at(d) is not None and uid:
            without_uid += 0 if d.incident.uid else 1
            rollback = any(a.kind is RemediationActionKind.ROLLBACK for a in d.actions)
            allowed_of_uid[uid] += 2 if rollback else 1
            incidents_of_uid[uid].append(
                f"#{d.incident.id} {d.incident.status.value} steps {steps}"
                f"{'' if d.incident.uid else ' (recorded without the uid)'}")
    per_uid: dict[str, Counter[str]] = defaultdict(Counter)
    for e in twin_events:
        reason = str(e.get("reason") or "")
        if reason in ("PyTorchJobSuspended", "PyTorchJobResumed"):
            uid = str((e.get("involvedObject") or {}).get("uid") or "")
            per_uid[uid][reason] += int(e.get("count") or 1)
    for uid, seen in per_uid.items():
        for reason, n in seen.items():
            if n > allowed_of_uid[uid]:
                report.violate("2 once", f"job {name_of_uid.get(uid, '?')} ({uid}): {n} x "
                                         f"{reason}, at most "
                                         f"{allowed_of_uid[uid]} for its approved incidents "
                                         f"{incidents_of_uid[uid]}")

    # 3. never left suspended
    for job in live_jobs:
        if (job["spec"].get("runPolicy") or {}).get("suspend"):
            meta = job["metadata"]
            report.violate("3 not suspended", f"{meta['namespace']}/{meta['name']} suspended")
    for d in details:
        if d.incident.status in ACTIVE:
            report.violate("3 not suspended", f"#{d.incident.id} left {d.incident.status.value}")

    # 4. nothing lost
    for key, (first, last) in split_seen.items():
        if last - first >= SPLIT_SEEN and not by_job[key]:
            since = datetime.fromtimestamp(first, UTC)
            report.violate("4 nothing lost", f"{key[0]}/{key[1]} split {last - first:.0f}s "
                                             f"from {since:%H:%M:%S}, no incident")
    decided = {c.incident for c in clicks if c.user in APPROVERS and c.status == 200}
    by_id = {d.incident.id: d for d in details}
    for incident in sorted(decided):
        d = by_id.get(incident)
        if d is None:
            report.violate("4 nothing lost", f"#{incident} clicked but not in the store")
        elif d.incident.status is S.AWAITING_APPROVAL:
            report.violate("4 nothing lost", f"#{incident} approved in Slack, still awaiting")
    undelivered = late = 0
    for d in details:
        ordered = sorted(d.messages, key=lambda m: m.id)
        for m in ordered:
            if m.status is MessageStatus.PENDING and queued_before is not None and (
                    m.created_at >= queued_before):
                late += 1  # queued after every message was seen delivered: not waited for
                continue
            if m.status is not MessageStatus.DELIVERED:
                undelivered += 1
                report.violate("4 nothing lost", f"#{d.incident.id} message {m.id} "
                                                 f"{m.kind.value} {m.status.value} (queued "
                                                 f"{m.created_at:%H:%M:%S}, {m.attempts} "
                                                 f"attempts): {m.last_error}")
        times = [m.delivered_at for m in ordered if m.delivered_at is not None]
        if times != sorted(times):
            report.violate("4 nothing lost", f"#{d.incident.id} messages delivered out of order")

    # 5. the caches converge
    for replica, text in caches.items():
        held = {name: int(float(n)) for name, n in METRIC.findall(text)}
        if not held:
            report.violate("5 cache", f"{replica}: no cache metrics")
        for name, n in sorted(held.items()):
            want = twin_counts.get(name)
            if want is not None and want != n:
                report.violate("5 cache", f"{replica}: {name} {n} cached, {want} in the cluster")

    # 6. a fault at a remediation's write ends that remediation as one
    live = {(j["metadata"]["namespace"], j["metadata"]["name"]): j for j in live_jobs}
    deleted = {(j.namespace, j.name): j.deleted for j in jobs}
    for hit in struck:
        key = (hit.namespace, hit.name)
        what = f"{hit.kind} on {hit.verb} {hit.namespace}/{hit.name}"
        struck_incident = _remediating_at(by_job[key], hit.at)
        if struck_incident is None:
            report.violate("6 struck", f"{what}: no incident of the job was remediating")
            continue
        status, number = struck_incident.incident.status, struck_incident.incident.id
        gone = deleted.get(key)
        allowed = ({S.ROLLED_BACK, S.FAILED} if hit.kind == "admission_refused"
                   else {S.RESOLVED, S.ROLLED_BACK, S.FAILED})
        if status not in allowed and not (status is S.SUPERSEDED and gone is not None
                                          and gone >= hit.at - 1):
            report.violate("6 struck", f"{what}: #{number} ended {status.value}")
            continue
        last = max(by_job[key], key=lambda d: d.incident.id)
        job = live.get(key)
        if job is None or last.incident.id != number:
            continue
        pinned = any(ZONE in ((spec.get("template") or {}).get("spec") or {}).get("nodeSelector", {})
                     for spec in (job["spec"].get("pytorchReplicaSpecs") or {}).values())
        if status is S.ROLLED_BACK and pinned:
            report.violate("6 struck", f"{what}: #{number} rolled back, the zone pin left on")
        if status is S.RESOLVED and (not pinned or (job["spec"].get("runPolicy") or {}).get("suspend")):
            report.violate("6 struck", f"{what}: #{number} resolved, the job "
                                       f"{'suspended' if pinned else 'not pinned to a zone'}")
    report.counts["faults struck"] = dict(Counter(hit.kind for hit in struck))
    report.counts["approved incidents recorded without the job's uid"] = without_uid

    messages = [m for d in details for m in d.messages]
    report.counts.update({
        "jobs": len(jobs),
        "splits": sum(1 for d in details if d.incident.verdict.value.startswith("zone_split")),
        "incidents": len(details),
        "decisions": sum(len(d.decisions) for d in details),
        "remediations": sum(1 for d in details
                            if any(e.kind is EventKind.REMEDIATION_STARTED for e in d.events)),
        "outcomes": dict(Counter(d.incident.status.value for d in details)),
        "ended because": dict(Counter(
            str(next((e.detail.get("reason") for e in reversed(d.events)
                      if e.detail.get("reason")), "?"))[:160]
            for d in details if d.incident.status in (S.FAILED, S.ROLLED_BACK))),
        "messages": len(messages),
        "undelivered": undelivered,
        "pending, queued after the delivery wait": late,
        "clicks": len(clicks),
        "agent writes": len(job_writes),
    })
    return report


def _remediating_at(incidents: list[IncidentDetail], at: float) -> IncidentDetail | None:
    """The job's incident whose remediation had started by `at` and that had not closed before."""
    when = datetime.fromtimestamp(at, UTC)
    started = [d for d in incidents
               if any(e.kind is EventKind.REMEDIATION_STARTED and e.at <= when for e in d.events)
               and (d.incident.closed_at is None or d.incident.closed_at >= when)]
    return max(started, key=lambda d: d.incident.id, default=None)


def twin_counts_for(names: list[str], store: Any) -> dict[str, int]:
    """The twin's object count of each cache resource name (`pods`, `jobs.v1.batch`)."""
    out: dict[str, int] = {}
    for name in names:
        plural, _, rest = name.partition(".")
        version, _, group = rest.partition(".")
        try:
            rt = lookup(plural, group or "", version or None) if rest else lookup(plural, "")
        except UnknownResourceError:
            continue
        out[name] = len(store.list(rt)[0])
    return out
