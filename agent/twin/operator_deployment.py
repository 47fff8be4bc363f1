"""The twin's apps/v1 Deployment and ReplicaSet controllers.

Started by `cluster.TwinCluster`. A Deployment owns one ReplicaSet per pod-template hash
(`<deployment>-<hash>`, label `pod-template-hash`); a template change creates the new ReplicaSet at
full size and scales the old ones to zero (a rollout without surge accounting). A ReplicaSet keeps
`spec.replicas` live pods named `<replicaset>-<5 chars>`. Both write their status counters. It does
not implement rollout history, pause, or progress deadlines.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Hashable, Mapping
from typing import Any, cast

from agent.twin.apierror import ApiError
from agent.twin.clock import TwinClock
from agent.twin.controller import Controller, Subscription, owned_by
from agent.twin.operator_events import EventRecorder
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from agent.twin.scheduler_terms import label_selector_matches
from agent.twin.store import Store
from agent.twin.watch import WatchEvent

log = logging.getLogger(__name__)

PODS = lookup("pods")
DEPLOYMENTS = lookup("deployments", group="apps")
REPLICASETS = lookup("replicasets", group="apps")
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"


def template_hash(template: Mapping[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    number = int(digest[:16], 16)
    out = ""
    for _ in range(10):
        number, rest = divmod(number, len(alphabet))
        out += alphabet[rest]
    return out


def _owner(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"apiVersion": "apps/v1", "kind": kind, "name": meta.get("name"), "uid": meta.get("uid"),
            "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def _live(pod: Mapping[str, Any]) -> bool:
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and (
        pod.get("status") or {}
    ).get("phase") not in ("Succeeded", "Failed")


def _ready(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


class DeploymentController(Controller):
    def __init__(self, store: Store, *, clock: TwinClock) -> None:
        super().__init__(store, name="deployment-controller", clock=clock)
        self._events = EventRecorder(store, component="deployment-controller")

    def _subscriptions(self) -> list[Subscription]:
        return [
            Subscription(DEPLOYMENTS, self._on_object("Deployment"), since="0"),
            Subscription(REPLICASETS, self._on_object("ReplicaSet"), since="0"),
            Subscription(PODS, self._on_pod),
        ]

    def _on_object(self, kind: str) -> Any:
        def handle(event: WatchEvent) -> None:
            meta = event.object.get("metadata") or {}
            ns = str(meta.get("namespace"))
            if event.type != "DELETED":
                self._queue.add((kind, ns, str(meta.get("name"))))
            for ref in meta.get("ownerReferences") or []:
                if ref.get("kind") == "Deployment" and ref.get("controller"):
                    self._queue.add(("Deployment", ns, str(ref.get("name"))))

        return handle

    def _on_pod(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "ReplicaSet" and ref.get("controller"):
                self._queue.add(("ReplicaSet", str(meta.get("namespace")), str(ref.get("name"))))

    def _reconcile(self, raw: Hashable) -> float | None:
        kind, namespace, name = cast(tuple[str, str, str], raw)
        if kind == "Deployment":
            self._deployment(namespace, name)
        else:
            self._replicaset(namespace, name)
        return None

    def _deployment(self, namespace: str, name: str) -> None:
        dep = self._get_live(DEPLOYMENTS, name, namespace=namespace)
        if dep is None:
            return
        meta = dep.get("metadata") or {}
        spec = dep.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        template = spec.get("template") or {}
        tag = template_hash(template)
        rs_name = f"{name}-{tag}"
        owned = [
            rs
            for rs in self._store.list(REPLICASETS, namespace=namespace)[0]
            if owned_by(rs, str(meta.get("uid")))
        ]
        revisions = [
            int((rs["metadata"].get("annotations") or {}).get(REVISION, "0")) for rs in owned
        ]
        current = next((rs for rs in owned if rs["metadata"]["name"] == rs_name), None)
        if current is None:
            new_template = copy.deepcopy(template)
            new_template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = tag
            selector = copy.deepcopy(spec.get("selector") or {})
            selector.setdefault("matchLabels", {})[HASH_LABEL] = tag
            new_rs: dict[str, Any] = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": rs_name,
                    "namespace": namespace,
                    "labels": {**(new_template["metadata"].get("labels") or {})},
                    "annotations": {REVISION: str(max(revisions, default=0) + 1)},
                    "ownerReferences": [_owner("Deployment", dep)],
                },
                "spec": {"replicas": replicas, "selector": selector, "template": new_template},
            }
            try:
                current = self._store.create(REPLICASETS, new_rs)
                self._events.record(dep, reason="ScalingReplicaSet",
                                    message=f"Scaled up replica set {rs_name} to {replicas}")  # fmt: skip
            except ApiError as exc:
                if exc.code != 409:
                    raise
                return
        elif int((current.get("spec") or {}).get("replicas", 0)) != replicas:
            self._scale(current, replicas)
        for rs in owned:
            if (
                rs["metadata"]["name"] != rs_name
                and int((rs.get("spec") or {}).get("replicas", 0)) != 0
            ):
                self._scale(rs, 0)
                self._events.record(dep, reason="ScalingReplicaSet",
                                    message=f"Scaled down replica set {rs['metadata']['name']} to 0")  # fmt: skip
        total = sum(int((rs.get("status") or {}).get("replicas", 0)) for rs in owned)
        ready = sum(int((rs.get("status") or {}).get("readyReplicas", 0)) for rs in owned)
        updated = int(((current or {}).get("status") or {}).get("replicas", 0))
        status = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": total,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": max(0, replicas - ready),
            "conditions": [
                {"type": "Available", "status": "True" if ready >= replicas else "False",
                 "reason": "MinimumReplicasAvailable" if ready >= replicas else "MinimumReplicasUnavailable"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"
                 if updated >= replicas else "ReplicaSetUpdated"},
            ],
        }  # fmt: skip
        if status != {k: (dep.get("status") or {}).get(k) for k in status}:
            try:
                self._store.patch(DEPLOYMENTS, name, {"status": status}, namespace=namespace,
                                  patch_type=PatchType.MERGE, subresource="status")  # fmt: skip
            except ApiError as exc:
                log.debug("deployment status not written: %s", exc.message)

    def _scale(self, rs: Mapping[str, Any], replicas: int) -> None:
        meta = rs.get("metadata") or {}
        try:
            self._store.patch(REPLICASETS, str(meta.get("name")), {"spec": {"replicas": replicas}},
                              namespace=str(meta.get("namespace")), patch_type=PatchType.MERGE)  # fmt: skip
        except ApiError as exc:
            log.debug("scale of %s not written: %s", meta.get("name"), exc.message)

    def _replicaset(self, namespace: str, name: str) -> None:
        rs = self._get_live(REPLICASETS, name, namespace=namespace)
        if rs is None:
            return
        meta = rs.get("metadata") or {}
        spec = rs.get("spec") or {}
        uid = str(meta.get("uid"))
        pods = [
            p for p in self._store.list(PODS, namespace=namespace)[0]
            if owned_by(p, uid) and label_selector_matches(spec.get("selector") or {}, p["metadata"].get("labels") or {})
        ]  # fmt: skip
        live = [p for p in pods if _live(p)]
        want = int(spec.get("replicas", 1))
        if len(live) < want:
            template = copy.deepcopy(spec.get("template") or {})
            for _ in range(want - len(live)):
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "generateName": f"{name}-",
                        "namespace": namespace,
                        "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                        "annotations": dict(
                            (template.get("metadata") or {}).get("annotations") or {}
                        ),
                        "ownerReferences": [_owner("ReplicaSet", rs)],
                    },
                    "spec": copy.deepcopy(template.get("spec") or {}),
                }
                live.append(self._store.create(PODS, pod))
        elif len(live) > want:
            # Delete the least advanced first: unscheduled, then pending, then the newest.
            def rank(p: Mapping[str, Any]) -> tuple[int, int, str]:
                bound = 1 if (p.get("spec") or {}).get("nodeName") else 0
                running = 1 if (p.get("status") or {}).get("phase") == "Running" else 0
                return (bound, running, str(p["metadata"].get("creationTimestamp", "")))

            surplus = sorted(live, key=rank)[: len(live) - want]
            for pod in surplus:
                try:
                    self._store.delete(PODS, pod["metadata"]["name"], namespace=namespace)
                except ApiError:
                    continue
            live = [p for p in live if p not in surplus]
        status = {
            "replicas": len(live),
            "fullyLabeledReplicas": len(live),
            "readyReplicas": sum(1 for p in live if _ready(p)),
            "availableReplicas": sum(1 for p in live if _ready(p)),
            "observedGeneration": meta.get("generation", 1),
        }
        if status != {k: (rs.get("status") or {}).get(k) for k in status}:
            try:
                self._store.patch(REPLICASETS, name, {"status": status}, namespace=namespace,
                                  patch_type=PatchType.MERGE, subresource="status")  # fmt: skip
            except ApiError as exc:
                log.debug("replicaset status not written: %s", exc.message)
