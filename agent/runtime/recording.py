"""Recording findings: one at a time, or a cluster-wide batch's problems `RECORD_BATCH` at a time.

Called by the pipeline (`agent.runtime.pipeline`) and the label-settle wait
(`agent.runtime.settle`) with the findings to record, and by the signals (`agent.runtime.signals`)
with a drop's or an alert's document. Each finding's typed document
(`agent.model.document.IncidentDocument`: the finding, the job's uid, evidence, waste) is built
once here and passed down as it is: to the store (`FindingRecord.of`), to the playbooks' actions
and to what follows the record. A finding of a problem verdict goes to the store
(`record_finding`: one open incident per job, whatever its verdicts; a re-detection adds a
timeline event, and before a decision the incident takes a topology verdict seen) with the latest
utilization evidence and samples (`agent.runtime.evidence`), or `"metrics unavailable"`, and for a
split its waste per day (`agent.runtime.waste`; the egress dollars go to the incident's
`estimated_cost`). A job's uid (with its object's creation time, so that a re-detection fills in
the uid of an incident recorded before the job's object reached the cache) and requested GPUs
come from the cache and the finding. A job found healthy resolves its open incidents. A job whose
open incident is `refused` (its approved fix refused by a guard or the plan) keeps it for the
same problem (re-detections fold in, no new post); a new problem supersedes it first
(`agent.model.lifecycle.refused_redetection`: the job recreated, another verdict class, a fix no
guard refuses now) and opens a new incident.
A remediable finding of a job with no open incident has its plan preview computed before it is
recorded: when the job's last fix was undone (the preview's `reverted`), the finding's reasons
lead with it ("fix reverted by <manager> at <time>: ..."), so the new incident is named by it.

In a cluster-wide batch or a sweep (`OpenIncidents.held`: its problems come first) the problems go
to the store `RECORD_BATCH` at a time (`IncidentStore.record_findings`: multi-row statements in one
transaction), each new incident with its playbooks' follow-up (plan preview, approval request,
outbox messages, the note saying why it is not posted) in the transaction that opens it; a firing
that needs an automatic approval is fired once its incident is recorded. After each record
(`_recorded`): the egress gauges, waiting drop messages, the plan preview (a new incident's, or a
new one for an undecided incident whose verdict or placement changed: a refusal saying why when
the verdict has no fix), the detection latency, and the playbooks fired for a new incident or one
whose verdict moved to another class (`agent.runtime.playbooks`).

What it does not do: diagnose, wait for labels, or decide approvals.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent.model.document import IncidentDocument
from agent.model.finding import SPLIT_VERDICTS, Finding
from agent.model.incident import FindingOutcome, FindingRecord, FollowUp
from agent.model.instance import creation_time
from agent.model.job import JobRef
from agent.model.lifecycle import (
    TOPOLOGY_CLASSES,
    IncidentStatus,
    LifecycleError,
    Redetected,
    refused_redetection,
    verdict_class,
)
from agent.model.proposal import REVERTED
from agent.model.revert import Revert
from agent.model.verdict import Verdict
from agent.playbook.matching import Event, trigger_for_verdict
from agent.remediation.guard import ClearanceKind, GuardInput, clear
from agent.runtime.diagnoser import Diagnoser
from agent.runtime.drops import DropMessages
from agent.runtime.evidence import UtilizationReadings
from agent.runtime.metrics import AgentMetrics
from agent.runtime.open_incidents import ACTOR, OpenIncidents, Order
from agent.runtime.plan_previews import PlanPreviews, Preview, wanted
from agent.runtime.playbooks import PlaybookActions
from agent.runtime.revisit import WaitingRoom
from agent.runtime.waste import SplitWaste
from agent.sources.cache import ClusterCache
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

RECORD_BATCH = 200  # problems of a cluster-wide batch recorded per store transaction


@dataclass
class _Pending:
    """A finding about to be recorded: its document and store record, and the plan preview to
    write with the incident it is expected to open."""

    finding: Finding
    key: JobRef
    document: IncidentDocument
    gpus: int | None
    record: FindingRecord
    preview: Preview | None = None
    previewed: bool = False  # the preview was computed (it may be None: nothing to preview)


def named_revert(finding: Finding, preview: Preview | None) -> Finding:
    """The finding of a job whose last fix was undone, its reasons led by the revert ("fix
    reverted by <manager> at <time>: ..."); else the finding as it is."""
    found = preview.action.payload.get(REVERTED) if preview is not None else None
    if not isinstance(found, dict):
        return finding
    return dataclasses.replace(finding, reasons=(Revert.from_dict(found).sentence(),
                                                 *finding.reasons))  # fmt: skip


def _class_changed(before: Verdict | None, after: Verdict) -> bool:
    """Whether an incident's verdict moved to another verdict class."""
    if before is None or before is after:
        return False
    try:
        return verdict_class(before) is not verdict_class(after)
    except LifecycleError:
        return False


@dataclass(frozen=True)
class RecordingParts:
    """What the recorder writes with and reads from (the pipeline builds them)."""

    store: IncidentStore | None
    cluster: str
    cache: ClusterCache
    metrics: AgentMetrics
    open: OpenIncidents
    evidence: UtilizationReadings
    waste: SplitWaste
    room: WaitingRoom
    drops: DropMessages
    diagnoser: Diagnoser
    actions: PlaybookActions
    previews: PlanPreviews | None


class Recorder:
    """Records findings (and documents) in the store, with what follows each."""

    def __init__(
        self, parts: RecordingParts, *, now: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.p = parts
        self.store = parts.store
        self.previews = parts.previews
        self.actions = parts.actions
        self.now = now
        self.monotonic = monotonic

    def record(self, finding: Finding, *, first_seen: float | None) -> FindingOutcome | None:
        """Record one finding; its outcome (None where no incident was touched)."""
        key = finding.job
        pending = self._prepare(finding, key)
        if pending is None or self.store is None:  # without a store nothing is prepared
            return None
        outcome = self.store.record_finding(pending.record)
        self._log_recorded(key, pending.document, outcome)
        self._recorded(pending, outcome, first_seen=first_seen, written=None)
        return outcome

    def _prepare(self, finding: Finding, key: JobRef) -> _Pending | None:
        """Count the finding and deal with what needs no incident (pending, healthy: resolved);
        else the finding's document and store record, to be recorded."""
        self.p.metrics.findings.labels(verdict=str(finding.verdict)).inc()
        if finding.verdict is Verdict.PENDING:
            return None
        self.p.room.note(key, finding)
        if finding.verdict not in SPLIT_VERDICTS:
            self.p.waste.forget(key)
        if finding.verdict is Verdict.HEALTHY:
            self.p.open.resolve(key, set(TOPOLOGY_CLASSES), reason="re-diagnosis found the job healthy")
            return None
        if self.store is None:
            return None
        self._leave_refused(finding, key)
        preview, previewed = None, False
        if self.previews is not None and wanted(finding) and not self.p.open.of(key):
            # a new incident: its preview first, so a fix undone names the finding
            preview, previewed = self._preview(finding), True
            finding = named_revert(finding, preview)
        metrics = self.p.evidence.of(key)
        waste = self.p.waste.estimate(finding, metrics) if finding.verdict in SPLIT_VERDICTS else None
        document = IncidentDocument.of_finding(finding, uid=self.p.cache.job_uid(key),
                                               metrics=metrics, waste=waste)  # fmt: skip
        gpus = sum(finding.gpus.values()) if finding.gpus else None
        created = creation_time(self.p.cache.job_object(key)) if document.uid else None
        record = FindingRecord.of(document, cluster=self.p.cluster, detected_at=self.now(),
                                  gpus=gpus, utilization_samples=self.p.evidence.samples(key),
                                  job_created_at=created)  # fmt: skip
        return _Pending(finding, key, document, gpus, record, preview, previewed)

    def _leave_refused(self, finding: Finding, key: JobRef) -> None:
        """A re-detection of a job whose open incident is `refused`: the same problem folds into
        that incident (recorded as usual: no new incident, no new post); another problem (the job
        recreated, a verdict of another class, a fix no guard refuses any more) supersedes it,
        so this finding opens a new incident (`agent.model.lifecycle.refused_redetection`)."""
        assert self.store is not None
        for incident in self.p.open.of(key):
            if incident.status is not IncidentStatus.REFUSED:
                continue
            uid = self.p.cache.job_uid(key)
            try:
                fate, why = refused_redetection(
                    current=incident.verdict, seen=finding.verdict,
                    same_job=not (incident.uid and uid and uid != incident.uid),
                    fixable=self._fixable(finding, key),
                )  # fmt: skip
            except LifecycleError:
                continue
            if fate is Redetected.FOLD:
                continue
            result = self.store.transition(
                incident.id, IncidentStatus.REFUSED, IncidentStatus.SUPERSEDED, actor=ACTOR,
                now=self.now(), detail={"reason": why},
            )  # fmt: skip
            log.info("refused incident left for a new problem",
                     extra={"incident": incident.id, "job": str(key), "reason": why,
                            "applied": result.applied})  # fmt: skip
            self.p.open.forget(key, incident.id)

    def _fixable(self, finding: Finding, key: JobRef) -> bool:
        """The finding has a fix (a remediable split with a target zone) that the executor's
        guards would not refuse, judged on the job's cached object and pods, nor the plan (its
        preview from the live objects, when previews are on: no room, Kueue on a group's
        workloads; the API away counts as not fixable, the next re-detection looks again)."""
        if not wanted(finding):
            return False
        obj = self.p.cache.job_object(key)
        clearance = clear(
            GuardInput(namespace=key.namespace, job=str(key),
                       objects=[*([obj] if obj is not None else []), *self.p.cache.pods_of_job(key)],
                       busy=False, started_last_hour=0),
            protected_namespaces=self.p.diagnoser.settings.protected_namespaces, max_per_hour=1,
        )  # fmt: skip
        if clearance.kind is ClearanceKind.REFUSE:
            return False
        if self.previews is None:
            return True
        preview = self._preview(finding)  # the plan, from the live objects: still refused?
        return preview is not None and preview.refusal is None

    def record_all(self, findings: list[Finding], *, first_seen: float | None) -> list[Any]:
        """Record findings in order; the outcomes (None where no incident was touched). While a
        batch holds the open incidents (its problems come first) the problems are recorded
        `RECORD_BATCH` at a time, each new incident with its playbooks' follow-up (plan preview,
        approval request, messages) in the store transaction that opens it
        (`IncidentStore.record_findings`); the rest one at a time."""
        if self.p.open.held is None or self.store is None:
            return [self.record(f, first_seen=first_seen) for f in findings]
        out: list[Any] = []
        chunk: list[_Pending] = []
        for finding in findings:
            key = finding.job
            order = self.p.open.recording_order(finding)
            if order is Order.NO_INCIDENT:  # healthy or pending: no incident to write
                self._flush_chunk(chunk, out, first_seen=first_seen)
                out.append(self.record(finding, first_seen=first_seen))
                continue
            pending = self._prepare(finding, key)
            if pending is None:
                out.append(None)
                continue
            if self.previews is not None and order is Order.NEW and not pending.previewed:
                pending.preview = self._preview(finding)  # written with its new incident
                pending.previewed = True
            chunk.append(pending)
            if len(chunk) >= RECORD_BATCH:
                self._flush_chunk(chunk, out, first_seen=first_seen)
        self._flush_chunk(chunk, out, first_seen=first_seen)
        return out

    def _flush_chunk(self, chunk: list[_Pending], out: list[Any], *,
                     first_seen: float | None) -> None:  # fmt: skip
        if not chunk:
            return
        assert self.store is not None
        written: dict[int, FollowUp | None] = {}

        def follow(i: int, outcome: FindingOutcome) -> FollowUp | None:
            up = self._follow_up(chunk[i], outcome)
            written[i] = up
            return up

        outcomes = self.store.record_findings([p.record for p in chunk], follow=follow)
        for i, (pending, outcome) in enumerate(zip(chunk, outcomes, strict=True)):
            self._log_recorded(pending.key, pending.document, outcome)
            self._recorded(pending, outcome, first_seen=first_seen,
                           written=written.get(i) if outcome.new else None)  # fmt: skip
            out.append(outcome)
        chunk.clear()

    def _follow_up(self, pending: _Pending, outcome: FindingOutcome) -> FollowUp | None:
        """What to write with the incident `pending` opened (no I/O: the store calls this inside
        its transaction); None when its firing is left to `_recorded` (an automatic approval,
        or a preview not computed yet)."""
        finding = pending.finding
        if not pending.previewed and self.previews is not None and wanted(finding):
            return None  # not expected to be new: the preview is computed afterwards
        verdict = str(outcome.incident.verdict)
        trigger = trigger_for_verdict(verdict)
        if trigger is None:
            if pending.preview is None or self.previews is None:
                return None
            return FollowUp(now=self.now(), action=self.previews.draft(pending.preview))
        event = Event(trigger, self.actions.subject(pending.key, verdict, pending.gpus))
        return self.actions.follow_up(event, outcome.incident, pending.document,
                                      preview=pending.preview)  # fmt: skip

    def _recorded(self, pending: _Pending, outcome: FindingOutcome, *, first_seen: float | None,
                  written: FollowUp | None) -> None:  # fmt: skip
        """What follows a recorded finding: egress gauges, waiting drop messages, the plan
        preview, the detection latency, and the playbooks fired for a new incident (unless its
        follow-up, `written`, was recorded with it) or for one that took another class's
        verdict."""
        finding, key, document = pending.finding, pending.key, pending.document
        if document.waste is not None:
            self.p.waste.show(key, document.waste, incident=outcome.incident.id,
                              new=outcome.new)  # fmt: skip
        if key in self.p.drops.pending:
            self.p.drops.flush([key])
        # the incident took another class's verdict (a split became a policy block, a drop
        # became a split): the playbooks of its new verdict fire on it, its one message updated
        reclassed = not outcome.new and _class_changed(outcome.previous_verdict,
                                                       outcome.incident.verdict)  # fmt: skip
        preview: Preview | None = None
        if written is not None:
            self.actions.followed(outcome.incident, written)
            if written.action is not None and pending.preview is not None and self.previews:
                self.previews.recorded(outcome.incident.id, pending.preview)
        elif self.previews is not None:
            if outcome.new:
                preview = pending.preview if pending.previewed else self._preview(finding)
            elif self.previews.stale(outcome.incident, finding):
                preview = self._replan(finding)
        if outcome.new and first_seen is not None:
            self.p.metrics.detection_latency.observe(self.monotonic() - first_seen)
        if document.metrics.ok:
            self.p.evidence.recorded.add(key)
        if written is not None:
            return
        trigger = trigger_for_verdict(str(outcome.incident.verdict))
        if (outcome.new or reclassed) and trigger is not None:
            self.actions.fire(
                Event(trigger, self.actions.subject(key, str(outcome.incident.verdict),
                                                    pending.gpus)),
                outcome.incident,
                document,
                preview=preview,
            )  # fmt: skip
        elif preview is not None and self.previews is not None:
            self.previews.record(outcome.incident.id, preview)

    def _preview(self, finding: Finding) -> Preview | None:
        """The plan preview of a finding (None when there is nothing to preview)."""
        assert self.previews is not None
        return self.previews.compute(finding, mirror_keys=self.p.diagnoser.mirror_keys,
                                     pod_names=self.p.diagnoser.group_pods(finding))  # fmt: skip

    def _replan(self, finding: Finding) -> Preview | None:
        """A new preview for an undecided incident whose verdict or placement changed: the fix
        for what is seen now, or, when there is none (no longer remediable), a refusal saying
        why, so the message never shows a plan for a verdict the incident no longer has."""
        assert self.previews is not None
        if wanted(finding):
            return self._preview(finding)
        return self.previews.refusal(finding)

    def record_document(
        self, document: IncidentDocument, *, detected_at: datetime
    ) -> FindingOutcome | None:
        """Record a document that no diagnosis made (a utilization drop, an alert)."""
        if self.store is None:
            return None
        record = FindingRecord.of(document, cluster=self.p.cluster, detected_at=detected_at)
        outcome = self.store.record_finding(record)
        self._log_recorded(document.job, document, outcome)
        return outcome

    def _log_recorded(
        self, key: JobRef, document: IncidentDocument, outcome: FindingOutcome
    ) -> None:
        log.info(
            "finding recorded",
            extra={
                "job": str(key),
                "verdict": document.verdict.value,
                "incident": outcome.incident.id,
                "new": outcome.new,
            },
        )
