"""Planning a remediation: a finding plus the live objects -> the `Plan` that co-locates the job, or a `Refusal`.

Who calls it: the run (`agent.remediation.recheck`, when an approved incident is planned and
re-planned) and the agent's plan preview (`agent.runtime.plan_previews`). It says no to a finding that
is not a remediable split with a target zone and hands the rest to the job's family: a Kubeflow
training kind to `agent.remediation.training_plan`, a kind whose templates are a JobSet's
replicated jobs (TrainJob, JobSet) to `agent.remediation.jobset_plan`, a job Kueue manages
(Kubeflow, TrainJob or JobSet) to `agent.remediation.kueue_plan` (re-queued through Kueue), a
generic group to `agent.remediation.group_plan`
(their refusals, and a resource quantity it cannot read, become the `Refusal`). Each target of
a plan carries its owner (`agent.model.ownership`, read from the live object it was planned
from: a GitOps tool, a pipeline, kubectl apply, a controller, or nobody) and its hand-over
(`agent.model.handover`: the fix as a patch of the manifest kubectl apply last applied, else of
the live object, with the Helm release that renders it, if any, for the values hint). Pure: it does
not read the cluster, write it, or read a clock; nothing may be written when it refuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from agent.model.descriptor import TemplateLayout
from agent.model.finding import REMEDIABLE_VERDICTS, Finding
from agent.model.handover import Handover, source_manifest
from agent.model.ownership import ObjectOwnership, helm_release, ownership_of
from agent.model.workload import JobKind, workload
from agent.remediation.group_plan import plan_group
from agent.remediation.jobset_plan import plan_jobset
from agent.remediation.kueue_plan import plan_kueue
from agent.remediation.plan import LiveObjects, Plan, Refusal, Target
from agent.remediation.room import QuantityError
from agent.remediation.template import PlanRefusedError
from agent.remediation.training_plan import plan_training


def plan_remediation(
    finding: Finding, live: LiveObjects, *, mirror_keys: Sequence[str] = (), explain: bool = True
) -> Plan | Refusal:
    """The plan that co-locates the finding's job in its target zone, or why there is none;
    each target's owner read from its live object. `explain` False (the admission webhook,
    which writes only the template changes): a Kubeflow, TrainJob or JobSet plan comes without
    its rendered diff, owners and hand-overs; the changes and the refusals are the same."""
    result = _plan(finding, live, mirror_keys=mirror_keys, explain=explain)
    if isinstance(result, Refusal) or not explain:
        return result
    owners = tuple(ObjectOwnership(t.kind, t.namespace, t.name, ownership_of(obj))
                   for t in result.targets if (obj := live_object(t, live)) is not None)  # fmt: skip
    return dataclasses.replace(result, owners=owners, handovers=_handovers(result, live))


def _handovers(plan: Plan, live: LiveObjects) -> tuple[Handover, ...]:
    """Each changed target's fix as a merge patch of the manifest it comes from."""
    out = []
    for target in plan.targets:
        obj = live_object(target, live)
        if obj is None or not target.changes:
            continue
        source, kind = source_manifest(obj)
        out.append(Handover(target.api_version, target.kind, target.namespace, target.name,
                            target.template_patch(), source, kind, helm_release(obj)))  # fmt: skip
    return tuple(out)


def live_object(target: Target, live: LiveObjects) -> Mapping[str, Any] | None:
    """The live object a target was planned from, among those the plan read."""
    candidates = [live.job, live.materialised, live.queued, *live.workloads]
    for obj in candidates:
        meta = (obj or {}).get("metadata") or {}
        if (obj is not None and obj.get("kind") == target.kind and meta.get("name") == target.name
                and (meta.get("namespace") or "") == target.namespace):
            return obj
    return None


def _plan(
    finding: Finding, live: LiveObjects, *, mirror_keys: Sequence[str], explain: bool
) -> Plan | Refusal:
    ref = finding.job
    if finding.verdict not in REMEDIABLE_VERDICTS:
        return Refusal(ref, f"the job is {finding.verdict.value}, not split across zones "
                            "nor mislabelled")  # fmt: skip
    if not finding.remediable or finding.target_zone is None:
        why = "; ".join(finding.reasons) or "no target zone"
        return Refusal(ref, f"not remediable: {why}")
    zone = finding.target_zone
    try:
        if ref.kind is JobKind.GROUP:
            return plan_group(finding, live, zone=zone, mirror_keys=mirror_keys)
        if finding.kueue is not None:
            return plan_kueue(finding, live, workload_obj=live.queued, kueue=live.kueue,
                              allowed=finding.kueue.zones, zone=zone,
                              need=sum(finding.gpus.values()))  # fmt: skip
        if workload(ref.kind).templates.layout is TemplateLayout.REPLICATED_JOBS:
            return plan_jobset(finding, live, zone=zone, mirror_keys=mirror_keys, explain=explain)
        return plan_training(finding, live, zone=zone, mirror_keys=mirror_keys, explain=explain)
    except PlanRefusedError as exc:
        return Refusal(ref, str(exc))
    except QuantityError as exc:
        return Refusal(ref, f"cannot read a resource quantity: {exc}")
