"""The soak's verdict: each guarantee checked against the twin's request audit (the agents'
writes, in order, with time), the store (incidents, decisions, remediation steps, outbox) and the
fake Slack's records (clicks), plus the counts the soak prints.

1. No remediation without a valid approval: every agent write to a training job, and every
   named write (a Deployment's patch, a worker Job's DELETE) to a generic group's workload,
   follows an approval of an incident of that job or group by an approver (or the playbook's
   `auto` in its namespace), and a live worker Job the agent created (its `recreated-by`
   annotation) names a validly approved incident of its group; none in the protected namespace
   or on a Kueue-managed job or group; no decision by a non-approver recorded.
2. At most one remediation per approval: per incident at most one `suspended` step; per job
   (uid) no more suspends or resumes (the twin's events) than its approved incidents account for
   (one each, two for one that rolled back after resuming: the restore suspends and resumes); an
   incident recorded without the job's uid counts for the job of its name (counted apart); per
   group no more worker Jobs created beyond the workload's own (distinct uids in the Job
   controller's `SuccessfulCreate` events) and no more Deployment template changes (its
   `generation` past 1) than its approved incidents account for (one each, two for one rolled
   back).
3. Never left suspended or half-done: no job suspended at the end; every group the workload did
   not delete still has its coordinator Deployment and its worker Job (never left deleted); no
   incident left approved, remediating or verifying.
4. Nothing lost: every job and group seen split for SPLIT_SEEN seconds has an incident; no incident an
   approver clicked (HTTP 200) still awaits approval; every message queued before the soak saw
   them all delivered (`queued_before`: the agents go on queueing) delivered, each incident's in
   the order queued.
5. The caches converge: each replica's cache holds as many objects of each resource as the twin.
6. A fault at a remediation's write (tests/soak/faults.py: `record_refused`, `leader_pause`,
   `admission_refused`) ends the remediation it struck as a remediation, never as "all was
   fine": the job's incident remediating then ends resolved, rolled back or failed (superseded
   only when the job was deleted after the fault); one whose write admission refused ends rolled
   back or failed, and a job rolled back (its last incident) carries no zone pin; one that
   resolved (its last incident, the job live) runs unsuspended with the zone pin in place. For a
   group's write (its Deployment's or worker Job's; the refused CREATE of its worker Job
   recreated from the plan) the same, but a refused CREATE must end rolled back (the original
   recreated: never failed with the workers gone), and the pin is looked for on the group's
   Deployment and worker Job templates.
7. One incident per problem: no two incidents of one job or group open at the same time (one's
   opening before the other's close); no new incident for a refused, unchanged problem: after an
   approved incident whose fix was refused with nothing written (a guard or the plan: protected
   namespace, Kueue, finished, no room) was closed by that refusal (`failed` with no write step
   and no refused dry run), no later incident of the same job (uid) and verdict class; and a
   `refused` incident is never left for "the fix can be applied now" on a job that stays
   Kueue-labelled or in the protected namespace (the soak never lifts those guards).
"""

from __future__ import annotations

import itertools
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
from tests.soak.workload import (
    AUTO,
    PROTECTED,
    ZONE,
    JobRecord,
    coordinator_name,
    group_of_object,
    workers_name,
)

S = IncidentStatus
SPLIT_SEEN = 12.0  # a job split this long (seen by the soak) must have an incident
ACTIVE = {S.APPROVED, S.REMEDIATING, S.VERIFYING}
RECREATED_BY = "zonemedic.io/recreated-by"  # on a worker Job the agent created: incident/<id>/...
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
    live_workloads: Sequence[dict[str, Any]] = (),
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

    groups = {(j.namespace, j.name): j for j in jobs if j.kind == "Group"}
    workloads = {(str(w.get("kind")), w["metadata"]["namespace"], w["metadata"]["name"]): w
                 for w in live_workloads}

    def key_of(w: WriteRecord) -> tuple[str, str] | None:
        """The job or group an agent write is about (None: neither, or a nameless CREATE)."""
        if w.group == "kubeflow.org":
            return (w.namespace, w.name)
        group = group_of_object(w.name) if w.resource in ("jobs", "deployments") else None
        return (w.namespace, group) if group is not None else None

    # 1. no remediation without a valid approval
    job_writes = [w for w in writes if w.user == agent_user and key_of(w) is not None]
    for w in job_writes:
        key = key_of(w)
        assert key is not None
        what = f"{w.verb} {w.resource} {w.namespace}/{w.name}{' (dry run)' if w.dry_run else ''}"
        if w.namespace == PROTECTED:
            report.violate("1 approval", f"{what} in the protected namespace")
        if key in kueue:
            report.violate("1 approval", f"{what} on a Kueue-managed job or group")
        approvals = [a for a in (valid_approval_at(d) for d in by_job[key]) if a is not None]
        at = datetime.fromtimestamp(w.at, UTC)
        if not any(a <= at for a in approvals):
            report.violate("1 approval", f"{what} at {at:%H:%M:%S.%f} with no approval before")
    for (ns, group), record in sorted(groups.items()):
        worker_job = workloads.get(("Job", ns, workers_name(group)))
        created_for = ((worker_job or {}).get("metadata", {}).get("annotations")
                       or {}).get(RECREATED_BY)
        if created_for is None:
            continue
        for_incident = int(str(created_for).split("/")[1])
        approved = [d for d in by_job[(ns, group)] if d.incident.id == for_incident
                    and valid_approval_at(d) is not None]
        if not approved or ns == PROTECTED or record.kueue:
            report.violate("1 approval", f"Job {ns}/{workers_name(group)} created for "
                                         f"#{for_incident}, not a validly approved incident of "
                                         "its group")
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
    uid_of_name = {(j.namespace, j.name): j.uid for j in jobs if j.kind != "Group"}
    name_of_uid = {j.uid: f"{j.namespace}/{j.name}" for j in jobs if j.kind != "Group"}
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
    created_of_group: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in twin_events:
        involved = e.get("involvedObject") or {}
        owner_group = group_of_object(str(involved.get("name") or ""))
        if e.get("reason") == "SuccessfulCreate" and involved.get("kind") == "Job" and owner_group:
            created_of_group[(str(involved.get("namespace") or ""), owner_group)].add(
                str(involved.get("uid") or ""))
    for group_key, record in sorted(groups.items()):
        writes_allowed = 0
        for d in by_job[group_key]:
            if valid_approval_at(d) is not None:
                rolled = any(a.kind is RemediationActionKind.ROLLBACK for a in d.actions)
                writes_allowed += 2 if rolled else 1
        made = len(created_of_group[group_key] - {record.uid})
        coordinator = workloads.get(("Deployment", group_key[0], coordinator_name(group_key[1])))
        changes = int((coordinator or {}).get("metadata", {}).get("generation") or 1) - 1
        for what, n in (("worker Jobs created", made), ("Deployment template changes", changes)):
            if n > writes_allowed:
                report.violate("2 once", f"group {group_key[0]}/{group_key[1]}: {n} {what}, at "
                                         f"most {writes_allowed} for its approved incidents "
                                         f"{[d.incident.id for d in by_job[group_key]]}")
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
    for (ns, group), record in sorted(groups.items()):
        if record.deleted is not None:
            continue
        for kind, name in (("Deployment", coordinator_name(group)), ("Job", workers_name(group))):
            obj = workloads.get((kind, ns, name))
            if obj is None or obj["metadata"].get("deletionTimestamp"):
                report.violate("3 not suspended", f"group {ns}/{group}: its {kind} {name} "
                                                  f"{'is gone' if obj is None else 'is being deleted'}")
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
        hit_group = group_of_object(hit.name)
        key = (hit.namespace, hit_group or hit.name)
        what = f"{hit.kind} on {hit.verb} {hit.namespace}/{hit.name}"
        struck_incident = _remediating_at(by_job[key], hit.at)
        if struck_incident is None:
            report.violate("6 struck", f"{what}: no incident of the job was remediating")
            continue
        status, number = struck_incident.incident.status, struck_incident.incident.id
        gone = deleted.get(key)
        allowed = ({S.ROLLED_BACK} if hit.kind == "admission_refused" and hit_group is not None
                   else {S.ROLLED_BACK, S.FAILED} if hit.kind == "admission_refused"
                   else {S.RESOLVED, S.ROLLED_BACK, S.FAILED})
        if status not in allowed and not (status is S.SUPERSEDED and gone is not None
                                          and gone >= hit.at - 1):
            report.violate("6 struck", f"{what}: #{number} ended {status.value}")
            continue
        last = max(by_job[key], key=lambda d: d.incident.id)
        if hit_group is not None:
            objs = [workloads.get((kind, key[0], name)) for kind, name in (
                ("Deployment", coordinator_name(hit_group)), ("Job", workers_name(hit_group)))]
            if None in objs or gone is not None or last.incident.id != number:
                continue
            templates = [((o or {}).get("spec") or {}).get("template") or {} for o in objs]
            pinned = any(ZONE in ((t.get("spec") or {}).get("nodeSelector") or {})
                         for t in templates)
            if status is S.ROLLED_BACK and pinned:
                report.violate("6 struck", f"{what}: #{number} rolled back, a zone pin left on")
            if status is S.RESOLVED and not pinned:
                report.violate("6 struck", f"{what}: #{number} resolved, nothing pinned to a zone")
            continue
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
    # 7. one incident per problem
    for job_key, incidents in sorted(by_job.items()):
        by_opening = sorted(incidents, key=lambda d: d.incident.opened_at)
        for earlier, later in itertools.pairwise(by_opening):
            closed = earlier.incident.closed_at
            if closed is None or closed > later.incident.opened_at:
                report.violate("7 one incident", f"{job_key[0]}/{job_key[1]}: #{later.incident.id}"
                                                 f" opened {later.incident.opened_at:%H:%M:%S} "
                                                 f"while #{earlier.incident.id} was open")
    guarded = {(j.namespace, j.name) for j in jobs if j.kueue or j.namespace == PROTECTED}
    for job_key, incidents in sorted(by_job.items()):
        for what in refused_unchanged(incidents, guarded=job_key in guarded):
            report.violate("7 one incident", f"{job_key[0]}/{job_key[1]}: {what}")
    report.counts["faults struck"] = dict(Counter(hit.kind for hit in struck))
    report.counts["faults struck on groups"] = dict(Counter(
        hit.kind for hit in struck if group_of_object(hit.name) is not None))
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
            for d in details if d.incident.status in (S.FAILED, S.ROLLED_BACK, S.REFUSED))),
        "messages": len(messages),
        "undelivered": undelivered,
        "pending, queued after the delivery wait": late,
        "clicks": len(clicks),
        "agent writes": len(job_writes),
        "groups": len(groups),
        "group remediations": dict(Counter(
            d.incident.status.value for d in details if d.incident.kind == "Group"
            and any(e.kind is EventKind.REMEDIATION_STARTED for e in d.events))),
        "remediations by kind": dict(Counter(
            d.incident.kind for d in details
            if any(e.kind is EventKind.REMEDIATION_STARTED for e in d.events))),
    })
    return report


# remediation steps that write to the cluster (their intent or their record)
WRITE_STEPS = frozenset({
    "suspending", "suspended", "patching", "patched", "resumed", "rolling_out", "rolled_out",
    "job_deleting", "job_deleted", "job_created", "restoring", "rolled_back",
    # Kueue's path and the rollback's own steps, each recorded after its write
    "deactivating", "deactivated", "annotating", "annotated", "renewing", "renewed", "requeuing",
    "rollback_reactivated", "rollback_deactivated", "rollback_restored", "rollback_renewed",
    "rollback_requeued",
})  # fmt: skip
NOW_FIXABLE = "the fix can be applied now"  # why a refused incident is left for a new problem


def closed_by_a_refusal(detail: IncidentDetail) -> bool:
    """An approved incident that ended `failed` with no write recorded (no remediation step that
    writes, nor the intent of one) and no dry run refused by the API server: a guard or the plan
    refused its fix, and the refusal closed it."""
    if detail.incident.status is not S.FAILED or valid_approval_at(detail) is None:
        return False
    for action in detail.actions:
        step = str(action.payload.get("step") or "")
        if step in WRITE_STEPS or (step == "dry_run" and action.succeeded is False):
            return False
    return True


def verdict_class_of(detail: IncidentDetail) -> str:
    value = detail.incident.verdict.value
    return "zone_split" if value.startswith("zone_split") else value


def same_problem(earlier: IncidentDetail, later: IncidentDetail) -> bool:
    """The same job (its uid, when both know it) and the same verdict class."""
    a, b = earlier.incident.uid, later.incident.uid
    return (not a or not b or a == b) and verdict_class_of(earlier) == verdict_class_of(later)


def refused_unchanged(incidents: list[IncidentDetail], *, guarded: bool) -> list[str]:
    """The violations of "no new incident for a refused, unchanged problem" among one job's
    incidents; `guarded`: the job stays Kueue-labelled or in the protected namespace."""
    out: list[str] = []
    by_opening = sorted(incidents, key=lambda d: d.incident.opened_at)
    for i, earlier in enumerate(by_opening):
        if closed_by_a_refusal(earlier):
            closed = earlier.incident.closed_at
            for later in by_opening[i + 1:]:
                if closed is not None and later.incident.opened_at >= closed and same_problem(
                        earlier, later):
                    out.append(f"#{later.incident.id} opened {later.incident.opened_at:%H:%M:%S}"
                               f" after #{earlier.incident.id}'s fix was refused "
                               f"({earlier.incident.status.value}), the problem unchanged")
                    break
        left = [e for e in earlier.events if e.kind is EventKind.SUPERSEDED
                and NOW_FIXABLE in str(e.detail.get("reason") or "")]
        if guarded and left and any(e.kind is EventKind.REFUSED for e in earlier.events):
            out.append(f"#{earlier.incident.id} refused, then left for a new incident as if its "
                       "guard no longer held")
    return out


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
