"""Plan previews: the fix a finding's message and `incidents show` carry before anyone approves.

Who calls it: the pipeline's recorder (`agent.runtime.recording`) when a remediable split
finding opens an incident (the preview is computed before the playbooks fire, and recorded by the firing before
its messages are queued, so the first Slack post carries the diff), and when a re-detection of
an incident still awaiting a decision finds another verdict or placement than the last preview
was computed for: everything the message says about the fix follows the verdict. A verdict with
no fix (no longer remediable: a policy block, no zone with room) after a preview is recorded as a
refusal saying why (`refusal`), so no plan for a verdict the incident no longer has is shown.

How: the watch cache keeps slim objects (no pod templates, CPU/memory requests or non-GPU
allocatable), which the plan and its room check need, so the preview reads the job (a Kueue job's
Workload too: its ClusterQueue's quota is checked on approval, from the re-diagnosis), its pods,
the nodes and the pods bound to the target zone's nodes once from the API through the read-only
`agent.remediation.observe.ClusterReader` (GET and LIST only; nothing is written), plans with the
pure `plan_remediation` and records `agent.remediation.preview_action.preview_action` as a `plan` action
with the `plan_previewed` timeline event. A refusal (no room, Kueue-managed, finished...) is
recorded the same way. The API being away leaves no preview (logged); the next detection of the
incident tries again. The executor never applies a preview: on approval it re-reads, re-plans and
records the plan it executes.

Cost: per new (or moved) incident, one GET of the job, one LIST of its pods, and -- shared by the
previews of one burst (`share_reads`, 5 s) -- one LIST of nodes and one LIST per target-zone node
of the pods bound there. A sweep that opens no incident reads nothing.

A fix undone: when the job's latest resolved incident was resolved by a plan zonemedic executed,
the live objects read for the preview are compared with that plan (`agent.remediation.revert`);
a field no longer as planned makes the preview name the revert ("fix reverted by <manager> at
<time>") and carry it (`reverted`), which holds an automatic approval as a rollback does. Once
such a preview is written, the revert goes on both timelines as a `fix_reverted` event (actor:
the field manager that undid the fix; `agent.model.revert`), once per pair of incidents.

Recording is idempotent per process: the verdict and placement (target zone, pods per zone) of the
latest preview of each incident are remembered, read once from the store after a restart, so a
retried firing or a re-detection with an unchanged verdict and placement records nothing more.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent.model.finding import REMEDIABLE_VERDICTS, Finding
from agent.model.incident import ActionDraft, IncidentQuery, IncidentSummary
from agent.model.job import JobRef
from agent.model.lifecycle import EventKind, IncidentStatus, RemediationActionKind
from agent.model.proposal import REVERTED, latest_preview
from agent.model.revert import Revert
from agent.model.workload import JobKind
from agent.remediation.observe import ClusterReader
from agent.remediation.plan import LiveObjects, Plan, Refusal
from agent.remediation.planner import live_object, plan_remediation
from agent.remediation.preview_action import PreviewAction, preview_action
from agent.remediation.revert import find_revert
from agent.sources.kubeapi import KubeApi, KubeApiError
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

ACTOR = "zonemedic"
# An incident whose fix may still be decided: only these get (new) previews.
UNDECIDED = frozenset(
    {IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL, IncidentStatus.SNOOZED}
)
PlacementKey = tuple[str | None, str | None, tuple[tuple[str, int], ...]]
REASONS_SHOWN = 2  # of the finding's reasons, in a refusal for a verdict with no fix


def placement_key(verdict: str | None, target_zone: str | None, zones: Any) -> PlacementKey:
    """What a preview was computed for: the verdict, the target zone and the pods per zone."""
    pairs = tuple(sorted((str(k), int(v)) for k, v in dict(zones or {}).items()))
    return verdict, target_zone, pairs


def finding_key(finding: Finding) -> PlacementKey:
    return placement_key(finding.verdict.value, finding.target_zone, finding.zones)


def wanted(finding: Finding) -> bool:
    """Only a remediable split with a target zone has a fix to preview."""
    return (finding.verdict in REMEDIABLE_VERDICTS and finding.remediable
            and finding.target_zone is not None)  # fmt: skip


@dataclass(frozen=True)
class Preview:
    """A computed preview waiting to be recorded on its incident."""

    action: PreviewAction
    key: PlacementKey

    @property
    def refusal(self) -> str | None:
        found = self.action.payload.get("refusal")
        return str(found) if found else None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the finding document the playbooks' outbox payloads carry."""
        plan = self.action.payload.get("plan") or {}
        return {"summary": self.action.message, "refusal": self.refusal,
                "diff": plan.get("diff", ""), "target_zone": plan.get("target_zone"),
                "reverted": self.action.payload.get("reverted"),
                "owners": plan.get("owners") or []}  # fmt: skip


class SharedReader(ClusterReader):
    """A `ClusterReader` whose node list and pods-per-node lists are reused for `share_reads`
    seconds: the previews of one burst (a start-up batch, a sweep) read them once."""

    def __init__(self, api: KubeApi, *, timeout: float, share_reads: float,
                 monotonic: Callable[[], float]) -> None:  # fmt: skip
        super().__init__(api, timeout=timeout)
        self.share_reads = share_reads
        self.monotonic = monotonic
        self._memo: dict[str, tuple[float, list[dict[str, Any]]]] = {}

    def _shared(self, key: str, read: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        now = self.monotonic()
        found = self._memo.get(key)
        if found is not None and now - found[0] < self.share_reads:
            return found[1]
        if len(self._memo) > 10_000:
            self._memo.clear()
        value = read()
        self._memo[key] = (now, value)
        return value

    def nodes(self) -> list[dict[str, Any]]:
        return self._shared("nodes", super().nodes)

    def pods_on(self, node_names: Sequence[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for node in node_names:
            out.extend(self._shared(f"pods_on:{node}", self._pods_on_one(node)))
        return out

    def _pods_on_one(self, node: str) -> Callable[[], list[dict[str, Any]]]:
        return lambda: ClusterReader.pods_on(self, [node])


class PlanPreviews:
    def __init__(
        self,
        api: KubeApi,
        store: IncidentStore,
        *,
        now: Callable[[], datetime],
        timeout: float = 10.0,
        share_reads: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
        cluster: str | None = None,
    ) -> None:
        self.reader = SharedReader(api, timeout=timeout, share_reads=share_reads,
                                   monotonic=monotonic)  # fmt: skip
        self.store = store
        self.now = now
        self.cluster = cluster
        self._latest: dict[int, PlacementKey | None] = {}  # incident -> placement previewed

    def compute(
        self, finding: Finding, *, mirror_keys: Sequence[str], pod_names: Sequence[str] = ()
    ) -> Preview | None:
        """Read the live objects and plan; None when there is nothing to preview or the API
        is away (logged)."""
        if not wanted(finding):
            return None
        ref = finding.job
        try:
            job = None if ref.kind is JobKind.GROUP else self.reader.job(ref)
            live = self.reader.live_objects(
                ref, target_zone=finding.target_zone, job=job, pod_names=pod_names
            )
            if finding.kueue is not None:  # its Workload (the quota is checked on approval)
                live = dataclasses.replace(live, queued=self.reader.kueue_workload(ref))
        except KubeApiError as exc:
            log.warning("plan preview skipped: the API did not answer",
                        extra={"job": str(ref), "error": str(exc)})  # fmt: skip
            return None
        result = plan_remediation(finding, live, mirror_keys=mirror_keys)
        action = preview_action(result, zones=finding.zones, target_zone=finding.target_zone,
                                verdict=finding.verdict.value, reverted=self.revert(ref, live))
        return Preview(action, finding_key(finding))

    def revert(self, ref: JobRef, live: LiveObjects) -> Revert | None:
        """The job's last fix undone: its latest resolved incident's executed plan compared with
        the live objects just read (`agent.remediation.revert`); None without such a fix."""
        listing = self.store.list_incidents(IncidentQuery(
            cluster=self.cluster, namespace=ref.namespace, name=ref.name,
            status=IncidentStatus.RESOLVED, limit=5))  # fmt: skip
        resolved = sorted((i for i in listing.incidents if i.kind == ref.kind.value),
                          key=lambda i: (i.closed_at or i.updated_at, i.id))  # fmt: skip
        if not resolved:
            return None
        last = resolved[-1]
        executed = [a for a in self.store.get_incident(last.id).actions
                    if a.kind is RemediationActionKind.PLAN and a.payload.get("preview") is not True
                    and isinstance(a.payload.get("plan"), dict)]  # fmt: skip
        if not executed:
            return None  # resolved without a fix of zonemedic's
        plan = Plan.from_dict(max(executed, key=lambda a: a.id).payload["plan"])
        return find_revert(plan, lambda t: live_object(t, live), incident_id=last.id)

    def refusal(self, finding: Finding) -> Preview:
        """The preview of a finding with no fix: a refusal naming its verdict and why (its first
        reasons), recorded over an earlier preview of another verdict or placement."""
        why = "; ".join(finding.reasons[:REASONS_SHOWN])
        reason = f"the job is now {finding.verdict.value}" + (f": {why}" if why else "")
        action = preview_action(Refusal(finding.job, reason), zones=finding.zones,
                                target_zone=finding.target_zone, verdict=finding.verdict.value)
        return Preview(action, finding_key(finding))

    def stale(self, incident: IncidentSummary, finding: Finding) -> bool:
        """Whether a re-detection calls for a new preview: the incident is undecided, and either
        it has a preview whose verdict or placement differs from the finding's, or it has none
        and the finding is remediable."""
        if incident.status not in UNDECIDED:
            return False
        if incident.id not in self._latest:
            found = latest_preview(self.store.get_incident(incident.id).actions)
            self._latest[incident.id] = (
                placement_key(found.verdict, found.target_zone, found.zones)
                if found is not None else None
            )  # fmt: skip
        latest = self._latest[incident.id]
        if latest is None:
            return wanted(finding)
        return latest != finding_key(finding)

    def draft(self, preview: Preview) -> ActionDraft:
        """The preview as the `plan` action `record` writes, for a store batch to write."""
        action = preview.action
        return ActionDraft(RemediationActionKind.PLAN, payload=action.payload, actor=ACTOR,
                           succeeded=action.succeeded, message=action.message,
                           event=EventKind.PLAN_PREVIEWED)  # fmt: skip

    def recorded(self, incident_id: int, preview: Preview) -> None:
        """The preview was written with its incident (a store batch): remember its placement."""
        self._latest[incident_id] = preview.key
        self._timeline(incident_id, preview)
        log.info("plan preview recorded", extra={"incident": incident_id,
                                                 "refused": preview.refusal is not None})

    def record(self, incident_id: int, preview: Preview) -> bool:
        """Record the preview on the incident unless this placement's is recorded already."""
        if self._latest.get(incident_id) == preview.key:
            return False
        action = preview.action
        self.store.record_action(
            incident_id, RemediationActionKind.PLAN, now=self.now(), actor=ACTOR,
            succeeded=action.succeeded, payload=action.payload, message=action.message,
            event=EventKind.PLAN_PREVIEWED,
        )  # fmt: skip
        self._latest[incident_id] = preview.key
        self._timeline(incident_id, preview)
        log.info("plan preview recorded", extra={"incident": incident_id,
                                                 "refused": preview.refusal is not None})
        return True

    def _timeline(self, incident_id: int, preview: Preview) -> None:
        """A preview naming a revert: the `fix_reverted` event on the re-detection's incident
        (pointing at the fixed one) and on the fixed incident (pointing at the re-detection's),
        each once."""
        found = preview.action.payload.get(REVERTED)
        if not isinstance(found, dict):
            return
        revert = Revert.from_dict(found)
        now = self.now()
        self.store.add_event_once(incident_id, EventKind.FIX_REVERTED, now=now,
                                  actor=revert.manager, detail=revert.event_detail(),
                                  same=("reverted_incident",))  # fmt: skip
        if revert.incident_id and revert.incident_id != incident_id:
            self.store.add_event_once(revert.incident_id, EventKind.FIX_REVERTED, now=now,
                                      actor=revert.manager,
                                      detail=revert.event_detail(redetected_as=incident_id),
                                      same=("redetected_as",))  # fmt: skip
        log.info("fix reverted", extra={"incident": incident_id, "fixed": revert.incident_id,
                                        "by": revert.manager})  # fmt: skip
