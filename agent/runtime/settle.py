"""The right verdict first: findings whose pods still await their zone-mirroring labels wait.

Called by the pipeline (`agent.runtime.pipeline`) with the findings of every batch, sweep and
egress refresh to record (`SettleWait.record`). A finding some of whose bound pods still await
their zone-mirroring labels (`Finding.awaiting_labels`: bound, not started, without the node's
zone on a key the job's policies read) is not recorded at all (no incident, no message): its
verdict is not the one the policies will give once the labels are written. The cache is told to
treat those pods' label and phase updates as completing the gang again (`ClusterCache.await_labels`:
diagnosed at once, no debounce), so the job is recorded on the first verdict that no label still
to come can change. Past `detection.label_settle_timeout` of waiting the finding is recorded
anyway, with the verdict at hand and a reason naming the pods still unsettled.

What it does not do: diagnose by itself (it is handed the pipeline's `diagnose`) or write to the
store but through the recorder (`agent.runtime.recording`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from agent.diagnosis.diagnose import JobScope
from agent.model.finding import Finding
from agent.model.job import JobRef
from agent.runtime.recording import Recorder
from agent.runtime.revisit import job_scope
from agent.sources.cache import ClusterCache
from agent.sources.change import Change

log = logging.getLogger(__name__)


class SettleWait:
    """The jobs whose pods await their zone-mirroring labels, since when (monotonic seconds)."""

    def __init__(
        self, *, timeout: float, cache: ClusterCache, recorder: Recorder,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.timeout = timeout  # detection.label_settle_timeout, seconds
        self.cache = cache
        self.recorder = recorder
        self.monotonic = monotonic
        self.since: dict[JobRef, float] = {}
        self._overdue: set[JobRef] = set()  # ... recorded anyway, past the bound

    def again(self) -> Change | None:
        """The jobs to look at again until settled or past the bound (None: none waits)."""
        if not self.since:
            return None
        return Change(jobs=frozenset(self.since), reasons=("zone labels unsettled",))

    def gone(self, key: JobRef) -> None:
        """The job is gone: it waits no more."""
        self.since.pop(key, None)
        self._overdue.discard(key)

    def record(
        self, findings: Iterable[Finding], *, first_seen: float | None,
        diagnose: Callable[[JobScope], tuple[Finding, ...]],
    ) -> int:  # fmt: skip
        """Record the findings no zone-mirroring label still to come can change; the others
        wait for their pods' label or phase updates (`ClusterCache.await_labels`). How many new
        incidents were opened."""
        unsettled: set[JobRef] = set()
        settled: list[JobRef] = []
        opened = 0
        ready: list[Finding] = []
        for finding in findings:
            key = finding.job
            to_record = finding
            if finding.awaiting_labels:
                to_record = self._past_bound(finding)
                if to_record.awaiting_labels:
                    unsettled.add(key)
                    continue
            else:
                self._overdue.discard(key)
            self.since.pop(key, None)
            settled.append(key)
            ready.append(to_record)
        outcomes = self.recorder.record_all(ready, first_seen=first_seen)
        opened += sum(1 for o in outcomes if o is not None and o.new)
        cache = self.cache
        cache.labels_settled(settled)
        if not unsettled:
            return opened
        cache.await_labels(unsettled)
        # labels written while this batch was diagnosed came before the cache watched for them:
        # look once more, now that it does
        again = Change(jobs=frozenset(unsettled), reasons=("zone labels",))
        for finding in diagnose(job_scope(again)):
            key = finding.job
            if key in unsettled and not finding.awaiting_labels:
                self.since.pop(key, None)
                outcome = self.recorder.record(finding, first_seen=first_seen)
                opened += 1 if (outcome is not None and outcome.new) else 0
                cache.labels_settled([key])
        return opened

    def _past_bound(self, finding: Finding) -> Finding:
        """The finding as it is while its labels may still come; once they have been awaited
        `detection.label_settle_timeout`, the finding to record anyway: the verdict at hand, with
        a reason naming the pods whose labels were still unsettled."""
        if finding.job not in self._overdue:
            now = self.monotonic()
            if finding.job not in self.since:
                log.info("finding held until the zone-mirroring labels settle",
                         extra={"job": str(finding.job), "verdict": str(finding.verdict),
                                "pods": list(finding.awaiting_labels[:5])})  # fmt: skip
            since = self.since.setdefault(finding.job, now)
            if now - since < self.timeout:
                return finding
            self._overdue.add(finding.job)
        pods = ", ".join(finding.awaiting_labels)
        note = (f"the zone-mirroring labels were still unsettled after "
                f"{self.timeout:g}s (pods {pods}): recorded with the verdict at hand, "
                f"which may change once they are written")  # fmt: skip
        return replace(finding, awaiting_labels=(), reasons=(*finding.reasons, note))
