"""Where a job being created goes: one zone with room for its whole gang where the policies allow
every flow it needs, and the patch that keeps it there.

Who calls it: `agent.admission.webhook`, for every admission request, with the watch cache's
parsed view (`View`: the cluster state, the policy set and the facts the next diagnosis reads;
nothing is read from the API server). Pure: the object, the view and a kept decision in, a
`Decision` out (no clock, no I/O).

How, for a subject (`agent.admission.subject`) of a training kind or a generic group:
- passed unchanged, with a warning that says why: a TrainJob (its pod templates come from its
  runtime: its JobSet, which the Trainer creates, is placed when it is created); a protected
  namespace; an object whose pod count cannot be read; a job already kept in one zone (every gang
  template pins the same zone by nodeSelector or required node affinity, or, on a Kueue job,
  Kueue's own topology request already does); templates pinned to different zones by their
  author; nothing to co-locate (one pod, unless a group's first object kept a zone: the group's
  later objects take it whatever their size; or one zone in the cluster);
- the job's pods are modelled as its operator will make them (their labels, service account,
  ports, GPUs) and grouped into a job as the diagnosis groups live pods (`agent.topology.jobs`);
  its required flows (`agent.topology.flows`) are checked by the diagnosis's reachability with
  every pod moved to each zone (zone-mirroring labels set to it: a pod whose template does not
  carry one gets it, as whatever mirrors the node's zone will label it); the zones where none is denied
  and whose free GPUs cover the job's request are the candidates, ranked as the diagnosis ranks a
  split job's target zone (`choose_target_zone`: most of the job's GPUs already there, for a
  group with live pods; then most free GPUs; then the name);
- the first candidate the remediation planner accepts is the zone (`plan_remediation` for a
  training kind: its room check over the zone's nodes as the cache holds them, GPUs counted per
  node; for a group's workload the planner's own template retargeting and room check): the
  patch writes exactly the plan's template changes (zone pin, the taint tolerations, the
  zone-mirroring label, the self pod affinity on the zone where the kind lets affinity change),
  as a JSON patch from the object as sent (the planned object shares every part the changes do
  not reach with it, so the diff walks only what changed). The planner is handed the zone's
  nodes by node shape (`agent.admission.zone_nodes`: nodes alike in taints, cordon and the
  labels the templates' placement reads are one shape; the hostname is not read): of each shape
  the nodes with the most free GPUs, as many as the job has pods (a gang never needs more), so
  a zone of 800 nodes costs what its shapes cost; the
  tolerations come out the same (one node of a shape has its taints) and the room check judges
  the nodes the gang would fill first;
- a Kueue-managed training job (its kind's queue label) gets Kueue's Topology Aware Scheduling
  annotations on every gang template instead (`agent.model.kueue.wanted_annotations`: the zone as
  the required level, one group name for two PodSets), never a nodeSelector; passed unchanged
  when Kueue's TAS is not configured for its flavors, or it has more than two PodSets; a
  generic group's workload with Kueue's queue label passes unchanged (no nodeSelector is written
  on it; the warning names the annotation to add);
- a group's later objects follow the group's kept decision (`kept`): the same zone;
- a Pod of a group placed pod by pod (`admit_pods`, `agent.admission.pod_gang`): its one template
  is the Pod itself; passed unchanged when its controller is placed at its own creation (a batch
  Job's, a training kind's, a Deployment's ReplicaSet's pod: its template carries the pin), is
  created bound to a node, or pins a zone already; otherwise its gang (the group's live pods, the Pod, the pods still to
  come up to the group's `size`) is checked as a group's workload is, its GPUs the group's `gpus`
  when more, and a lone first Pod is placed too (the group is a gang by its settings); the patch
  is the group planner's template change (`retarget`: zone pin, tolerations, zone-mirroring
  label; no pod affinity) written on the Pod's own spec and labels, and the room check is for
  the Pod; a Pod with Kueue's queue label (Kueue's pod integration) passes unchanged: no
  nodeSelector, the warning names the topology annotation to put on every pod of its pod group.
  The group's live pods are read once per view change (`_group_pods`).
`enforce` False (`admission.mode: warn`): the same decision, its warning says what it would do,
and no patch.

Not modelled at admission (the cache keeps GPU requests only): CPU and memory room, and the pod
(anti-)affinity of pods already running (the job's own pods' terms are checked among themselves).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.admission import pod_gang
from agent.admission.documents import at_path, json_copy, usage_pod, without_owners
from agent.admission.jsonpatch import Operation, diff
from agent.admission.subject import Subject, planned_pods
from agent.admission.zone_nodes import ZoneNodes
from agent.diagnosis.kueue import kueue_advice
from agent.diagnosis.placement import choose_target_zone
from agent.diagnosis.reachability import Reachability
from agent.model.admission import AdmissionOutcome as Outcome
from agent.model.cluster import ZONE_LABEL, ClusterState, Pod
from agent.model.descriptor import PodTemplate, dig
from agent.model.finding import Finding
from agent.model.job import Job, JobRef
from agent.model.kueue import KueueCause, wanted_annotations
from agent.model.verdict import Verdict
from agent.model.workload import KUEUE
from agent.policy import PolicySet
from agent.remediation.plan import LiveObjects, Refusal
from agent.remediation.planner import plan_remediation
from agent.remediation.room import QuantityError
from agent.remediation.template import (
    PlanRefusedError,
    TemplateChange,
    merged_view,
    nodes_in_zone,
    pod_needs,
    require_room,
    retarget,
)
from agent.settings import DiagnosisSettings
from agent.snapshot.manifests import ManifestError, PodParts, parse_pod, parse_training_job
from agent.topology.capacity import CapacityIndex
from agent.topology.facts import ClusterFacts
from agent.topology.flows import required_flows
from agent.topology.jobs import group_jobs, kubeflow_jobs
from agent.topology.zones import AUTO, mirror_label_keys

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_MARKER = "gpu"  # the resources the watch cache keeps (and the room check counts)




@dataclass(frozen=True)
class Decision:
    """The answer to one request: what was done, where, the JSON patch (empty: none) and the
    warning line that says what and why. `kueue`: placed through Kueue's annotations; `kept`:
    the zone came from the group's first object."""

    outcome: Outcome
    ref: JobRef
    warning: str
    zone: str | None = None
    patch: tuple[Operation, ...] = ()
    kueue: bool = False
    kept: bool = False


@dataclass(frozen=True)
class View:
    """The watch cache's parsed view: what the next diagnosis reads."""

    state: ClusterState
    policies: PolicySet
    facts: ClusterFacts


class Decider:
    """Decisions over the views it is handed; it keeps, per view, what every request reuses (the
    zones' nodes as the planner reads them, `ZoneNodes`; the reachability and its verdicts, while
    the policy set, the namespace objects and the mirror keys are the same)."""

    def __init__(self, settings: DiagnosisSettings) -> None:
        self.settings = settings
        self._for: tuple[object, ...] | None = None
        self._reach: Reachability | None = None
        self._nodes = ZoneNodes()
        self._mirror: tuple[str, ...] = ()
        self._uses = 0
        self._members: dict[tuple[str, str], tuple[object, list[Pod]]] = {}

    def _prepare(self, view: View) -> Reachability:
        """The reachability for the view's policies and namespaces (kept while they are the same
        objects: the cache's mirror hands out new states, not new policy sets, between changes)."""
        state, policies = view.state, view.policies
        setting = self.settings.pod_zone_label
        mirror = (view.facts.mirror_keys if setting == AUTO
                  else mirror_label_keys(setting, pods=(), nodes=state.nodes))  # fmt: skip
        key = (id(policies), tuple(map(id, state.namespaces.values())), mirror)
        if self._for != key or self._reach is None or self._uses > 10_000:
            moving = mirror
            if ZONE_LABEL not in moving and ZONE_LABEL in policies.pod_label_keys():
                moving = (*moving, ZONE_LABEL)
            self._reach = Reachability(policies, state.namespaces,
                                       label_keys=policies.pod_label_keys(), mirror_keys=moving)  # fmt: skip
            self._for, self._uses, self._mirror = key, 0, mirror
        self._uses += 1
        return self._reach

    def decide(
        self, subject: Subject, view: View, *, enforce: bool, kept: str | None = None
    ) -> Decision:
        """The decision for `subject` (see the module docstring)."""
        ref = subject.ref

        def unchanged(outcome: Outcome, why: str) -> Decision:
            return Decision(outcome, ref, f"zonemedic: {_what(subject)} passed unchanged: {why}")

        if subject.training is not None and subject.training.materialised is not None:
            return unchanged(Outcome.DEFERRED, "its pod templates come from its runtime; "
                             "zonemedic places its JobSet when the Trainer creates it")  # fmt: skip
        if ref.namespace in self.settings.protected_namespaces:
            return unchanged(Outcome.SKIPPED, f"namespace {ref.namespace} is protected")
        owned = pod_gang.placed_through(subject.obj) if subject.pod else None
        if owned is not None:
            return unchanged(Outcome.SKIPPED, owned)
        templates = subject.templates
        if not templates:
            return unchanged(Outcome.SKIPPED, "it has no pod template of a gang")
        pinned = [_pinned(t.template) for t in templates]
        zones_pinned = {z for p in pinned if p is not None for z in p}
        if pinned and all(p is not None and len(p) == 1 for p in pinned) and len(zones_pinned) == 1:
            return unchanged(Outcome.CONSTRAINED, f"every pod template already pins zone "
                             f"{zones_pinned.pop()}")  # fmt: skip
        if any(p is not None and len(p) != 1 for p in pinned) or len(zones_pinned) > 1:
            return unchanged(Outcome.CONSTRAINED, "its pod templates pin zones of their own ("
                             + ", ".join(sorted(zones_pinned)) + "): zonemedic does not override them")
        reach = self._prepare(view)
        manifests = planned_pods(subject)
        job = self._job(subject, view, manifests)
        if job is None:
            return unchanged(Outcome.SKIPPED, "its pods cannot be modelled (a pod count or a "
                             "field that cannot be read)")  # fmt: skip
        zones = list(view.facts.zones) or view.state.zones()
        # a pod-by-pod group is a gang by its settings; a group's later object joins the kept zone
        # even when it runs one pod (the group's other pods may not be in the view yet)
        if len(job.pods) < 2 and not subject.pod and kept is None:
            return unchanged(Outcome.NOT_NEEDED, "it runs one pod: nothing to co-locate")
        if len(zones) < 2:
            return unchanged(Outcome.NOT_NEEDED, "the cluster has one zone")
        allowed = list(zones_pinned) if zones_pinned else zones
        if kept is not None:
            allowed = [kept]
        pairs = reach.prepare(required_flows(job))
        fixing = [z for z in allowed if not reach.denied(pairs, zone=z, first_only=True)]
        capacity = CapacityIndex(view.state.nodes, (), used=view.facts.gpu_used,
                                 free=view.facts.zone_free)  # fmt: skip
        free = capacity.free_gpus([p for p in job.pods if p.node_name is not None])
        need = pod_gang.gang_gpus(subject, job.gpu_request)
        candidates = [z for z in fixing if free.get(z, 0) >= need]
        if not fixing:
            return unchanged(Outcome.NO_ZONE, "no zone" + (f" ({', '.join(allowed)})" if kept or zones_pinned else "")
                             + " allows every flow it needs once co-located: fix the policies")
        if not candidates:
            room = ", ".join(f"{z}: {free.get(z, 0)}" for z in fixing)
            return unchanged(Outcome.NO_ZONE, f"no zone where the policies allow its flows has "
                             f"{need} free GPUs for the whole job (free: {room})")  # fmt: skip
        if _kueue_queue(subject.obj) or _kueue_queue(_template_meta(templates)):
            if subject.training is None:
                where = "every pod of its pod group" if subject.pod else "its pod template"
                return unchanged(Outcome.NO_ZONE, "Kueue-managed: zonemedic writes no nodeSelector "
                                 f"on it; ask Kueue for one zone ({KUEUE.topology_annotation}: "
                                 f"{ZONE_LABEL} on {where})")  # fmt: skip
            return self._kueue(subject, view, candidates, enforce=enforce)
        refusals: list[str] = []
        job_gpus = _gpus_by_zone(job, view)
        left = list(candidates)
        while left:
            zone = choose_target_zone(left, job_gpus=job_gpus, free_gpus=free)
            assert zone is not None
            left.remove(zone)
            planned, refusal = self._plan(subject, view, zone, pods=len(manifests) or 1)
            if planned is None:
                refusals.append(f"{zone}: {refusal}")
                continue
            why = (f"the group's first object was placed in {zone}" if kept is not None else
                   _why(zone, fixing=fixing, zones=zones, need=need, free=free.get(zone, 0)))
            patch = tuple(diff(subject.obj, planned))
            if not enforce:
                return Decision(Outcome.WARNED, ref, f"zonemedic (mode warn): would pin "
                                f"{_what(subject)} to zone {zone}: {why}", zone=zone, kept=kept is not None)
            return Decision(Outcome.PLACED, ref, f"zonemedic: pinned {_what(subject)} to zone "
                            f"{zone}: {why}", zone=zone, patch=patch, kept=kept is not None)
        return unchanged(Outcome.NO_ZONE, "no zone has room for its whole gang: "
                         + "; ".join(refusals))

    # -- the pieces --------------------------------------------------------------------------

    def _job(self, subject: Subject, view: View, manifests: list[dict[str, Any]]) -> Job | None:
        live = self._group_pods(subject, view)
        if subject.pod:
            manifests = pod_gang.gang_manifests(subject, manifests, live=live)
        if not manifests:
            return None
        for manifest in manifests:  # a zone-mirroring label is set on every pod (at binding, by
            labels = manifest["metadata"]["labels"]  # whatever mirrors it): moved with the pod
            for key in self._mirror:
                labels.setdefault(key, "")
        try:
            parts = PodParts()  # a template's pods share its containers: read once
            pods = [parse_pod(m, parts=parts) for m in manifests]
            objects = {}
            if subject.training is not None:
                obj = parse_training_job(without_owners(subject.obj), subject.training.kind)
                objects[(subject.training.kind, obj.namespace, obj.name)] = obj
        except ManifestError:
            return None
        if subject.group is not None:
            found = group_jobs([*live, *pods], [subject.group])
        else:
            state = ClusterState(nodes=view.state.nodes, namespaces=view.state.namespaces,
                                 pods=tuple(pods), job_objects=objects)  # fmt: skip
            found = kubeflow_jobs(state)
        return found[0] if found else None

    def _group_pods(self, subject: Subject, view: View) -> list[Pod]:
        """The live pods of the subject's namespace its group's selector matches, kept while the
        view holds the same pod list for the namespace (a group's pods arrive one by one: the
        namespace is read once per change, not once per pod)."""
        group, namespace = subject.group, subject.ref.namespace
        if group is None:
            return []
        pods = view.facts.pods_in.get(namespace, ())
        found = self._members.get((namespace, group.name))
        if found is None or found[0] is not pods:
            if len(self._members) > 256:
                self._members.clear()
            chosen = [p for p in pods if p.live and all(p.labels.get(k) == v for k, v in group.selector.items())]
            found = self._members[(namespace, group.name)] = (pods, chosen)
        return found[1]

    def _plan(self, subject: Subject, view: View, zone: str, *, pods: int) -> tuple[Any, str]:
        """The object as the planner's fix for `zone` leaves it, or (None, the refusal)."""
        used = view.facts.gpu_used
        nodes = self._nodes.pick(view.state.nodes, node_zone=view.facts.node_zone, used=used,
                                 zone=zone, keys=_shape_keys(subject.templates), pods=pods)  # fmt: skip
        names = [str(n["metadata"]["name"]) for n in nodes]
        bound = [usage_pod(name, used[name]) for name in names if used.get(name)]
        room_view = _gpus_only(subject)
        try:
            if subject.group is not None:
                changes = _group_changes(subject, room_view, zone=zone, mirror=self._mirror,
                                         nodes=nodes, bound=bound)
            else:
                ref = JobRef(subject.ref.kind, subject.ref.namespace, subject.name)
                finding = Finding(job=ref, verdict=Verdict.ZONE_SPLIT_DEGRADED, zones={},
                                  coordinator=None, remediable=True, target_zone=zone)  # fmt: skip
                live = LiveObjects(job=room_view, pods=(), nodes=nodes, bound_pods=bound)
                plan = plan_remediation(finding, live, mirror_keys=self._mirror, explain=False)
                if isinstance(plan, Refusal):
                    return None, plan.reason
                changes = [c for t in plan.targets for c in t.changes]
        except PlanRefusedError as exc:
            return None, str(exc)
        except QuantityError as exc:
            return None, f"cannot read a resource quantity: {exc}"
        return _applied(subject, changes), ""

    def _kueue(self, subject: Subject, view: View, candidates: Sequence[str], *,
               enforce: bool) -> Decision:  # fmt: skip
        assert subject.training is not None
        ref = subject.ref
        try:
            obj = parse_training_job(subject.obj, subject.training.kind)
        except ManifestError as exc:
            return Decision(Outcome.SKIPPED, ref, f"zonemedic: {_what(subject)} passed unchanged: "
                            f"it cannot be read ({exc})")  # fmt: skip
        advice = kueue_advice(obj, view.state.kueue)
        if advice is None:
            return Decision(Outcome.CONSTRAINED, ref, f"zonemedic: {_what(subject)} passed "
                            "unchanged: its Kueue topology request already keeps it in one zone")
        if advice.cause is KueueCause.TAS_NOT_CONFIGURED:
            return Decision(Outcome.NO_ZONE, ref, f"zonemedic: {_what(subject)} passed unchanged: "
                            f"{advice.message}")  # fmt: skip
        if not advice.agent_fixable:  # e.g. more than two PodSets, or two of several pods each
            return Decision(Outcome.NO_ZONE, ref, f"zonemedic: {_what(subject)} passed unchanged: "
                            f"{advice.message}")  # fmt: skip
        wanted = wanted_annotations(subject.name, obj.pod_sets, obj.topology)
        planned = json_copy(subject.obj)
        for template in subject.templates:
            target = at_path(planned, template.path)
            meta = target.setdefault("metadata", {})
            annotations = dict(meta.get("annotations") or {})
            for key, value in wanted.get(template.replica, {}).items():
                if value is None:
                    annotations.pop(key, None)
                else:
                    annotations[key] = value
            meta["annotations"] = annotations
        where = ", ".join(candidates)
        why = (f"Kueue-managed (queue {advice.queue}): Kueue places it in one zone "
               f"({KUEUE.topology_annotation}: {ZONE_LABEL}); the policies allow its flows in {where}")
        if not enforce:
            return Decision(Outcome.WARNED, ref, f"zonemedic (mode warn): would annotate "
                            f"{_what(subject)} for Kueue topology-aware placement: {why}", kueue=True)
        return Decision(Outcome.PLACED, ref, f"zonemedic: annotated {_what(subject)} for Kueue "
                        f"topology-aware placement: {why}", patch=tuple(diff(subject.obj, planned)),
                        kueue=True)  # fmt: skip


# -- plain helpers ----------------------------------------------------------------------------


def _what(subject: Subject) -> str:
    shown = f"{subject.kind_name} {subject.ref.namespace}/{subject.name}"
    return shown + (f" (group {subject.group.name})" if subject.group is not None else "")


def _why(zone: str, *, fixing: Sequence[str], zones: Sequence[str], need: int, free: int) -> str:
    denied = [z for z in zones if z not in fixing]
    flows = (f"every flow it needs is allowed there (not in {', '.join(denied)})" if denied
             else "every flow it needs is allowed there")
    return f"{flows}, and it has room for the whole gang ({need} GPUs needed, {free} free)"


def _group_changes(subject: Subject, room_view: Mapping[str, Any], *, zone: str,
                   mirror: Sequence[str], nodes: Sequence[Mapping[str, Any]],
                   bound: Sequence[Mapping[str, Any]]) -> list[TemplateChange]:  # fmt: skip
    """The group planner's own template change for one workload, and its room check."""
    zone_nodes = nodes_in_zone(nodes, zone)
    changes, needs = [], []
    templates = {t.replica: t for t in _templates_of(subject, room_view)}
    for template in subject.templates:
        change = retarget(template.template, replica=template.replica, path=(), zone=zone,
                          zone_nodes=zone_nodes, mirror_keys=mirror, affinity_to=None)  # fmt: skip
        if change is not None:
            changes.append(change)
        needs.extend(pod_needs(subject.name, templates[template.replica].template, change,
                               template.count or 0, namespace=subject.ref.namespace,
                               relabel=dict.fromkeys(mirror, zone)))  # fmt: skip
    require_room(needs, zone=zone, nodes=nodes, bound_pods=bound, replaced=frozenset())
    return changes


def _shape_keys(templates: Sequence[PodTemplate]) -> frozenset[str] | None:
    """The node label keys the templates' placement reads (nodeSelector, required node
    affinity, pod (anti-)affinity topology keys; the hostname left out: every node is its own
    host), with the zone's; None when a term names nodes by field (every node then counts)."""
    keys = {ZONE_LABEL}
    for template in templates:
        spec = template.template.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}
        keys.update(str(k) for k in (spec.get("nodeSelector") or {}))
        for term in dig(spec, ("affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms")) or []:
            if not isinstance(term, Mapping) or term.get("matchFields"):
                return None
            keys.update(str(e.get("key")) for e in term.get("matchExpressions") or [])
        for kind in ("podAffinity", "podAntiAffinity"):
            for term in dig(spec, ("affinity", kind, REQUIRED)) or []:
                if isinstance(term, Mapping) and term.get("topologyKey"):
                    keys.add(str(term["topologyKey"]))
    keys.discard(HOSTNAME_LABEL)
    return frozenset(keys)


def _template_meta(templates: Sequence[PodTemplate]) -> Mapping[str, Any]:
    """The first template as an object (its labels: Kueue's queue label may be on a pod
    template of a group's workload)."""
    return templates[0].template if templates else {}


def _kueue_queue(obj: Mapping[str, Any]) -> str | None:
    labels = dig(obj, ("metadata", "labels"))
    value = labels.get(KUEUE.queue_label) if isinstance(labels, Mapping) else None
    return str(value) if value else None


def _pinned(template: Mapping[str, Any]) -> frozenset[str] | None:
    """The zones a pod template is held to (nodeSelector, else every required node affinity
    term's zone `In` values), None when it is not held to any."""
    spec = template.get("spec") if isinstance(template.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping) and selector.get(ZONE_LABEL):
        return frozenset({str(selector[ZONE_LABEL])})
    terms = dig(spec, ("affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms"))
    if not isinstance(terms, list) or not terms:
        return None
    zones: set[str] = set()
    for term in terms:
        exprs = [e for e in (term or {}).get("matchExpressions") or []
                 if isinstance(e, Mapping) and e.get("key") == ZONE_LABEL and e.get("operator") == "In"]
        if not exprs:
            return None
        zones.update(str(v) for v in exprs[0].get("values") or [])
    return frozenset(zones)


def _gpus_by_zone(job: Job, view: View) -> dict[str, int]:
    out: dict[str, int] = {}
    for pod in job.pods:
        zone = view.facts.node_zone.get(pod.node_name) if pod.node_name else None
        if zone is not None:
            out[zone] = out.get(zone, 0) + pod.gpu_request
    return out








def _templates_of(subject: Subject, obj: Mapping[str, Any]) -> list[PodTemplate]:
    return subject.templates_in(obj)


def _gpus_only(subject: Subject) -> dict[str, Any]:
    """The object as the room check can judge it from the cache: its owners dropped (planned as
    itself) and its containers' requests and limits reduced to GPU resources."""
    out = json_copy(without_owners(subject.obj))
    for template in _templates_of(subject, out):
        spec = at_path(out, template.path).get("spec") or {}
        for key in ("containers", "initContainers"):
            for container in spec.get(key) or []:
                resources = container.get("resources") if isinstance(container, dict) else None
                if not isinstance(resources, dict):
                    continue
                for section in ("requests", "limits"):
                    if isinstance(resources.get(section), dict):
                        resources[section] = {k: v for k, v in resources[section].items()
                                              if GPU_MARKER in str(k)}  # fmt: skip
    return out


def _applied(subject: Subject, changes: Sequence[TemplateChange]) -> dict[str, Any]:
    """The object as sent with each change's planned fields merged into its template: new maps
    (and lists) only along the paths to the changed fields, every other part shared with the
    object as sent (so the patch's diff walks what changed); read it, never change it."""
    out = dict(subject.obj)
    fresh = {id(out)}  # the containers copied so far (held by `out`: their ids stay theirs)
    paths = {t.replica: t.path for t in subject.templates}
    for change in changes:
        path = paths.get(change.replica)
        if path is None:
            continue
        if not path:  # the object is its own template (a Pod)
            out = merged_view(out, change.fragment(shared=True))
            fresh.add(id(out))
            continue
        parent: Any = out
        for step in path[:-1]:
            child = parent[step]
            if id(child) not in fresh:
                child = list(child) if isinstance(child, list) else dict(child)
                parent[step] = child
                fresh.add(id(child))
            parent = child
        last = str(path[-1])
        parent[last] = merged_view(parent.get(last), change.fragment(shared=True))
    return out
