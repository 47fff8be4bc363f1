"""What `explain` and `whatif` read from a live cluster: a read-only listing through the kubeconfig.

Called by `agent.commands.explain` and `agent.commands.whatif` (without `--snapshot`). It lists
namespaces, nodes, pods, NetworkPolicies and the Cilium policies (when the API serves them), and
gets `kube-system/cilium-config` and the `cilium` DaemonSet (when they are there), through the
official client's connection and auth (`agent.sources.kubeapi`: `--kubeconfig`/`--context`, else
in-cluster, else ~/.kube/config). Each item gets its `apiVersion` and `kind` back (the API leaves
them off list items), so `agent.snapshot.collection.parse_objects` reads them as it reads a dump;
a served `cilium.io` group is dataplane evidence even with no Cilium policy. A cluster that cannot
be reached raises `UnavailableError` (exit 1). What it does not do: watch, or write.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.snapshot.collection import Snapshot

# (path, apiVersion of the items, kind of the items, optional: absent when the API is not served)
LIVE_LISTS = (
    ("/api/v1/namespaces", "v1", "Namespace", False),
    ("/api/v1/nodes", "v1", "Node", False),
    ("/api/v1/pods", "v1", "Pod", False),
    ("/apis/networking.k8s.io/v1/networkpolicies", "networking.k8s.io/v1", "NetworkPolicy", False),
    ("/apis/cilium.io/v2/ciliumnetworkpolicies", "cilium.io/v2", "CiliumNetworkPolicy", True),
    ("/apis/cilium.io/v2/ciliumclusterwidenetworkpolicies", "cilium.io/v2",
     "CiliumClusterwideNetworkPolicy", True),
)
LIVE_OBJECTS = (
    ("/api/v1/namespaces/kube-system/configmaps/cilium-config", "v1", "ConfigMap"),
    ("/apis/apps/v1/namespaces/kube-system/daemonsets/cilium", "apps/v1", "DaemonSet"),
)




@dataclass(frozen=True)
class LiveObjects:
    """The listed objects, and the optional API groups found served."""

    items: list[dict[str, Any]]
    served: tuple[str, ...]


def read_live(*, kubeconfig: str | None, context: str | None) -> LiveObjects:
    """List what an explanation or a what-if reads from the live cluster."""
    from agent.settings import KubernetesSettings
    from agent.sources.kubeapi import KubeApi, KubeApiError, build_api_client

    api = KubeApi(build_api_client(KubernetesSettings(kubeconfig=kubeconfig, context=context)))
    items: list[dict[str, Any]] = []
    served: list[str] = []
    try:
        for path, api_version, kind, optional in LIVE_LISTS:
            try:
                body = api.json("GET", path, timeout=60)
            except KubeApiError as exc:
                if optional and exc.status == 404:
                    continue
                raise
            if optional:
                served.append(f"API group {api_version}")
            for item in body.get("items") or ():
                items.append({**item, "apiVersion": api_version, "kind": kind})
        for path, api_version, kind in LIVE_OBJECTS:
            try:
                items.append({**api.json("GET", path, timeout=30), "apiVersion": api_version,
                              "kind": kind})  # fmt: skip
            except KubeApiError as exc:
                if exc.status not in (403, 404):
                    raise
    finally:
        api.api_client.close()
    return LiveObjects(items, tuple(dict.fromkeys(served)))


def live_snapshot(live: LiveObjects, extra: Iterable[dict[str, Any]] = ()) -> Snapshot:
    """The listed objects (then `extra`, which win for the same object) parsed as a snapshot."""
    from agent.snapshot.collection import parse_objects

    snapshot = parse_objects([*live.items, *extra], source="the live cluster")
    if live.served:
        evidence = snapshot.evidence
        cilium = (*evidence.cilium, *live.served)[:3]
        snapshot = dataclasses.replace(
            snapshot, evidence=dataclasses.replace(evidence, cilium=cilium)
        )
    return snapshot
