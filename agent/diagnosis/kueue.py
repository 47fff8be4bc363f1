"""Why Kueue let a job it manages split across zones, and the Kueue configuration that fixes it.

Called by `agent.diagnosis.diagnose` for a split job (pods in several zones) whose object carries
Kueue's queue label. Reads the job's PodSet requests (`TrainingJobObject.topology`, one PodSet per
gang pod template) and the cluster's Kueue objects (`ClusterState.kueue`). The causes, first
that applies:

1. TAS not configured: no flavor the job can use (its admission's, else its ClusterQueue's)
   names a Topology that has the zone level. Proposed: a Topology with zone and hostname levels
   and each of those flavors with `topologyName` set to it (the platform team's change), then the
   job's annotations as in 2.
2. No topology request: a PodSet carries no `podset-required-topology` (Kueue then places it on
   its own, by implied or unconstrained TAS, anywhere in the flavor).
3. A required level wider than the zone (before the zone in the Topology's levels, or not one of
   its levels).
4. Only a preferred level (`podset-preferred-topology`): TAS falls back to a wider domain.
5. Coordinator and workers in different PodSets without one `podset-group-name`.

The job's own requests are read from its Workload's PodSet templates when its Workload is known
(Kueue copies the job's templates into the Workload before admission, then injects
`podset-unconstrained-topology: "true"` into the running templates of a PodSet that asked for no
level: that is Kueue's, not the job's), else from the job's templates. Its PodSets' pod counts
are the Workload's, else the job's.

For 2-5 the proposal is the annotations to add to every gang pod template: the zone as the
required level, one group name when the job has two PodSets (Kueue groups exactly two), the
preferred and unconstrained annotations removed (Kueue admits one topology annotation per
template) -- for a Kubeflow job on its replica specs, for a JobSet on its replicated jobs' pod
templates, for a TrainJob in zonemedic's own `runtimePatches` entry. Those the Kueue fix can
apply on approval (`agent_fixable`). A gang `podset-group-name` cannot group -- more than two
PodSets, or two that each run more than one pod (Kueue groups exactly two, one of them a single
pod) -- gets advice that says so and proposes the per-PodSet requests (no group name) plus a
ResourceFlavor pinned to the target zone (`zone`: where the policies allow every required flow
and the job fits; `<zone>` when none is known) for its ClusterQueue (the platform team's
change), nothing the agent applies. A split job whose requests are already zone-level and
grouped gets no advice (something else split it). Pure: nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import yaml

from agent.model.cluster import ZONE_LABEL, TrainingJobObject
from agent.model.descriptor import TemplateLayout
from agent.model.kueue import (
    HOSTNAME_LEVEL,
    NO_REQUEST,
    KueueAdvice,
    KueueCause,
    KueueObjects,
    KueueWorkload,
    PodSetTopology,
    wanted_annotations,
)
from agent.model.workload import (
    KUEUE,
    KUEUE_RESOURCE_FLAVOR,
    KUEUE_TOPOLOGY,
    TRAINJOB_PATCH_MANAGER,
    workload,
)

PROPOSED_TOPOLOGY = "zonemedic-zone"  # the name of a proposed Topology when none fits


def _set_only(values: Mapping[str, str | None]) -> dict[str, str]:
    return {k: v for k, v in values.items() if v is not None}


def annotations_yaml(job: TrainingJobObject, *, grouped: bool = True) -> str:
    """The job-side change as YAML: a merge patch of the pod templates' annotations (replica
    specs), the annotations per replicated job of a JobSet (a list a merge patch would replace
    whole: merged into each one named), or zonemedic's own runtime-patch entry of a TrainJob.
    `grouped` False: no group name (PodSets Kueue cannot group)."""
    wanted = wanted_annotations(job.name, job.pod_sets, job.topology, grouped=grouped)
    kind = workload(job.kind)
    head = f"# {job.kind.value} {job.namespace}/{job.name}: pod-template annotations for Kueue TAS\n"
    body: Any
    if kind.templates.layout is TemplateLayout.REPLICA_SPECS:
        body = {"spec": {kind.templates.field: {
            replica: {"template": {"metadata": {"annotations": values}}}
            for replica, values in wanted.items()}}}  # fmt: skip
    elif kind.materialised is not None:
        head += "# (its own runtimePatches entry; the Trainer merges it into the JobSet)\n"
        rjobs = [{"name": replica, "template": {"spec": {"template": {"metadata": {
            "annotations": _set_only(values)}}}}} for replica, values in wanted.items()]  # fmt: skip
        body = {"spec": {"runtimePatches": [{
            "manager": TRAINJOB_PATCH_MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": rjobs}}}}]}}  # fmt: skip
    else:
        head += "# (merged into each replicated job named, while the JobSet is suspended)\n"
        body = {"spec": {"replicatedJobs": [
            {"name": replica, "template": {"spec": {"template": {"metadata": {
                "annotations": values}}}}} for replica, values in wanted.items()]}}  # fmt: skip
    return head + yaml.safe_dump(body, sort_keys=False, default_flow_style=False)


def pinned_flavor_yaml(objects: KueueObjects, *, flavor: str, zone: str | None) -> str:
    """A ResourceFlavor that pins every PodSet of its workloads to one zone (its nodeLabels),
    keeping the flavor's Topology: the Kueue-side way to keep a gang of more than two PodSets
    together, to be given to the job's ClusterQueue (or a ClusterQueue of its own)."""
    found = objects.flavors.get(flavor)
    where = zone or "<zone>"
    spec: dict[str, Any] = {"nodeLabels": {**(found.node_labels if found else {}), ZONE_LABEL: where}}
    if found is not None and found.topology:
        spec["topologyName"] = found.topology
    doc = {"apiVersion": KUEUE_RESOURCE_FLAVOR.api_version, "kind": KUEUE_RESOURCE_FLAVOR.kind.value,
           "metadata": {"name": f"{flavor}-{where}"}, "spec": spec}  # fmt: skip
    return ("# a flavor pinned to one zone, for the job's ClusterQueue (platform team)\n"
            + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))


def own_requests(job: TrainingJobObject, admitted: KueueWorkload | None) -> TrainingJobObject:
    """The job with its PodSets' own TAS requests and pod counts: its Workload's (PodSets
    matched by name, case aside: Kueue names a replica type's PodSet in lower case) when the
    Workload has a PodSet of each, else the job's own templates' and counts."""
    if admitted is None or not admitted.pod_sets:
        return job
    by_name = {p.lower(): p for p in admitted.pod_sets}
    names = {r: by_name.get(r.lower()) for r in job.pod_sets}
    if None in names.values():
        return job
    topology = {r: admitted.requests[n] for r, n in names.items() if n is not None and n in admitted.requests}
    counts = {**job.pod_counts, **{r: admitted.counts[n] for r, n in names.items()
                                   if n is not None and n in admitted.counts}}  # fmt: skip
    return replace(job, topology=topology, pod_counts=counts)


def _ungroupable(job: TrainingJobObject) -> str | None:
    """Why `podset-group-name` cannot keep the job's gang in one zone: more than two PodSets,
    or two that each run more than one pod (Kueue groups exactly two, one a single pod)."""
    sets = job.pod_sets
    rule = f"{KUEUE.group_annotation} cannot group (Kueue groups exactly two, one of them a single pod)"
    if len(sets) > 2:
        return f"its gang spans {len(sets)} PodSets ({', '.join(sets)}), which {rule}"
    counts = [job.pod_counts.get(r) for r in sets]
    if len(sets) == 2 and all(c is not None and c > 1 for c in counts):
        each = " and ".join(f"{r}: {c} pods" for r, c in zip(sets, counts, strict=True))
        return f"its gang's two PodSets each run more than one pod ({each}), which {rule}"
    return None


def _flavors_of(job: TrainingJobObject, objects: KueueObjects, cluster_queue: str | None) -> list[str]:
    admitted = objects.workload_of(job.kind.value, job.namespace, job.name)
    if admitted is not None and admitted.assignments:
        return list(dict.fromkeys(f for a in admitted.assignments for f in a.flavors.values()))
    queue = objects.cluster_queues.get(cluster_queue or "")
    return list(queue.flavors) if queue is not None else []


def _zone_topology(objects: KueueObjects, flavor: str) -> tuple[str, ...] | None:
    """The levels of the Topology the flavor names, when it has the zone level."""
    found = objects.flavors.get(flavor)
    topology = objects.topologies.get(found.topology or "") if found is not None else None
    if topology is None or ZONE_LABEL not in topology.levels:
        return None
    return topology.levels


def configuration_yaml(objects: KueueObjects, flavors: Sequence[str]) -> str:
    """The platform-side change: a Topology with the zone and hostname levels (an existing one
    with a zone level is reused), and each flavor naming it."""
    existing = next((t for t in objects.topologies.values() if ZONE_LABEL in t.levels), None)
    docs: list[dict[str, Any]] = []
    name = existing.name if existing is not None else PROPOSED_TOPOLOGY
    if existing is None:
        docs.append({"apiVersion": KUEUE_TOPOLOGY.api_version, "kind": KUEUE_TOPOLOGY.kind.value,
                     "metadata": {"name": name},
                     "spec": {"levels": [{"nodeLabel": ZONE_LABEL},
                                         {"nodeLabel": HOSTNAME_LEVEL}]}})  # fmt: skip
    for flavor in flavors or ("default-flavor",):
        found = objects.flavors.get(flavor)
        spec: dict[str, Any] = {}
        if found is not None and found.node_labels:
            spec["nodeLabels"] = dict(found.node_labels)
        spec["topologyName"] = name
        docs.append({"apiVersion": KUEUE_RESOURCE_FLAVOR.api_version,
                     "kind": KUEUE_RESOURCE_FLAVOR.kind.value, "metadata": {"name": flavor},
                     "spec": spec})  # fmt: skip
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)


def _request_cause(
    job: TrainingJobObject, levels: Sequence[str]
) -> tuple[KueueCause, str] | None:
    requests: Mapping[str, PodSetTopology] = {r: job.topology.get(r, NO_REQUEST)
                                              for r in job.pod_sets}  # fmt: skip
    zone_at = levels.index(ZONE_LABEL)
    bare = [r for r, t in requests.items() if t.required is None and t.preferred is None]
    if bare:
        return KueueCause.NO_REQUEST, (
            f"PodSet(s) {', '.join(bare)} carry no {KUEUE.topology_annotation}: Kueue places "
            "each on its own, anywhere in the flavor's topology")
    wide = [f"{r} ({t.required})" for r, t in requests.items() if t.required is not None
            and (t.required not in levels or levels.index(t.required) < zone_at)]  # fmt: skip
    if wide:
        return KueueCause.WIDER_THAN_ZONE, (
            f"PodSet(s) {', '.join(wide)} require a level wider than the zone: one domain of that "
            "level spans several zones")
    preferred = [r for r, t in requests.items() if t.required is None]
    if preferred:
        return KueueCause.PREFERRED_ONLY, (
            f"PodSet(s) {', '.join(preferred)} only prefer a level "
            f"({KUEUE.preferred_annotation}): Kueue falls back to a wider domain when it must")
    groups = {t.group for t in requests.values()}
    if len(requests) > 1 and (None in groups or len(groups) > 1):
        return KueueCause.UNGROUPED, (
            f"the coordinator and the workers are in different PodSets ({', '.join(requests)}) "
            f"without one {KUEUE.group_annotation}: Kueue puts each PodSet in a zone of its own")
    return None


def kueue_advice(
    job: TrainingJobObject | None, objects: KueueObjects, *, zone: str | None = None
) -> KueueAdvice | None:
    """Why Kueue let this split job split, and what to add; None when Kueue does not manage it
    or its requests already keep it in one zone. `zone`: the finding's target zone (where the
    policies allow every required flow and the job fits), None when none is known."""
    if job is None:
        return None
    queue = job.labels.get(KUEUE.queue_label)
    if not queue:
        return None
    local = objects.local_queues.get((job.namespace, queue))
    cluster_queue = local.cluster_queue if local is not None else None
    admitted = objects.workload_of(job.kind.value, job.namespace, job.name)
    job = own_requests(job, admitted)
    flavors = _flavors_of(job, objects, cluster_queue)
    tas = [(f, levels) for f in flavors if (levels := _zone_topology(objects, f)) is not None]
    wl_name = admitted.name if admitted is not None else None
    if not tas:
        missing = ", ".join(flavors) or "none known"
        return KueueAdvice(
            cause=KueueCause.TAS_NOT_CONFIGURED, queue=queue, cluster_queue=cluster_queue,
            workload=wl_name, flavor=flavors[0] if flavors else None,
            message=(f"Kueue Topology Aware Scheduling is not configured for this job's flavors "
                     f"({missing}): no Topology with a {ZONE_LABEL} level is named by their "
                     "topologyName. Add it (platform team), then annotate the job's pod templates"),
            proposal=configuration_yaml(objects, flavors) + "---\n" + annotations_yaml(job),
        )  # fmt: skip
    flavor, levels = tas[0]
    found = _request_cause(job, levels)
    if found is None:
        return None
    cause, why = found
    ungroupable = _ungroupable(job)
    fixable = bool(job.pod_sets) and ungroupable is None
    proposal = annotations_yaml(job, grouped=ungroupable is None)
    if ungroupable is not None:
        where = f"a flavor of {zone}" if zone is not None else "a flavor of one zone"
        why += (f"; {ungroupable}: a zone-level request per PodSet keeps each in one zone but "
                f"not all in the same one. Pin the job's ClusterQueue to {where} (platform "
                "team), or run the gang as at most two PodSets, one of them a single pod (the "
                "coordinator); zonemedic writes nothing")  # fmt: skip
        proposal += "---\n" + pinned_flavor_yaml(objects, flavor=flavor, zone=zone)
    return KueueAdvice(cause=cause, queue=queue, cluster_queue=cluster_queue, workload=wl_name,
                       flavor=flavor, agent_fixable=fixable,
                       message=f"Kueue let the job split: {why}",
                       proposal=proposal)  # fmt: skip
