"""Read policy objects leniently: an object that cannot be read is recorded, never fatal.

Called by every path that turns policy manifests into a `PolicySet`: the snapshot loader (the
`diagnose` command and the remediation's re-diagnosis), the agent's incremental mirror of the
watch cache, and the twin's dataplane. Each object goes through `agent.policy.manifest`; one it
refuses becomes an `UnreadablePolicy` naming the policy, the field and the problem, with the
selectors of what it may select read leniently, so the diagnosis can mark the jobs it may select
as uncertain and diagnose every other job as usual. Pure: no I/O, no logging.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.errors import PolicyError
from agent.policy.manifest import parse_policy, unreadable
from agent.policy.rule import Policy, UnreadablePolicy


def read_policy(obj: Mapping[str, Any]) -> Policy | UnreadablePolicy:
    """The parsed policy, or the record of why it cannot be read."""
    try:
        return parse_policy(obj)
    except PolicyError as exc:
        return unreadable(obj, exc)


def unreadable_warning(policy: UnreadablePolicy) -> str:
    """One line for people: which policy was skipped, the field and why."""
    return (
        f"skipped policy {policy.describe()} (the jobs it may select are diagnosed as uncertain)"
    )


@dataclass(frozen=True)
class PolicyReading:
    """The policies read, and those that could not be (in input order, later ids winning)."""

    policies: tuple[Policy, ...] = ()
    unreadable: tuple[UnreadablePolicy, ...] = ()

    def warnings(self) -> tuple[str, ...]:
        return tuple(unreadable_warning(u) for u in self.unreadable)


def read_policies(objects: Iterable[Mapping[str, Any]]) -> PolicyReading:
    """Read every object; an object whose id repeats replaces the earlier one."""
    found: dict[str, Policy | UnreadablePolicy] = {}
    for obj in objects:
        result = read_policy(obj)
        found.pop(result.id, None)
        found[result.id] = result
    return PolicyReading(
        policies=tuple(p for p in found.values() if isinstance(p, Policy)),
        unreadable=tuple(p for p in found.values() if isinstance(p, UnreadablePolicy)),
    )
