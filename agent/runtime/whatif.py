"""The running agent's what-if answers: the blast radius of a change over the watch cache's parsed
mirror, for the HTTP API (`POST /api/whatif`) and the Slack `/zonemedic whatif` command.

Called by `agent.runtime.http` (the request body through `parse_change`) and the chat layer (the
slash command's parsed change). A change is one of:
- policies to apply: a YAML (or JSON) body of NetworkPolicy, CiliumNetworkPolicy and
  CiliumClusterwideNetworkPolicy objects, each added or replacing the policy of the same kind,
  namespace and name (as `zonemedic whatif --apply` does);
- objects to delete: the JSON object `{"delete": "KIND/NS/NAME"}` (or a list of them): a policy of
  those kinds (`CiliumClusterwideNetworkPolicy/NAME`) or a Pod (as `--delete` does).
Each answer reads the pipeline's current view (`held`: the state, the `PolicySet`, the facts and
the mirror's generation, taken under the pipeline's lock) and is the JSON of `zonemedic whatif
--output json` (`BlastRadius.to_dict`). The jobs found in the state are kept per mirror
generation, with its facts (`Held`): a request after the first in the same generation finds no
job again, the first in a new generation finds again only the jobs of the namespaces that changed
(`agent.runtime.held_jobs`), and a policy-only change diagnoses only the jobs it can reach. Before the caches
are synced it refuses (`UnavailableError`: 503). `warm` does the per-generation part ahead of any
request (the agent's background warm-up, `agent.runtime.whatif_warmer`). What it does not do: read the API server, move a
job (`--move` needs the planner's live objects: the CLI does it), or change anything.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.diagnosis.flow_universe import warm_selectors
from agent.diagnosis.pod_shapes import pod_shapes
from agent.diagnosis.whatif import (
    DELETABLE,
    POLICY_KINDS,
    BlastRadius,
    Cluster,
    Held,
    blast_radius,
    delete_objects,
)
from agent.errors import UnavailableError, WhatIfError
from agent.model.cluster import ClusterState
from agent.parsing.strict_json import parse_json
from agent.policy import PolicySet
from agent.policy.reading import read_policy
from agent.policy.rule import Policy, UnreadablePolicy
from agent.runtime.held_jobs import HeldJobs
from agent.settings import DiagnosisSettings
from agent.snapshot.documents import iter_items
from agent.topology.facts import ClusterFacts

HeldView = Callable[[], tuple[ClusterState, PolicySet, ClusterFacts, int]]
MAX_BODY = 1024 * 1024
MAX_OBJECTS = 100
_KEYS = ("delete",)


@dataclass(frozen=True, slots=True)
class Change:
    """What a what-if applies: the policy objects to apply, the `KIND/NS/NAME`s to delete."""

    apply: tuple[Mapping[str, Any], ...] = ()
    delete: tuple[str, ...] = ()


def _delete_targets(value: Any) -> tuple[str, ...]:
    targets = [value] if isinstance(value, str) else value
    if not isinstance(targets, list) or not targets or not all(
            isinstance(t, str) for t in targets):  # fmt: skip
        raise WhatIfError('delete: expected "KIND/NS/NAME" or a list of them')
    if len(targets) > MAX_OBJECTS:
        raise WhatIfError(f"delete: at most {MAX_OBJECTS} objects")
    for target in targets:
        kind, _, rest = target.partition("/")
        if kind not in DELETABLE:
            raise WhatIfError(f"delete: cannot delete a {kind!r} (kinds: {', '.join(DELETABLE)})")
        parts = rest.split("/")
        wanted = 1 if kind == "CiliumClusterwideNetworkPolicy" else 2
        if len(parts) != wanted or not all(parts):
            shape = "NAME" if wanted == 1 else "NAMESPACE/NAME"
            raise WhatIfError(f"delete: expected {kind}/{shape}, got {target!r}")
    return tuple(targets)


def parse_change(body: bytes) -> Change:
    """A `POST /api/whatif` body -> the change; `WhatIfError` (or the YAML reader's
    `SnapshotError`) names what is wrong."""
    if not body.strip():
        raise WhatIfError('give a change: policy objects (YAML or JSON) to apply, or '
                          '{"delete": "KIND/NS/NAME"}')  # fmt: skip
    if body.lstrip()[:1] == b"{":
        doc = parse_json(body)
        if isinstance(doc, dict) and "kind" not in doc:
            for key in doc:
                if key == "move":
                    raise WhatIfError("move: the agent does not move jobs in a what-if; run "
                                      "`zonemedic whatif --move NS/NAME --zone Z`")  # fmt: skip
                if key not in _KEYS:
                    raise WhatIfError(f"unknown field {key!r} (known: delete; or policy "
                                      "objects to apply)")  # fmt: skip
            return Change(delete=_delete_targets(doc.get("delete")))
    items = []
    for item in iter_items(body, source="body"):
        kind = item.get("kind")
        if kind not in POLICY_KINDS:
            raise WhatIfError(f"body: cannot apply a {kind!r}: the what-if applies policies "
                              f"({', '.join(POLICY_KINDS)})")  # fmt: skip
        items.append(item)
        if len(items) > MAX_OBJECTS:
            raise WhatIfError(f"body: at most {MAX_OBJECTS} objects")
    if not items:
        raise WhatIfError("body: no object to apply")
    return Change(apply=tuple(items))


def changed_cluster(state: ClusterState, policies: PolicySet, change: Change) -> Cluster:
    """The cluster as `change` would leave it (the same `state` object when no pod goes)."""
    found: dict[str, Policy | UnreadablePolicy] = {p.id: p for p in policies.policies}
    found.update((u.id, u) for u in policies.unreadable)
    for item in change.apply:
        parsed = read_policy(item)
        found.pop(parsed.id, None)
        found[parsed.id] = parsed
    readable = [p for p in found.values() if isinstance(p, Policy)]
    lost = [p for p in found.values() if isinstance(p, UnreadablePolicy)]
    left = delete_objects(change.delete, policies=readable, unreadable=lost, pods=state.pods)
    after = state if left.pods is state.pods else dataclasses.replace(state, pods=left.pods)
    return Cluster(after, PolicySet(left.policies, dataplane=policies.dataplane,
                                    unreadable=left.unreadable))  # fmt: skip


class LiveWhatIf:
    """What-if answers over the agent's view of the cluster, the jobs kept per generation."""

    def __init__(self, view: HeldView, *, settings: DiagnosisSettings,
                 ready: Callable[[], bool]) -> None:  # fmt: skip
        self._view = view
        self._settings = settings
        self._ready = ready
        self._lock = threading.Lock()
        self._held: tuple[int, Held] | None = None
        self._jobs = HeldJobs(settings.groups)
        self._warmed: PolicySet | None = None  # the policy set whose selector caches are warm
        self.found_last = 0  # generations whose jobs were brought up to date

    def held(self, facts: ClusterFacts, state: ClusterState, generation: int, *,
             policies: PolicySet) -> Held:  # fmt: skip
        """The facts, jobs and pod shapes (over `policies`' selector keys) of the state of
        `generation`, brought up to date once for it (only the namespaces that changed are
        looked at again for jobs: `HeldJobs`)."""
        with self._lock:
            if self._held is not None and self._held[0] == generation:
                return self._held[1]
            keys = policies.pod_label_keys()
            last = None if self._held is None else self._held[1].shapes
            shapes = last if last is not None and last.fits(state, keys) and (
                last.label_keys == keys) else pod_shapes(state, keys)  # fmt: skip
            held = Held(facts, self._jobs.update(state, facts), shapes)
            self._held = (generation, held)
            self.found_last += 1
            return held

    def warm(self) -> bool:
        """Bring the held facts, jobs and pod shapes up to date for the view's current
        generation, and (once per policy set) intern each pod class's endpoint in the live
        policy set's caches (`warm_selectors`), as the first request would (the background
        warm-up: `agent.runtime.whatif_warmer`), so that request does not pay for it; False
        (nothing done) before the caches are synced."""
        if not self._ready():
            return False
        state, policies, facts, generation = self._view()
        held = self.held(facts, state, generation, policies=policies)
        if held.shapes is not None and policies is not self._warmed:
            warm_selectors(policies, state, held.shapes)
            self._warmed = policies
        return True

    def radius(self, change: Change) -> BlastRadius:
        """The blast radius of `change` on the cluster as the agent holds it now."""
        if not self._ready():
            raise UnavailableError("caches are not synced yet; retry later")
        state, policies, facts, generation = self._view()
        held = self.held(facts, state, generation, policies=policies)
        after = changed_cluster(state, policies, change)
        return blast_radius(Cluster(state, policies), after, settings=self._settings, held=held)

    def delete(self, targets: tuple[str, ...]) -> dict[str, Any]:
        """The JSON form of deleting `targets` (the Slack command's `whatif delete ...`)."""
        return self.whatif(Change(delete=_delete_targets(list(targets))))

    def whatif(self, change: Change) -> dict[str, Any]:
        """The JSON form (`BlastRadius.to_dict`, as `zonemedic whatif --output json`)."""
        return self.radius(change).to_dict()

