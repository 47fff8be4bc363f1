"""A split job's waste per day as data: idle GPU-hours and cross-zone egress dollars, each with the
basis of its figure, and where the egress figure comes from (`EgressBasis`).

Computed by `agent.diagnosis.waste`; carried by the incident document (`agent.model.document`)
the pipeline records, persisted under the incident's `diagnosis.waste` (`to_dict`) and read back
by the chat message, `incidents show`, `incidents stats` and the API. Plain data: no arithmetic
beyond its JSON form, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class EgressBasis(StrEnum):
    """Where a finding's egress figure comes from."""

    MEASURED = "measured"
    ESTIMATED = "estimated"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Waste:
    """Per-day figures; a figure is None when there is no basis, and its basis says why."""

    gpu_hours_per_day: float | None
    gpu_hours_basis: str
    egress_usd_per_day: float | None
    egress_basis: str
    cross_zone_gb_per_day: float | None = None
    egress_source: EgressBasis = EgressBasis.UNKNOWN
    egress_measured_by: str | None = None  # the exporter, when measured
    egress_window_seconds: float | None = None  # the rate window, when measured
    egress_unmeasured: str | None = None  # why nothing was measured

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu_hours_per_day": self.gpu_hours_per_day, "gpu_hours_basis": self.gpu_hours_basis,
            "egress_usd_per_day": self.egress_usd_per_day, "egress_basis": self.egress_basis,
            "cross_zone_gb_per_day": self.cross_zone_gb_per_day,
            "egress_source": self.egress_source.value,
            "egress_measured_by": self.egress_measured_by,
            "egress_window_seconds": self.egress_window_seconds,
            "egress_unmeasured": self.egress_unmeasured,
        }  # fmt: skip
