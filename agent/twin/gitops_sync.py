"""A simulated GitOps sync: the scenario's Git-managed manifests applied again on an interval.

What Argo CD's default sync does: `kubectl apply` (client-side) of each desired manifest under
the field manager `argocd-controller`, with kubectl's `last-applied-configuration` annotation:
a strategic-merge patch of the manifest onto the live object, so every field the manifest names
goes back to its desired value and a field only the live object has (a patch of someone else's,
say a zone pin) stays. The manifests carry the application's tracking label
(`argocd.argoproj.io/instance`). The first sync creates what is missing; the next run every
`interval` model seconds. `syncs` counts the completed ones (for tests and the demo); an object
the server refuses is counted in `failures` and the sync goes on with the others.

Built by the twin cluster for a scenario with `gitops:`; it is a twin controller (its own queue,
no subscriptions). It does not diff, prune or report sync status as Argo CD does.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from agent.twin.apierror import ApiError
from agent.twin.clock import TwinClock
from agent.twin.controller import Controller, Subscription
from agent.twin.patch import PatchType
from agent.twin.resources import by_kind
from agent.twin.store import Obj, Store

log = logging.getLogger(__name__)
MANAGER = "argocd-controller"
INSTANCE_LABEL = "argocd.argoproj.io/instance"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_SYNC = "sync"


def desired(manifest: Mapping[str, Any], application: str) -> Obj:
    """The manifest as the sync applies it: the application's label and kubectl's annotation of
    the manifest itself (without that annotation), as `kubectl apply` writes it."""
    out = copy.deepcopy(dict(manifest))
    meta = out.setdefault("metadata", {})
    meta.setdefault("labels", {})[INSTANCE_LABEL] = application
    applied = json.dumps(out, sort_keys=True, separators=(",", ":"))
    meta.setdefault("annotations", {})[LAST_APPLIED] = applied + "\n"
    return out


class GitOpsSync(Controller):
    """Re-applies `manifests` of `application` every `interval` model seconds."""

    def __init__(self, store: Store, *, clock: TwinClock, manifests: Sequence[Mapping[str, Any]],
                 application: str, interval: float) -> None:  # fmt: skip
        super().__init__(store, name=MANAGER, clock=clock)
        self.manifests = [desired(m, application) for m in manifests]
        self.interval = interval
        self.syncs = 0
        self.failures = 0

    def _subscriptions(self) -> list[Subscription]:
        return []

    def start(self) -> None:
        super().start()
        self._queue.add_after(_SYNC, self.interval)

    def sync_now(self) -> None:
        """Run a sync at once (the demo's "sync" button), besides the periodic ones."""
        self._queue.add(_SYNC)

    def apply(self, manifest: Mapping[str, Any]) -> Obj:
        """Apply one manifest as `kubectl apply` does: create it, or strategic-merge it onto the
        live object (under the current field manager: the sync's own, in a reconcile)."""
        rt = by_kind(str(manifest.get("apiVersion")), str(manifest.get("kind")))
        meta = manifest.get("metadata") or {}
        name, namespace = str(meta.get("name")), meta.get("namespace")
        try:
            self._store.get_ref(rt, name, namespace=namespace)
        except ApiError as exc:
            if exc.code != 404:
                raise
            return self._store.create(rt, manifest, namespace=namespace)
        # kubectl sends a strategic-merge patch for a built-in kind, a merge patch otherwise
        patch_type = PatchType.STRATEGIC if rt.builtin else PatchType.MERGE
        return self._store.patch(rt, name, manifest, namespace=namespace, patch_type=patch_type)

    def _reconcile(self, key: Hashable) -> float | None:
        for manifest in self.manifests:
            try:
                self.apply(manifest)
            except ApiError as exc:  # a sync that fails on one object goes on (Argo CD: OutOfSync)
                self.failures += 1
                log.info("gitops sync refused", extra={"error": exc.message})
        self.syncs += 1
        return self.interval
