"""Render findings as a table for people (the `diagnose --output table` text).

One row per job (kind, namespace/name, verdict, zones, coordinator, target), then, under a blocked
job, its denied flows (at most `shown` of them, then a count), the reasons (uncertain policies and
lying zone labels among them) and the caveats. Colour (ANSI) only when the caller asks for it: the
command decides from the TTY and NO_COLOR. Every name and reason comes from the snapshot and is made
printable (`agent.parsing.printable`) before any colour is added: a control character in a dump is
shown as its escape. Pure: returns text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agent.model.finding import REMEDIABLE_VERDICTS, Finding
from agent.model.verdict import Verdict
from agent.parsing.printable import printable

_COLOURS: Mapping[Verdict, str] = {
    Verdict.HEALTHY: "32",  # green
    Verdict.PENDING: "36",  # cyan
    Verdict.ZONE_SPLIT_DEGRADED: "33",  # yellow
    Verdict.ZONE_SPLIT_BLOCKED: "31;1",  # bold red
    Verdict.POLICY_BLOCKED: "35;1",  # bold magenta
    Verdict.ZONE_LABEL_MISMATCH: "33;1",  # bold yellow
}
_HEADERS = ("JOB", "VERDICT", "ZONES", "COORDINATOR", "TARGET")


def _row(f: Finding) -> tuple[str, ...]:
    coord = "-"
    if f.coordinator is not None:
        coord = f"{f.coordinator.pod}@{f.coordinator.zone or '?'}"
    zones = " ".join(f"{z}:{n}" for z, n in f.zones.items()) or "-"
    target = f.target_zone or ("not remediable" if f.verdict in REMEDIABLE_VERDICTS else "-")
    cells = (f"{f.job.kind} {f.job.namespace}/{f.job.name}", str(f.verdict), zones, coord, target)
    return tuple(printable(cell) for cell in cells)


def render_table(findings: Sequence[Finding], *, colour: bool = False, shown: int = 10) -> str:
    """The findings as aligned text lines (ends with a newline)."""
    if not findings:
        return "no training jobs with live pods found\n"
    rows = [_row(f) for f in findings]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(_HEADERS)]

    def line(cells: Sequence[str], verdict: Verdict | None = None) -> str:
        parts = []
        for i, cell in enumerate(cells):
            text = cell.ljust(widths[i]) if i < len(cells) - 1 else cell
            if colour and verdict is not None and i == 1:
                text = f"\x1b[{_COLOURS[verdict]}m{text}\x1b[0m"
            parts.append(text)
        return "  ".join(parts).rstrip()

    out = [line(_HEADERS)]
    for f, row in zip(findings, rows, strict=True):
        out.append(line(row, f.verdict))
        for flow in f.denied_flows[:shown]:
            policies = ", ".join(flow.policies) or "-"
            out.append(printable(
                f"    denied {flow.from_pod} -> {flow.to_pod} {flow.ports.protocol}/{flow.ports}"
                f" at {flow.hop} ({flow.reason}) by {policies}"
            ))
        hidden = f.denied_flows_total - min(len(f.denied_flows), shown)
        if hidden > 0:
            out.append(f"    ... and {hidden} more denied pod pair(s)")
        for reason in f.reasons:
            out.append(printable(f"    note: {reason}"))
        for caveat in f.caveats:
            out.append(printable(f"    caveat: {caveat.policy} uses {caveat.feature}: {caveat.detail}"))
        impact = f.impact
        if impact is not None and (impact.gpus_outside_target or impact.pods_outside_target):
            text = (
                f"    impact: {impact.gpus_outside_target} of {impact.gpus_total} GPU(s) and"
                f" {impact.pods_outside_target} pod(s) outside {impact.reference_zone}"
            )
            if impact.cross_zone_bytes_per_step is not None:
                text += (
                    f"; ~{impact.cross_zone_bytes_per_step / 1e9:.3g} GB cross-zone per step"
                    f" (${impact.cross_zone_cost_per_step_usd:.4g}/step)"
                )
            out.append(printable(text))
    return "\n".join(out) + "\n"
