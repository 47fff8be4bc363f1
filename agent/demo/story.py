"""The demo's story, narrated: a split training job found, posted, approved, fixed and measured.

Who calls it: `agent.demo.command` (`zonemedic demo`). `tell` enters the `Stage` (twin,
Prometheus, fake Slack, the agent) and walks the story, waiting on each step with a deadline and
showing it on the `Narration` checklist while every message the agent sends to Slack is printed as
a person would read it (`agent.demo.chatview`):

1. pods placed: the scenario's workloads are created; the twin's scheduler places the coordinator
   in one zone and the GPU workers in the other (the pods per zone are `zones_before`);
2. split detected: the agent records an incident (`detected_after_s`: from the last pod bound to
   the incident stored);
3. finding posted: the agent's message reaches Slack with Approve / Reject / Snooze;
   cross-zone egress: the finding's egress figure, measured by Beyla (the twin exports Beyla's
   counters from its traffic model; the agent's message is updated once it is measured), or the
   estimate, labelled as such, when nothing was measured in time;
4. approval: once the message shows the job's measured utilization (a Kubeflow job with
   Prometheus; waited for a few seconds at most), the demo approver clicks Approve, a signed
   request from the fake Slack to the agent's /slack/events (`interactive`: the person at the
   terminal answers, and the click follows);
5. the fix: the remediation's steps (suspend and resume, or the Deployment's rollout) as the agent
   records them;
6. pods co-located: every pod in one zone (`zones_after`);
7. GPU utilization before -> after, measured by the demo in Prometheus (the mean of the job's GPUs
   while split, and once the co-located job settled);
8. incident resolved (with `--gitops`, the lab deployed from Git: the first fix is approved
   automatically, and once resolved the sequel of `agent.demo.gitops_revert` follows: the sync
   that undoes half of it, the revert named, the automatic approval held, the kustomize patch
   posted); after a rejection or a snooze, steps 5-8 are skipped once the decision's
   thread reply and the message showing it have been shown.
Each wait looks at its condition (read from the stage by `agent.demo.lookout`) before printing
what reached Slack meanwhile, so the checklist reads in the story's order (pods placed, then the
post) whatever the timing. The chart of the job's GPU utilization over the story is written as a
PNG (`chart`), titled by how the story ended.
Without Prometheus the story runs without utilization and chart, and says so.

What it does not do: touch the cluster or the store itself; the agent does everything, the demo
only watches, clicks and measures.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.text import Text

from agent.chatops.blocks import ButtonAction
from agent.chatops.chart import utilization_png
from agent.demo.chatview import ChatView
from agent.demo.gitops_revert import STEPS as GITOPS_STEPS
from agent.demo.gitops_revert import auto_approved, tell_revert
from agent.demo.lookout import Lookout
from agent.demo.narration import Narration
from agent.demo.stage import APPROVER, APPROVER_NAME, Stage, Target
from agent.errors import ZonemedicError
from agent.model.incident import IncidentSummary
from agent.model.lifecycle import IncidentStatus
from agent.model.stored import StoredWaste
from agent.model.verdict import Verdict
from agent.model.waste import EgressBasis
from agent.model.workload import JOBSET, TRAINJOB

T = TypeVar("T")
S = IncidentStatus
ENDED = frozenset({S.RESOLVED, S.FAILED, S.ROLLED_BACK, S.REJECTED, S.EXPIRED, S.SNOOZED,
                   S.SUPERSEDED})
DECLINED = {S.REJECTED: "Rejected", S.SNOOZED: "Snoozed"}  # decisions that leave the job split
# the fix applied: suspended with the patch, a rollout, a Job deleted; a Kueue job: annotated while
# Kueue holds it (its Workload deactivated)
APPLIED_STEPS = frozenset({"suspended", "rolled_out", "job_deleted", "annotated"})
KUEUE_STEPS = frozenset({"deactivated"})
RESTARTED_STEPS = frozenset({"resumed"})  # a group: every workload moved
# kinds suspended first and patched once their pods are gone (the JobSet refuses the templates'
# change before)
SUSPEND_FIRST = frozenset({TRAINJOB.kind.value, JOBSET.kind.value})
SETTLE_SAMPLES = 3
SETTLE_SPREAD = 5.0  # percentage points between the settled samples
MIN_SAMPLES = 5  # scrapes looked at before and after the fix (a chart a person can read)
EGRESS_PATIENCE = 15.0  # seconds to wait for the finding's measured egress
READING_SECONDS = 3.0  # the demo approver reads the message before clicking (the story's pace)


class DemoError(ZonemedicError):
    """A step of the story did not happen in time (the message names it)."""


Answer = Callable[[IncidentSummary], ButtonAction]


@dataclass
class Summary:
    """What `--json` prints (utilization in percent; None without metrics)."""

    scenario: str
    job: str
    detected_after_s: float | None = None
    utilization_before: float | None = None
    utilization_after: float | None = None
    incident_id: int | None = None
    incident_status: str | None = None
    verdict: str | None = None  # the incident's latest verdict
    decided_by: str | None = None
    zones_before: dict[str, int] = field(default_factory=dict)
    zones_after: dict[str, int] = field(default_factory=dict)
    chart: str | None = None
    metrics: bool = False
    egress_source: str | None = None  # measured, estimated or unknown (the finding's basis)
    egress_measured_by: str | None = None  # beyla, when measured
    egress_gb_per_day: float | None = None
    egress_usd_per_day: float | None = None
    slack_messages: int = 0
    duration_s: float = 0.0
    # --gitops: the re-detection after the sync undid the fix (`agent.demo.gitops_revert`)
    redetected_incident_id: int | None = None
    reverted_by: str | None = None
    redetected_status: str | None = None
    handover_posted: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in vars(self).items()}


def zones_text(zones: Mapping[str, int]) -> str:
    return ", ".join(f"{zone} ×{count}" for zone, count in sorted(zones.items()))


class Story:
    def __init__(self, stage: Stage, narration: Narration, *, answer: Answer | None,
                 chart_path: Path, timeout_scale: float = 1.0) -> None:
        self.stage = stage
        self.narration = narration
        self.answer = answer
        self.chart_path = chart_path
        self.scale = timeout_scale
        self.chat = ChatView(stage.slack)
        self.look = Lookout(stage)
        self.summary = Summary(scenario=stage.scenario.name, job=stage.target.label,
                               metrics=stage.prometheus is not None)
        self.started = time.time()
        self.detected_at: float | None = None
        self.marks: list[tuple[float, str]] = []
        self.posted_at = 0.0

    # -- waiting -------------------------------------------------------------------------------

    def pump(self) -> None:
        """Print what reached Slack since the last call, and a progress line when one is due."""
        for renderable in self.chat.new_renderables():
            self.narration.say(renderable)
        self.narration.tick()

    def wait(self, what: str, check: Callable[[], T | None], *, timeout: float,
             interval: float = 0.1) -> T:
        """`check()`'s first true value, looked at before the Slack messages are printed: a step
        that already happened is ticked off before the messages that followed it (the story's
        order, whatever the timing)."""
        deadline = time.monotonic() + timeout * self.scale
        while True:
            value = check()
            if value is not None and value is not False:
                return value
            if time.monotonic() > deadline:
                raise DemoError(f"the demo stopped: {what} did not happen within {timeout:g}s")
            self.pump()
            time.sleep(interval)

    # -- measuring -------------------------------------------------------------------------------

    def settled_utilization(self, *, timeout: float, step: str, what: str) -> float | None:
        """The mean of the first `SETTLE_SAMPLES` scrapes in a row that agree within
        `SETTLE_SPREAD` points (None when Prometheus has none within `timeout`); the running
        `step`'s detail says `what` is measured and how far it got."""
        samples: list[float] = []
        deadline = time.monotonic() + timeout * self.scale
        while time.monotonic() < deadline:
            self.pump()
            value = self.look.utilization_now()
            if value is not None and (not samples or value != samples[-1]):
                samples.append(value)
                self.narration.update(step, f"{what}: {len(samples)} sample(s), {value:.0f}% now")
                recent = samples[-SETTLE_SAMPLES:]
                if (len(samples) >= MIN_SAMPLES and len(recent) == SETTLE_SAMPLES
                        and max(recent) - min(recent) <= SETTLE_SPREAD):
                    return statistics.fmean(recent)
            time.sleep(0.5)
        return statistics.fmean(samples[-SETTLE_SAMPLES:]) if samples else None

    # -- the story -------------------------------------------------------------------------------

    def tell(self) -> Summary:
        n, stage, summary = self.narration, self.stage, self.summary
        if stage.metrics_note:
            n.say(Text(f"note: {stage.metrics_note}", style="yellow"))
        n.begin("placed", f"creating {stage.target.label}")
        stage.apply_workloads()
        pods = self.wait("the pods' placement", self.look.pods_settled, timeout=20)
        time.sleep(0.3)  # the rest of a batch of bindings
        pods = self.wait("the pods' placement", self.look.pods_settled, timeout=20)
        summary.zones_before = self.look.zones()
        n.done("placed", f"{len(pods)} pods: {zones_text(summary.zones_before)}")

        n.begin("detected", "the agent watches the pods")
        incident = self.wait("the detection", self.look.incident, timeout=30)
        bound = [stage.binds[p["metadata"]["name"]] for p in pods
                 if p["metadata"]["name"] in stage.binds]
        self.detected_at = incident.opened_at.timestamp()
        if bound:
            summary.detected_after_s = max(0.0, self.detected_at - max(bound))
        summary.incident_id = incident.id
        after = (f", {summary.detected_after_s:.1f}s after the last pod was bound"
                 if summary.detected_after_s is not None else "")
        n.done("detected", f"incident #{incident.id}: {incident.verdict.value}{after}")

        n.begin("posted", "the leader delivers the outbox")
        self.wait("the Slack post", lambda: self.chat.posted > 0, timeout=20)
        self.posted_at = time.monotonic()
        n.done("posted", f"to {self.chat.channel_name}, with Approve / Reject / Snooze")

        if stage.prometheus is not None:
            measuring = "measuring the split job's GPUs in Prometheus"
            n.begin("utilization", measuring)
            summary.utilization_before = self.settled_utilization(
                timeout=20, step="utilization", what=measuring)
        self.egress(incident)
        if stage.gitops:  # the namespace opts in: the agent approves by itself
            summary.decided_by = auto_approved(self, incident)
            action = ButtonAction.APPROVE
        else:
            awaiting = self.wait("the approval request",
                                 lambda: self.look.status_in(incident.id, {S.AWAITING_APPROVAL}),
                                 timeout=20)
            action = self.approve(awaiting)
        if action is not ButtonAction.APPROVE:
            return self.finish(incident.id)

        self.wait("the fix", lambda: self._step_seen(incident.id, APPLIED_STEPS), timeout=40)
        n.done("applied", self._applied_words(incident.id))
        n.begin("restarted")
        self.wait("the restart", lambda: self._step_seen(incident.id, RESTARTED_STEPS), timeout=40)
        n.done("restarted")
        n.begin("colocated")
        colocated = self.wait("the co-location", self.look.colocated, timeout=40)
        summary.zones_after = colocated
        self.marks.append((time.time(), "co-located"))
        n.done("colocated", zones_text(colocated))
        verifying = "the agent verifies placement, flows and utilization"
        n.begin("resolved", verifying)
        if stage.prometheus is not None:
            summary.utilization_after = self.settled_utilization(
                timeout=30, step="resolved", what="measuring the co-located job's GPUs")
            before, after_ = summary.utilization_before, summary.utilization_after
            if before is not None and after_ is not None:
                n.done("utilization", f"{before:.0f}% → {after_:.0f}%")
            else:
                n.skip("utilization", "no samples of the job in Prometheus")
        else:
            n.skip("utilization", "no metrics (Prometheus is not running)")
        return self.finish(incident.id)

    def egress(self, incident: IncidentSummary) -> None:
        """The finding's cross-zone egress: measured (waited for a while, unless the split is
        blocked: then nothing crosses), else its estimate."""
        n, summary = self.narration, self.summary
        n.begin("egress", "the agent prices the job's cross-zone bytes")

        def waste() -> StoredWaste:
            found = self.look.detail(incident.id).stored.waste
            return found if found is not None else StoredWaste(None, None, None, None)

        if self.stage.prometheus is not None and incident.verdict is not Verdict.ZONE_SPLIT_BLOCKED:
            deadline = time.monotonic() + EGRESS_PATIENCE * self.scale
            while waste().egress_source != EgressBasis.MEASURED.value and time.monotonic() < deadline:
                self.pump()
                time.sleep(0.2)
        found = waste()
        summary.egress_source = found.egress_source
        summary.egress_measured_by = found.egress_measured_by
        gb, usd = found.cross_zone_gb_per_day, found.egress_usd_per_day
        summary.egress_gb_per_day = float(gb) if gb is not None else None
        summary.egress_usd_per_day = float(usd) if usd is not None else None
        if summary.egress_usd_per_day is None:
            n.skip("egress", str(found.egress_basis or "no egress figure"))
        else:
            n.done("egress", f"${summary.egress_usd_per_day:,.2f}/day ({found.egress_basis})")

    def approve(self, incident: IncidentSummary) -> ButtonAction:
        n = self.narration
        if self.stage.prometheus is not None and self.stage.target.kind != "group":
            # the approver decides on the message with its measured utilization and waste (the
            # agent measures a Kubeflow job's GPUs, not a generic group's)
            n.begin("approved", "the agent adds the measured utilization to the message")
            self.linger(self.look.utilization_shown, seconds=6)
        n.begin("approved", f"waiting for {APPROVER_NAME}")
        if self.answer is not None:
            with n.pause():
                action = self.answer(incident)
        else:
            action = ButtonAction.APPROVE
            while time.monotonic() < self.posted_at + READING_SECONDS:
                self.pump()  # pacing for the reader of the story, not a synchronisation
                time.sleep(0.1)
        message = next((m for m in self.stage.slack.messages() if m.thread_ts is None), None)
        response = self.stage.slack.click(
            self.stage.events_url, user=APPROVER, action_id=action.value, value=str(incident.id),
            channel=message.channel if message else "C0DEMO",
            message_ts=message.ts if message else "1.000001")
        if response.status != 200:
            raise DemoError(f"the agent answered the click with HTTP {response.status}")
        decided = set(S) - {S.AWAITING_APPROVAL, S.OPEN}
        status = self.wait("the decision", lambda: self.look.status_in(incident.id, decided),
                           timeout=20)
        self.summary.decided_by = APPROVER_NAME
        words = {ButtonAction.APPROVE: "approved", ButtonAction.REJECT: "rejected",
                 ButtonAction.SNOOZE: "snoozed"}[action]
        detail = (f"{words} by {APPROVER_NAME}: a signed click to /slack/events, "
                  f"answered in {response.seconds * 1000:.0f} ms")
        self.marks.append((time.time(), words))
        if action is ButtonAction.APPROVE:
            n.done("approved", detail)
        else:
            n.fail("approved", f"{detail} (status {status.status.value})")
        return action

    def finish(self, incident_id: int) -> Summary:
        n, summary = self.narration, self.summary
        final = self.wait("the end of the remediation",
                          lambda: self.look.status_in(incident_id, ENDED), timeout=60)
        summary.incident_status = final.status.value
        summary.verdict = final.verdict.value
        if final.status is S.RESOLVED:
            n.done("resolved", f"incident #{incident_id} resolved")
            # the thread's last reply and the message's last edit (the follower looks every few
            # seconds): shown, not required
            self.linger(lambda: (self.look.thread_says("Resolved")
                                 and self.look.message_is("resolved")))
            if self.stage.gitops:
                seen = tell_revert(self, incident_id)
                summary.redetected_incident_id, summary.reverted_by = seen.incident_id, seen.reverted_by
                summary.redetected_status = seen.status
                summary.handover_posted = seen.handover_posted
        else:
            for step in self.narration.steps:
                if step.at is None and step.key != "resolved":
                    n.skip(step.key)
            if final.status in DECLINED:
                # the decision's thread reply and the message showing it instead of the buttons
                words, status = DECLINED[final.status], final.status.value
                self.linger(lambda: (self.look.thread_says(f"{words} by")
                                     and self.look.message_is(status)))
                n.skip("resolved", f"incident #{incident_id} {final.status.value}: the job is "
                       "left as it is, split")
            else:
                n.fail("resolved", f"incident #{incident_id} ended {final.status.value}")
        self.pump()
        summary.chart = self.write_chart()
        summary.slack_messages = len(self.stage.slack.messages())
        summary.duration_s = time.time() - self.started
        return summary

    def linger(self, shown: Callable[[], bool], *, seconds: float = 8.0) -> None:
        """Print Slack's messages until `shown()` (what the agent sends next, e.g. a thread
        reply), for at most `seconds`: shown when it comes, not required."""
        deadline = time.monotonic() + seconds * self.scale
        while time.monotonic() < deadline and not shown():
            self.pump()
            time.sleep(0.2)
        self.pump()

    def write_chart(self) -> str | None:
        if self.stage.prometheus is None:
            return None
        samples = self.look.utilization_samples(start=self.started, end=time.time())
        png = utilization_png(samples, title=chart_title(self.stage.target, self.summary),
                              split_at=self.detected_at, marks=self.marks)
        if png is None:
            return None
        self.chart_path.write_bytes(png)
        return str(self.chart_path)

    # -- conditions ------------------------------------------------------------------------------

    def _step_seen(self, incident_id: int, steps: frozenset[str]) -> bool:
        detail = self.look.detail(incident_id)
        if detail.incident.status in ENDED - {S.RESOLVED}:
            raise DemoError(f"the remediation ended {detail.incident.status.value}: "
                            f"{[dict(e.detail) for e in detail.events][-3:]}")
        return any(str(a.payload.get("step")) in steps for a in detail.actions)

    def _applied_words(self, incident_id: int) -> str:
        if self._step_seen(incident_id, KUEUE_STEPS):
            return ("through Kueue: its Workload deactivated (Kueue suspended the job), the "
                    "templates given Kueue's zone-level request, the Workload re-queued")
        if self.stage.target.kind == "group":
            return "the coordinator's Deployment patched (zone pin, toleration, zone label)"
        if self.stage.target.kind in SUSPEND_FIRST:
            return ("suspended; the co-location patch (zone pin, toleration) goes in once its "
                    "pods are gone")  # fmt: skip
        return "suspended with the co-location patch (zone pin, toleration)"


def chart_title(target: Target, summary: Summary) -> str:
    """What the chart shows: the split, then the co-location, or how the story ended without
    one."""
    if summary.zones_after:
        return f"{target.label}: GPU utilization, split across zones then co-located"
    ended = {S.REJECTED.value: "the fix rejected", S.SNOOZED.value: "the fix snoozed",
             S.EXPIRED.value: "the approval expired", S.FAILED.value: "the fix failed",
             S.ROLLED_BACK.value: "the fix rolled back"}.get(summary.incident_status or "",
                                                             "not co-located")
    return f"{target.label}: GPU utilization, split across zones ({ended})"


def steps_for(target: Target, *, gitops: bool = False) -> list[tuple[str, str]]:
    group = target.kind == "group"
    return [*_steps(group), *(GITOPS_STEPS if gitops else [])]


def _steps(group: bool) -> list[tuple[str, str]]:
    return [
        ("placed", "Pods placed"),
        ("detected", "Split detected"),
        ("posted", "Finding posted to Slack"),
        ("egress", "Cross-zone egress"),
        ("approved", "Approval"),
        ("applied", "Fix applied" if group else "Job suspended"),
        ("restarted", "Rollout done" if group else "Job resumed"),
        ("colocated", "Pods co-located"),
        ("utilization", "GPU utilization before → after"),
        ("resolved", "Incident resolved"),
    ]


def tell(
    scenario: str,
    *,
    console: Console,
    answer: Answer | None = None,
    chart_path: Path,
    metrics: bool = True,
    prometheus_binary: Path | None = None,
    gitops: bool = False,
) -> Summary:
    """Run the whole story once (see the module docstring); everything is stopped and removed
    when it returns or raises. `gitops`: the lab deployed from Git, and the sequel of its fix
    undone by a sync (`agent.demo.gitops_revert`)."""
    with Stage(scenario, metrics=metrics, prometheus_binary=prometheus_binary,
               gitops=gitops) as stage:
        narration = Narration(console, steps_for(stage.target, gitops=gitops),
                              title=f"zonemedic demo: {stage.scenario.description}")
        story = Story(stage, narration, answer=answer, chart_path=chart_path)
        with narration.running():
            return story.tell()
