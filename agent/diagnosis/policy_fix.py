"""The policy-side fix: the allow policy that admits exactly a job's denied required flows.

Called by the diagnosis (`agent.diagnosis.diagnose`, for a job co-location cannot help: no zone
has room for the gang, or the policies block the job inside every zone) and by the `whatif
--policy-fix` command. From the job's required flows (`agent.topology.flows`) the evaluator denies
(`PolicySet.trace`: every denying hop, not only the first), it opens each denying hop and nothing
else:
- ingress at the destinations where ingress denies, from the rule's sources; egress at the
  sources where egress denies, to the rule's destinations; each on the rule's ports;
- every selector is the job's own label (the kind's job-name label: training-operator
  `training.kubeflow.org/job-name`, TrainJob/JobSet `jobset.sigs.k8s.io/jobset-name`; a generic
  group's configured selector), narrowed with the pods' own labels (replica type, index, zone
  label...) until it matches exactly the pods it stands for among its namespace's pods (equality
  labels first, then one `In` expression); a label the dataplane leaves out of identities is
  never used;
- a CiliumNetworkPolicy in the job's namespace (one `specs` block per endpoint selector, each with
  `enableDefaultDeny: {ingress: false, egress: false}`: it only adds allows and never puts a pod
  in default deny), or, when the cluster enforces only Kubernetes NetworkPolicies (a plain
  Kubernetes dataplane, or Cilium with no Cilium policy in use), NetworkPolicies whose
  `podSelector` is exactly the pods whose hop is denied by default (they are in default deny for
  that direction already, so `policyTypes` enforces nothing new).
A flow denied by a deny rule cannot be opened by an allow (deny beats allow), nor one through
Cilium's L7 proxy: `PolicyFixError` says which. The fix is then proven with the what-if's own
comparison (`agent.diagnosis.flow_universe`): applied to the same cluster, the flows whose verdict
changes must be exactly the job's denied required flows (all now allowed), no pod outside the
job touched. zonemedic never applies it: network policy belongs to the security team. Pure.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import yaml

from agent.diagnosis.diagnose import Diagnosis
from agent.diagnosis.flow_universe import Cluster, group_pods, required_flow_changes, touched_flows
from agent.diagnosis.reachability import Reachability
from agent.errors import PolicyFixError
from agent.model.cluster import ZONE_LABEL, ClusterState, Pod
from agent.model.finding import Finding
from agent.model.flow import FlowRule
from agent.model.job import Job
from agent.model.network import DenyReason, Hop, PortRange, Protocol
from agent.model.policy_offer import PolicyOffer
from agent.model.workload import JobKind, workload
from agent.policy import PolicySet, parse_policy
from agent.topology.flows import required_flows

PodKey = tuple[str, str]
Selector = dict[str, Any]
_CONCRETE = (Protocol.TCP, Protocol.UDP, Protocol.SCTP)


@dataclass(frozen=True)
class PolicyFix:
    """The proposed policy manifests (one CiliumNetworkPolicy, or NetworkPolicies), their YAML
    and their diff against nothing (new objects), and how many denied pod pairs they open."""

    manifests: tuple[Mapping[str, Any], ...]
    opened: int = 0

    @property
    def kind(self) -> str:
        return str(self.manifests[0]["kind"])

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(str(m["metadata"]["name"]) for m in self.manifests)

    @property
    def yaml(self) -> str:
        return "---\n".join(yaml.safe_dump(dict(m), sort_keys=False) for m in self.manifests)

    def diff(self) -> str:
        lines = difflib.unified_diff([], self.yaml.splitlines(keepends=True),
                                     fromfile="/dev/null", tofile=f"{self.names[0]}.yaml")  # fmt: skip
        return "".join(lines)

    def apply_command(self) -> str:
        return f"kubectl apply -f {self.names[0]}.yaml"


@dataclass(frozen=True)
class _Opening:
    """One hop to open: at `endpoints`, from/to `peers`, on `ports`."""

    hop: Hop
    endpoints: frozenset[PodKey]
    peers: frozenset[PodKey]
    ports: PortRange


def _key(pod: Pod) -> PodKey:
    return (pod.namespace, pod.name)


def base_labels(job: Job, groups: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """The labels every pod of `job`, and no pod of another job, carries: its kind's job-name
    label, or a generic group's configured selector (`groups`: group name -> selector)."""
    if job.ref.kind is JobKind.GROUP:
        found = groups.get(job.ref.name)
        if not found:
            raise PolicyFixError(f"{job.ref}: no selector configured for the group")
        return dict(found)
    key = workload(job.ref.kind).labels.job_name
    values = {p.labels.get(key) for p in job.pods}
    if len(values) != 1 or None in values:
        raise PolicyFixError(f"{job.ref}: its pods do not all carry {key}")
    value = values.pop()
    assert value is not None
    return {key: value}


def _matches(labels: Mapping[str, str], sel: Selector) -> bool:
    if any(labels.get(k) != v for k, v in sel.get("matchLabels", {}).items()):
        return False
    return all(labels.get(e["key"]) in e["values"] for e in sel.get("matchExpressions", ()))


def narrowed(pods: Sequence[Pod], among: Sequence[Pod], base: Mapping[str, str], *,
             usable: frozenset[str] | None, what: str) -> Selector:  # fmt: skip
    """A label selector matching exactly `pods` among `among` (their namespace's pods): `base`,
    then equal labels of `pods` (the one that leaves fewest other pods first), then one `In`
    expression; only keys in `usable` (None: any). `PolicyFixError` when none does."""
    want = {_key(p) for p in pods}
    sel: Selector = {"matchLabels": dict(base)}
    matched = [p for p in among if _matches(p.labels, sel)]
    if not want <= {_key(p) for p in matched}:
        raise PolicyFixError(f"{what}: the job's own label does not select all its pods")

    def allowed(key: str) -> bool:
        return usable is None or key in usable

    common = {k: v for k, v in pods[0].labels.items()
              if allowed(k) and k not in base and all(p.labels.get(k) == v for p in pods)}  # fmt: skip
    while len(matched) > len(want) and common:
        key = min(common, key=lambda k: (sum(1 for p in matched if p.labels.get(k) == common[k]), k))
        narrower = [p for p in matched if p.labels.get(key) == common[key]]
        if len(narrower) == len(matched):
            break
        sel["matchLabels"][key] = common.pop(key)
        matched = narrower
    if len(matched) == len(want):
        return sel
    others = [p for p in matched if _key(p) not in want]
    keys = sorted({k for p in pods for k in p.labels if allowed(k)})
    best: tuple[int, str, list[str]] | None = None
    for key in keys:
        inside = {p.labels.get(key) for p in pods}
        if None in inside:
            continue
        if any(p.labels.get(key) in inside for p in others):
            continue
        values = sorted(v for v in inside if v is not None)
        if best is None or (len(values), key) < (best[0], best[1]):
            best = (len(values), key, values)
    if best is None:
        raise PolicyFixError(f"{what}: no label selects exactly these pods")
    sel["matchExpressions"] = [{"key": best[1], "operator": "In", "values": best[2]}]
    return sel


def _openings(job: Job, state: ClusterState, policies: PolicySet
              ) -> tuple[list[tuple[FlowRule, _Opening]], int]:  # fmt: skip
    """Every hop to open, per required flow rule, and the denied pod pairs."""
    reach = Reachability(policies, state.namespaces, label_keys=policies.pod_label_keys())
    out: list[tuple[FlowRule, _Opening]] = []
    denied_pairs = 0
    for rule in required_flows(job):
        at: dict[Hop, set[PodKey]] = {Hop.INGRESS: set(), Hop.EGRESS: set()}
        for pair in reach.prepare([rule]):
            if reach.verdict(pair.src, pair.dst, pair.ports).allowed:
                continue
            denied_pairs += pair.count
            trace = policies.trace(reach.endpoint(pair.src), reach.endpoint(pair.dst), rule.ports)
            for denial in trace.denials():
                why = denial.verdict
                assert why is not None
                if why.reason is not DenyReason.DEFAULT_DENY:
                    reason = why.reason.value if why.reason else "denied"
                    raise PolicyFixError(
                        f"{job.ref}: {pair.sources[0].name} -> {pair.destinations[0].name} port "
                        f"{rule.ports} is denied by {', '.join(why.policies)} ({reason} at "
                        f"{denial.hop.value}): an allow policy cannot open it")  # fmt: skip
                side = pair.destinations if denial.hop is Hop.INGRESS else pair.sources
                at[denial.hop].update(_key(p) for p in side)
        for hop, endpoints in at.items():
            if not endpoints:
                continue
            peers = rule.sources if hop is Hop.INGRESS else rule.destinations
            out.append((rule, _Opening(hop, frozenset(endpoints),
                                       frozenset(_key(p) for p in peers), rule.ports)))  # fmt: skip
    return out, denied_pairs


def _cilium_ports(ports: Sequence[PortRange]) -> list[dict[str, Any]]:
    out = []
    for r in ports:
        entry: dict[str, Any] = {"port": str(r.first)}
        if r.last != r.first:
            entry["endPort"] = r.last
        if r.protocol is not Protocol.ANY:
            entry["protocol"] = r.protocol.value
        out.append(entry)
    return out


def _k8s_ports(ports: Sequence[PortRange]) -> list[dict[str, Any]]:
    out = []
    for r in ports:
        for protocol in _CONCRETE if r.protocol is Protocol.ANY else (r.protocol,):
            entry: dict[str, Any] = {"protocol": protocol.value, "port": r.first}
            if r.last != r.first:
                entry["endPort"] = r.last
            out.append(entry)
    return out


def propose_fix(job: Job, state: ClusterState, policies: PolicySet, *, base: Mapping[str, str],
                avoid: frozenset[str] = frozenset()) -> PolicyFix | None:  # fmt: skip
    """The fix for `job`'s denied required flows (see the module docstring); None when none is
    denied. `base`: the job's own labels (`base_labels`); `avoid`: label keys a Cilium fix
    selects on only when nothing else narrows it (the zone-mirroring keys: they change when the
    job moves)."""
    identity = policies.identity
    usable_keys = {k for p in job.pods for k in p.labels if identity.why_excluded(k) is None}
    for key in base:
        why = identity.why_excluded(key)
        if why is not None:
            raise PolicyFixError(f"{job.ref}: its label {key} is left out of the dataplane's "
                                 f"identities ({why}): no selector can name its pods")  # fmt: skip
    cilium = policies.dataplane.cilium and any(p.kind.cilium for p in policies.policies)
    openings, denied = _openings(job, state, policies)
    if not openings:
        return None
    pods = {_key(p): p for p in job.pods}
    among = [p for p in state.pods if p.namespace == job.ref.namespace]
    usable = frozenset(usable_keys)
    by_rule: dict[tuple[str, Hop, str], tuple[Selector, Selector, list[PortRange]]] = {}
    for rule, opening in openings:
        # Cilium: open at the rule's whole side (enableDefaultDeny false adds allows only);
        # NetworkPolicy: exactly the pods denied by default there, already enforced
        side = rule.destinations if opening.hop is Hop.INGRESS else rule.sources
        denied_at = [pods[k] for k in sorted(opening.endpoints)]
        peers = [pods[k] for k in sorted(opening.peers)]
        where = f"{job.ref} {opening.hop.value} ({rule.purpose or 'required flow'})"
        if cilium:
            try:  # the pods denied there, by labels that stay when the job moves
                esel = narrowed(denied_at, among, base, usable=usable - avoid, what=where)
            except PolicyFixError:  # else the rule's whole side: its others are allowed already
                esel = narrowed(list(side), among, base, usable=usable, what=where)
        else:
            esel = narrowed(denied_at, among, base, usable=usable, what=where)
        psel = narrowed(peers, among, base, usable=usable, what=where)
        slot = (yaml.safe_dump(esel, sort_keys=True), opening.hop,
                yaml.safe_dump(psel, sort_keys=True))  # fmt: skip
        found = by_rule.setdefault(slot, (esel, psel, []))
        if opening.ports not in found[2]:
            found[2].append(opening.ports)
    name = f"zonemedic-allow-{job.ref.name}"[:240]
    ns = job.ref.namespace
    blocks: dict[str, dict[str, Any]] = {}
    for (ekey, hop, _), (esel, psel, ports) in by_rule.items():
        block = blocks.setdefault(ekey, {"selector": esel, Hop.INGRESS: [], Hop.EGRESS: []})
        block[hop].append((psel, ports))
    manifests: list[dict[str, Any]] = []
    if cilium:
        specs = []
        for block in blocks.values():
            spec: dict[str, Any] = {"endpointSelector": block["selector"],
                                    "enableDefaultDeny": {"ingress": False, "egress": False}}  # fmt: skip
            if block[Hop.INGRESS]:
                spec["ingress"] = [{"fromEndpoints": [psel], "toPorts": [{"ports": _cilium_ports(p)}]}
                                   for psel, p in block[Hop.INGRESS]]  # fmt: skip
            if block[Hop.EGRESS]:
                spec["egress"] = [{"toEndpoints": [psel], "toPorts": [{"ports": _cilium_ports(p)}]}
                                  for psel, p in block[Hop.EGRESS]]  # fmt: skip
            specs.append(spec)
        body: dict[str, Any] = {"spec": specs[0]} if len(specs) == 1 else {"specs": specs}
        manifests.append({"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
                          "metadata": {"name": name, "namespace": ns}, **body})  # fmt: skip
    else:
        for index, block in enumerate(blocks.values()):
            spec = {"podSelector": block["selector"], "policyTypes": []}
            if block[Hop.INGRESS]:
                spec["policyTypes"].append("Ingress")
                spec["ingress"] = [{"from": [{"podSelector": psel}], "ports": _k8s_ports(p)}
                                   for psel, p in block[Hop.INGRESS]]  # fmt: skip
            if block[Hop.EGRESS]:
                spec["policyTypes"].append("Egress")
                spec["egress"] = [{"to": [{"podSelector": psel}], "ports": _k8s_ports(p)}
                                  for psel, p in block[Hop.EGRESS]]  # fmt: skip
            suffix = f"-{index}" if len(blocks) > 1 else ""
            manifests.append({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                              "metadata": {"name": f"{name}{suffix}", "namespace": ns},
                              "spec": spec})  # fmt: skip
    return PolicyFix(tuple(manifests), opened=denied)


def with_fix(policies: PolicySet, fix: PolicyFix) -> PolicySet:
    """`policies` with the fix's objects added (replacing any of the same id)."""
    added = [parse_policy(dict(m)) for m in fix.manifests]
    ids = {p.id for p in added}
    return PolicySet([*(p for p in policies.policies if p.id not in ids), *added],
                     dataplane=policies.dataplane, unreadable=policies.unreadable)  # fmt: skip


def offer(job: Job, state: ClusterState, policies: PolicySet, *, base: Mapping[str, str],
          avoid: frozenset[str] = frozenset()) -> PolicyOffer | None:  # fmt: skip
    """The finding's offer: the fix, proven with the what-if's comparison over the pods it
    touches and the job's required flows (see the module docstring); None when no required flow
    is denied; an offer saying why (`refused`) when no allow policy can admit them."""
    try:
        fix = propose_fix(job, state, policies, base=base, avoid=avoid)
    except PolicyFixError as exc:
        return PolicyOffer(refused=str(exc))
    if fix is None:
        return None
    before = Cluster(state, policies)
    after = Cluster(state, with_fix(policies, fix))
    groups = group_pods(before, after)
    touched = groups.touched()
    flows, checked = required_flow_changes(before, after, [job])
    mine = {_key(p) for p in job.pods}
    owner = {k: str(job.ref) for k in mine}
    declared = touched_flows(before, after, groups, owner=owner)
    outside = sorted(f"{ns}/{n}" for ns, n in touched - mine)
    inside_required = _within(job, declared.listed) and len(declared.listed) == declared.changed
    exact = (not outside and len(flows) == fix.opened
             and all(not f.before.allowed and f.after.allowed for f in flows)
             and inside_required)  # fmt: skip
    blast = {
        "touched_pods": len(touched), "touched_outside_job": outside[:20],
        "required_flows_checked": checked,
        "required_flows_changed": len(flows),
        "denied_required_flows": fix.opened,
        "declared_port_flows_checked": declared.checked,
        "declared_port_flows_changed": declared.changed,
        "other_flows_changed": sum(1 for f in declared.listed if f.job is None),
    }  # fmt: skip
    return PolicyOffer(kind=fix.kind, names=fix.names, yaml=fix.yaml, diff=fix.diff(),
                       apply=fix.apply_command(), blast=blast, exact=exact, opened=fix.opened)


def _within(job: Job, changes: Sequence[Any]) -> bool:
    """Every declared-port change is a flow between two pods of one of the job's required flow
    rules, on a port inside the rule's range, that was denied and is now allowed."""
    rules = [({_key(p) for p in r.sources}, {_key(p) for p in r.destinations}, r.ports)
             for r in required_flows(job)]  # fmt: skip
    for change in changes:
        if change.job is None or change.before.allowed or not change.after.allowed:
            return False
        src = tuple(change.source.split("/", 1))
        dst = tuple(change.destination.split("/", 1))
        p = change.ports
        if not any(src in s and dst in d and r.first <= p.first and p.last <= r.last
                   and r.protocol in (p.protocol, Protocol.ANY) for s, d, r in rules):  # fmt: skip
            return False
    return True



OfferMemo = dict[tuple[Any, ...], tuple[PolicySet, PolicyOffer | None]]
_MEMO_SIZE = 1000


def with_offers(diagnosis: Diagnosis, state: ClusterState, policies: PolicySet, *,
                groups: Mapping[str, Mapping[str, str]],
                memo: OfferMemo | None = None) -> tuple[Finding, ...]:  # fmt: skip
    """The diagnosis's findings, each whose co-location is refused (`Finding.colocation_refused`)
    with its policy-side offer. `memo` (kept by a caller diagnosing again and again): offers by
    job, policy set and the job's pods as they are, so an unchanged job is not proven again."""
    out = []
    avoid = frozenset((*diagnosis.mirror_keys, ZONE_LABEL))
    for finding in diagnosis.findings:
        job = diagnosis.job(finding.job)
        if not finding.colocation_refused or job is None:
            out.append(finding)
            continue
        key = (finding.job, id(policies),
               tuple((p.name, p.node_name, tuple(sorted(p.labels.items()))) for p in job.pods))
        found = memo.get(key) if memo is not None else None
        if found is not None and found[0] is policies:
            made = found[1]
        else:
            try:
                made = offer(job, state, policies, base=base_labels(job, groups), avoid=avoid)
            except PolicyFixError as exc:
                made = PolicyOffer(refused=str(exc))
            if memo is not None:
                if len(memo) >= _MEMO_SIZE:
                    memo.clear()
                memo[key] = (policies, made)
        out.append(replace(finding, policy_fix=made) if made is not None else finding)
    return tuple(out)
