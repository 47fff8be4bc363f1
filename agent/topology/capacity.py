"""Schedulable GPU capacity per zone, excluding a given job's own pods.

Free GPUs of zone Z for job J: over nodes in Z that are not cordoned, the sum of allocatable
`nvidia.com/gpu` minus the GPU requests of live pods outside J on that node (never below zero per
node). GPU taints do not count against a zone: the fix adds the toleration. `CapacityIndex` is
built once per snapshot so each job's figure costs only the nodes its own pods sit on. Called by
`agent.diagnosis`. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agent.model.cluster import Node, Pod


class CapacityIndex:
    """GPU allocatable and use per node, and free GPUs per zone, for a whole cluster."""

    def __init__(
        self,
        nodes: Mapping[str, Node],
        pods: Iterable[Pod],
        *,
        used: Mapping[str, int] | None = None,
        free: Mapping[str, int] | None = None,
    ) -> None:
        """`used` (GPUs of live bound pods per node) and `free` (free GPUs per zone), when the
        caller counted them already: then `pods` is not read, nor every node."""
        self._nodes = nodes
        counted: dict[str, int] = {}
        for pod in pods if used is None else ():
            if pod.gpu_request and pod.node_name is not None and pod.live:
                counted[pod.node_name] = counted.get(pod.node_name, 0) + pod.gpu_request
        self._used: Mapping[str, int] = used if used is not None else counted  # read, not copied
        self._free: dict[str, int] = {}
        if used is not None and free is not None:
            self._free.update(free)
            return
        for node in nodes.values():
            zone = node.zone
            if zone is None:
                continue
            self._free.setdefault(zone, 0)
            if node.unschedulable:
                continue
            self._free[zone] += self._node_free(node, 0)

    def _node_free(self, node: Node, own: int) -> int:
        return max(0, node.gpu_allocatable - (self._used.get(node.name, 0) - own))

    def free_gpus(self, job_pods: Iterable[Pod] = ()) -> dict[str, int]:
        """Free GPUs per zone if `job_pods` (live pods of one job) did not exist."""
        own: dict[str, int] = {}
        for pod in job_pods:
            if pod.gpu_request and pod.node_name is not None and pod.live:
                own[pod.node_name] = own.get(pod.node_name, 0) + pod.gpu_request
        free = dict(self._free)
        for node_name, gpus in own.items():
            node = self._nodes.get(node_name)
            if node is None or node.zone is None or node.unschedulable:
                continue
            free[node.zone] += self._node_free(node, gpus) - self._node_free(node, 0)
        return free
