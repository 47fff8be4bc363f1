"""What zonemedic concludes about one job: one vocabulary for the diagnosis and the incident store.

The topology diagnosis (`agent.diagnosis`) produces the first five verdicts; the agent also opens
incidents on the metric- and alert-driven ones (`gpu_utilization_drop`, `alert`), which the store
(`agent.model.incident`) records. Pure vocabulary: no behaviour.
"""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    PENDING = "pending"
    HEALTHY = "healthy"
    POLICY_BLOCKED = "policy_blocked"
    ZONE_SPLIT_DEGRADED = "zone_split_degraded"
    ZONE_SPLIT_BLOCKED = "zone_split_blocked"
    GPU_UTILIZATION_DROP = "gpu_utilization_drop"
    ALERT = "alert"
