"""What zonemedic concludes about one job: one vocabulary for the diagnosis and the incident store.

The topology diagnosis (`agent.diagnosis`) produces the first six verdicts; the agent also opens
incidents on the metric- and alert-driven ones (`gpu_utilization_drop`, `alert`), which the store
(`agent.model.incident`) records. `zone_label_mismatch`: a pod's zone-mirroring label names
another zone than its node's, and required flows are denied: relabelling comes before any policy
change. Pure vocabulary: no behaviour.
"""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    PENDING = "pending"
    HEALTHY = "healthy"
    POLICY_BLOCKED = "policy_blocked"
    ZONE_LABEL_MISMATCH = "zone_label_mismatch"
    ZONE_SPLIT_DEGRADED = "zone_split_degraded"
    ZONE_SPLIT_BLOCKED = "zone_split_blocked"
    GPU_UTILIZATION_DROP = "gpu_utilization_drop"
    ALERT = "alert"
