"""The policy-side fix a finding offers when co-location is refused, as plain data.

Built by `agent.diagnosis.policy_fix` (the manifests, their proof through the what-if) and carried
by the finding (`agent.model.finding.Finding.policy_fix`): stored with the incident, printed by
`diagnose`/`incidents show --output json` and the HTTP API, and shown in the Slack post
(`agent.chatops.policy_offer`). zonemedic never applies it: network policy belongs to the security
team, and `note` says so. `refused` holds why no allow policy can admit the job's flows (a deny
rule, Cilium's L7 proxy, a selector that cannot be narrowed to the job's pods) when there is none.
No decision, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NOT_APPLIED = ("zonemedic does not apply network policies: network policy belongs to the "
               "security team; review it and apply it with the command, or hand it over")  # fmt: skip


@dataclass(frozen=True, slots=True)
class PolicyOffer:
    """The proposed policy objects (`kind`: CiliumNetworkPolicy or NetworkPolicy) as YAML and as
    a diff, the command that applies them, the what-if blast radius of applying them (`blast`:
    the `whatif` JSON shape, `exact`: exactly the job's denied required flows change, nothing
    else), or why there is none (`refused`)."""

    kind: str | None = None
    names: tuple[str, ...] = ()
    yaml: str = ""
    diff: str = ""
    apply: str = ""
    blast: Mapping[str, Any] = field(default_factory=dict)
    exact: bool = False
    opened: int = 0  # the denied required pod-pair flows the fix admits
    note: str = NOT_APPLIED
    refused: str | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.refused is not None:
            return {"refused": self.refused, "note": self.note}
        return {"kind": self.kind, "names": list(self.names), "yaml": self.yaml,
                "diff": self.diff, "apply": self.apply, "blast_radius": dict(self.blast),
                "exact": self.exact, "opened_flows": self.opened, "note": self.note}  # fmt: skip
