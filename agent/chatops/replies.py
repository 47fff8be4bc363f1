"""Slack replies that are not an incident's own post: the daily digest and the `/zonemedic`
slash-command answers (listings, one incident, stats, help, one-line answers).

Who calls it: the outbox deliverer (`agent.chatops.delivery`, the digest) and the Bolt handlers
(`agent.chatops.slack`, the slash command). Pure: records in, `Rendered` out; times are passed in.
Long listings stop at 20 incidents and say how many more there are.

What it does not do: render an incident's post or its thread (`agent.chatops.render`), send
anything, or read the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from agent.chatops.blocks import (
    MAX_SECTION,
    STATUS_WORDS,
    Rendered,
    cap_blocks,
    context,
    fallback,
    fit_lines,
    header,
    job_label,
    mrkdwn_escape,
    section,
    when,
)
from agent.model.admission import AdmissionSummary
from agent.model.incident import IncidentDetail, IncidentListing, IncidentStats, IncidentSummary
from agent.model.lifecycle import IncidentStatus
from agent.policy.explain_report import render_explanation

INCIDENTS_LISTED = 20  # slash-command listings and digests



def _incident_line(i: IncidentSummary) -> str:
    return mrkdwn_escape(
        f"#{i.id} {i.verdict.value} {i.namespace}/{i.name} [{STATUS_WORDS[i.status]}] "
        f"opened {when(i.opened_at)}"
    )


def _listing_section(
    title: str, incidents: Sequence[IncidentSummary], notes: Mapping[str, str] | None = None
) -> str:
    lines = [f"• {_incident_line(i)}" + (f" · _not posted: {mrkdwn_escape(notes[str(i.id)])}_"
                                          if notes and str(i.id) in notes else "")
             for i in incidents[:INCIDENTS_LISTED]]
    if len(incidents) > INCIDENTS_LISTED:
        lines.append(f"_… and {len(incidents) - INCIDENTS_LISTED} more_")
    return fit_lines(title, lines)


def digest_message(
    open_incidents: Sequence[IncidentSummary],
    stats: IncidentStats,
    *,
    period: timedelta,
    not_posted: Mapping[str, str] | None = None,
    admissions: AdmissionSummary | None = None,
) -> Rendered:
    """The daily digest: open incidents, resolved in the period, GPU-hours recovered. An open
    incident no playbook posts says why (`not_posted`: incident id -> the reason). With
    `admissions` (the admission webhook's week, when it decided anything): the jobs placed at
    admission this week and the restarts that avoided."""
    resolved = stats.by_outcome.get(IncidentStatus.RESOLVED.value, 0)
    hours = period.total_seconds() / 3600
    span = f"{hours / 24:.0f}d" if hours >= 24 else f"{hours:.0f}h"
    summary = (f"*Open incidents:* {len(open_incidents)} · *resolved in the last {span}:* "
               f"{resolved} · *GPU-hours recovered:* {stats.gpu_hours_recovered:,.1f}")
    blocks = [header("zonemedic digest"), section(summary)]
    placed = admissions is not None and bool(admissions.by_outcome)
    if admissions is not None and placed:
        blocks.append(section(f"*Admission:* {admissions.line()}"))
    if open_incidents:
        blocks.append(section(_listing_section("*Open:*", open_incidents, not_posted)))
    text = (f"zonemedic digest: {len(open_incidents)} open, {resolved} resolved in the last {span}, "
            f"{stats.gpu_hours_recovered:,.1f} GPU-hours recovered")
    if admissions is not None and placed:
        text += f"; {admissions.line()}"
    return Rendered(text=fallback(text), blocks=cap_blocks(blocks))


def listing_reply(listing: IncidentListing, *, filters: str) -> Rendered:
    if not listing.incidents:
        text = f"No incidents{(' for ' + filters) if filters else ''}."
        return Rendered(text=text, blocks=[section(mrkdwn_escape(text))])
    title = f"*Incidents{(' (' + mrkdwn_escape(filters) + ')') if filters else ''}:*"
    blocks = [section(_listing_section(title, listing.incidents))]
    if listing.problems:
        blocks.append(context(mrkdwn_escape("; ".join(str(p) for p in listing.problems[:10]))))
    return Rendered(text=fallback(f"{len(listing.incidents)} incident(s)"), blocks=blocks)


def detail_reply(detail: IncidentDetail) -> Rendered:
    i = detail.incident
    lines = [
        f"*#{i.id} {mrkdwn_escape(job_label(i))}* `{i.verdict.value}` [{STATUS_WORDS[i.status]}]",
        f"opened {when(i.opened_at)} · detections {i.detections} · target zone "
        f"{mrkdwn_escape(i.target_zone or '-')}",
    ]
    events = [
        mrkdwn_escape(f"• {when(e.at)} {e.kind.value} {e.actor or ''}".rstrip())
        for e in detail.events
    ]
    for d in detail.decisions:
        events.append(mrkdwn_escape(
            f"• decision: {d.outcome.value} by {d.actor_name or d.actor_id} via {d.source.value} "
            f"at {when(d.decided_at)}"
        ))
    blocks = [section("\n".join(lines)), section(fit_lines("*Timeline:*", events))]
    return Rendered(text=fallback(f"incident #{i.id}: {i.status.value}"), blocks=blocks)


def stats_reply(stats: IncidentStats, *, period: str) -> Rendered:
    def mean(value: timedelta | None) -> str:
        if value is None:
            return "-"
        minutes = value.total_seconds() / 60
        return f"{minutes:.0f}m" if minutes < 120 else f"{minutes / 60:.1f}h"

    verdicts = ", ".join(f"{k} {v}" for k, v in sorted(stats.by_verdict.items())) or "-"
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(stats.by_outcome.items())) or "-"
    text = (
        f"*Incidents since {when(stats.since)} ({mrkdwn_escape(period)}):* {stats.total}\n"
        f"By verdict: {mrkdwn_escape(verdicts)}\nBy outcome: {mrkdwn_escape(outcomes)}\n"
        f"Mean time to detect {mean(stats.mean_time_to_detect)} · decide "
        f"{mean(stats.mean_time_to_decide)} · resolve {mean(stats.mean_time_to_resolve)}\n"
        f"GPU-hours recovered: {stats.gpu_hours_recovered:,.1f}"
    )
    return Rendered(text=fallback(f"{stats.total} incident(s) since {when(stats.since)}"),
                    blocks=[section(text)])


HELP = (
    "*/zonemedic* commands:\n"
    "• `incidents [job NS/NAME] [since 7d] [status S]`: recent incidents\n"
    "• `show ID`: one incident with its timeline\n"
    "• `stats [since 30d]`: counts, mean times, GPU-hours recovered\n"
    "• `sweep`: diagnose every job now (approvers only)\n"
    "• `explain from NS/POD to NS/POD port PORT[/PROTO]`: why the network policies allow or "
    "deny that flow (`from NS from-labels K=V,...` for a pod to be)\n"
    "• `whatif delete KIND/NS/NAME`: which jobs and flows deleting that policy (or pod) would "
    "change, before anyone does it (nothing is deleted)\n"
    "• `help`: this list"
)


def help_reply() -> Rendered:
    return Rendered(text="zonemedic commands", blocks=[section(HELP)])


def explain_reply(answer: Mapping[str, Any]) -> Rendered:
    """An explanation (`Explanation.to_dict()`) as a person reads it: the verdict in bold, then
    the hops, rules and identities as `zonemedic explain` prints them, in code blocks that fit
    Slack's section size."""
    verdict = "allowed" if answer["allowed"] else "DENIED at " + " and ".join(answer["denied_at"])
    title = mrkdwn_escape(f"{answer['from']} → {answer['to']} port {answer['port']}: {verdict}")
    lines = render_explanation(answer).splitlines()[1:]
    blocks = [section(f"*{title}*")]
    chunk: list[str] = []
    for line in lines:
        if chunk and sum(len(x) + 1 for x in chunk) + len(line) > MAX_SECTION - 200:
            blocks.append(section("```" + mrkdwn_escape("\n".join(chunk)) + "```"))
            chunk = []
        chunk.append(line)
    if chunk:
        blocks.append(section("```" + mrkdwn_escape("\n".join(chunk)) + "```"))
    return Rendered(text=fallback(title), blocks=cap_blocks(blocks))


WHATIF_FLOWS_SHOWN = 20


def _verdict_words(verdict: Mapping[str, Any]) -> str:
    if verdict["allowed"]:
        return "allowed"
    policies = ", ".join(verdict.get("policies") or ())
    return f"denied at {verdict.get('hop') or '?'}" + (f" ({policies})" if policies else "")


def whatif_reply(answer: Mapping[str, Any], *, deletes: Sequence[str]) -> Rendered:
    """A what-if's blast radius (`BlastRadius.to_dict()`) as a person reads it: the change and
    what changes in bold, then each job whose verdict changes and the first flows that change
    (`WHATIF_FLOWS_SHOWN`), in a code block; it says that nothing was deleted."""
    jobs, flows = answer["jobs"], answer["flows"]
    required = sum(1 for f in flows if f["flow"] == "required")
    title = mrkdwn_escape(
        f"What if {', '.join(deletes)} were deleted: {len(jobs)} job verdict(s), {required} "
        f"required flow(s) and {answer['declared_port_flows_changed']:,} declared-port flow(s) "
        "change")
    lines = [f"{answer['jobs_checked']} job(s), {answer['flows_checked']:,} required pod-pair "
             f"flow(s) and {answer['declared_port_flows_checked']:,} declared-port flow(s) of "
             f"{answer['touched_pods']} touched pod(s) checked"]
    lines += [f"job {j['job']}: {j['before'] or '(absent)'} -> {j['after'] or '(absent)'}"
              for j in jobs]
    for flow in flows[:WHATIF_FLOWS_SHOWN]:
        what = f"required by {flow['job']}" if flow["flow"] == "required" else "declared port"
        lines.append(f"{flow['from']} -> {flow['to']} port {flow['port']} ({what}): "
                     f"{_verdict_words(flow['before'])} -> {_verdict_words(flow['after'])}")
    if len(flows) > WHATIF_FLOWS_SHOWN:
        lines.append(f"... and {len(flows) - WHATIF_FLOWS_SHOWN} more flow(s) listed "
                     "(POST /api/whatif or `zonemedic whatif` for all)")
    blocks = [section(f"*{title}*"), section("```" + mrkdwn_escape("\n".join(lines)) + "```"),
              section("Nothing was deleted: this is a what-if.")]
    return Rendered(text=fallback(title), blocks=cap_blocks(blocks))


def plain_reply(text: str) -> Rendered:
    """A one-line ephemeral answer (errors, refusals, decision results)."""
    safe = mrkdwn_escape(text)
    return Rendered(text=fallback(safe), blocks=[section(safe)])
