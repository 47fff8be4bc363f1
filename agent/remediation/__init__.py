"""Remediation: `planner` builds patches (pure), `remediator` runs an approved fix through `writer`
(the only cluster writer), `verify` judges. Approvals are `agent.approval`'s."""
