"""The pipeline's diagnosis of the watch cache, and what the last one saw.

Called by the pipeline (`agent.runtime.pipeline`) for every diagnosis (a detector batch, a sweep,
a label-settle look, an egress refresh), and by the pieces that need the last diagnosis's jobs: the
drop messages (`agent.runtime.drops`: a pod of a generic group), the egress measurement
(`agent.runtime.waste`: a job's pods) and the plan preview (a generic group's pod names).

A diagnosis reads only the watch cache (no API request): the cache's slim, manifest-shaped objects
go through the core's manifest parsers (incrementally: `agent.runtime.mirror`) and
`diagnose_cluster`, for every job or for the jobs a `JobScope` covers. The cluster state, facts and
mirror-label keys of the last diagnosis are kept, and its jobs found per namespace on demand (once
per diagnosis). A finding whose co-location is refused gets its policy-side fix
(`agent.diagnosis.policy_fix.with_offers`, proven once per job, policy set and pods). What it does not do: record anything, or lock (the pipeline's lock guards it).
"""

from __future__ import annotations

from agent.diagnosis.diagnose import JobScope, diagnose_cluster
from agent.diagnosis.policy_fix import OfferMemo, with_offers
from agent.model.cluster import ClusterState
from agent.model.finding import Finding
from agent.model.job import Job, JobRef
from agent.model.workload import JobKind
from agent.runtime.mirror import ModelMirror
from agent.settings import DiagnosisSettings
from agent.sources.cache import ClusterCache
from agent.topology.facts import ClusterFacts
from agent.topology.jobs import find_jobs


class Diagnoser:
    """Diagnoses the cache's parsed mirror and remembers the last diagnosis."""

    def __init__(self, cache: ClusterCache, *, settings: DiagnosisSettings) -> None:
        self.settings = settings
        self.mirror = ModelMirror(cache, settings=settings)
        self.mirror_keys: tuple[str, ...] = ()  # of the last diagnosis
        self._state: ClusterState | None = None  # of the last diagnosis
        self._facts: ClusterFacts | None = None  # of the last diagnosis
        self._jobs_in: dict[str, dict[JobRef, Job]] = {}  # of `_state`, by namespace, as asked
        self.diagnoses = 0
        self.diagnosed_last = 0  # findings of the last diagnosis (scoped or whole)
        self._offers: OfferMemo = {}  # policy-side fixes already proven, by job and its pods

    def diagnose(
        self, scope: JobScope | None = None, *, settings: DiagnosisSettings | None = None
    ) -> tuple[Finding, ...]:
        """Findings of every job, or of the jobs `scope` covers (each as in a full diagnosis).
        `settings`: the diagnosis settings in force (by default those it was built with)."""
        state, policies, facts = self.mirror.snapshot()
        result = diagnose_cluster(
            state, policies, settings=settings or self.settings, only=scope, facts=facts
        )
        self.mirror_keys, self._state, self._facts = result.mirror_keys, state, facts
        self._jobs_in = {}
        self.diagnoses += 1
        self.diagnosed_last = len(result.findings)
        groups = {g.name: g.selector for g in (settings or self.settings).groups}
        return with_offers(result, state, policies, groups=groups, memo=self._offers)

    def jobs_of(self, namespace: str) -> dict[JobRef, Job]:
        """The jobs of a namespace in the last diagnosis (found once per diagnosis)."""
        if self._state is None:
            return {}
        found = self._jobs_in.get(namespace)
        if found is None:
            pods_in = self._facts.pods_in if self._facts is not None else None
            found = {j.ref: j for j in find_jobs(self._state, self.settings.groups,
                                                 namespaces={namespace}, pods_in=pods_in)}  # fmt: skip
            self._jobs_in[namespace] = found
        return found

    def job(self, ref: JobRef) -> Job | None:
        """The job in the last diagnosis (None when it was not found there)."""
        return self.jobs_of(ref.namespace).get(ref)

    def group_of_pod(self, namespace: str, pod: str) -> JobRef | None:
        """The generic group of the last diagnosis that holds the pod."""
        for ref, job in self.jobs_of(namespace).items():
            if ref.kind is JobKind.GROUP and any(p.name == pod for p in job.pods):
                return ref
        return None

    def group_pods(self, finding: Finding) -> tuple[str, ...]:
        """The pod names of a generic group's finding, as the last diagnosis saw them (a plan
        preview names them; a Kubeflow job's pods are found from its object)."""
        if finding.job.kind is not JobKind.GROUP:
            return ()
        job = self.job(finding.job)
        return tuple(p.name for p in job.pods) if job is not None else ()
