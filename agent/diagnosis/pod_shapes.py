"""The pods of one cluster state by shape: pods that share namespace, service account, declared
ports (equal tuples) and the values of a set of label keys are one shape, so any policy
set reading only those keys puts them in the same identity class
(`agent.diagnosis.reachability`).

Built once per cache generation by the agent's what-if (`agent.runtime.whatif.LiveWhatIf.held`,
over the live policy set's selector keys) and read by `agent.diagnosis.flow_universe.group_pods`,
which then classifies one pod per shape instead of every pod. Shapes are numbered in the order
their first pod comes in the state, so classes interned shape by shape get the numbers they get
pod by pod. What it does not do: know any policy, or hold anything across states. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.model.cluster import ClusterState, Pod

PodKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class PodShapes:
    """`state`'s pods (`pods`, the state's own tuple) by shape over `label_keys`: `shape_of[i]`
    is the shape of `pods[i]`, `first[s]` the first pod of shape `s`, `members[s]` the indices
    (in `pods`, ascending) of its pods, `keys[i]` the key of `pods[i]`."""

    pods: tuple[Pod, ...]
    label_keys: frozenset[str]
    shape_of: tuple[int, ...]
    first: tuple[Pod, ...]
    keys: tuple[PodKey, ...]
    members: tuple[tuple[int, ...], ...]

    def fits(self, state: ClusterState, label_keys: frozenset[str]) -> bool:
        """True when these are `state`'s pods and a grouping over `label_keys` reads no key more."""
        return state.pods is self.pods and label_keys <= self.label_keys


def pod_shapes(state: ClusterState, label_keys: frozenset[str]) -> PodShapes:
    """The shapes of `state`'s pods over `label_keys`."""
    ordered = tuple(sorted(label_keys))
    ids: dict[tuple[object, ...], int] = {}
    first: list[Pod] = []
    shape_of: list[int] = []
    members: list[list[int]] = []
    # equal port tuples (often distinct objects) are one: each object's value hashed once
    port_ids: dict[int, int] = {}
    port_values: dict[tuple[object, ...], int] = {}
    keys: list[PodKey] = []
    for index, pod in enumerate(state.pods):
        ns, pod_ports = pod.namespace, pod.ports
        ports = port_ids.get(id(pod_ports))
        if ports is None:
            ports = port_ids[id(pod_ports)] = port_values.setdefault(pod_ports, len(port_values))
        raw = (ns, pod.service_account, ports, *map(pod.labels.get, ordered))
        shape = ids.get(raw)
        if shape is None:
            shape = ids[raw] = len(first)
            first.append(pod)
            members.append([index])
        else:
            members[shape].append(index)
        shape_of.append(shape)
        keys.append((ns, pod.name))
    return PodShapes(state.pods, frozenset(label_keys), tuple(shape_of), tuple(first),
                     tuple(keys), tuple(map(tuple, members)))  # fmt: skip
