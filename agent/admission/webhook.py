"""One admission request end to end: parse it, decide over the watch cache, count, record, answer.

Who calls it: the webhook's HTTPS server (`agent.admission.server`) with each request body; built
by the composition root over the pipeline's parsed view, the store and the agent's metrics.
What it does, per request: parses the AdmissionReview (`agent.admission.review`; a body that is
not one is answered 400 and counted `invalid`); identifies what is created (`subject`); passes
unchanged what is not a CREATE of a kind it places, an object opted out (`admission.object_label:
disabled`) and everything while the watch cache is not synced; otherwise decides
(`agent.admission.decision`, under one lock: the decider's per-view caches are shared). For a
generic group's object (a Deployment, a batch Job, or, for a group placed pod by pod, a Pod)
it first reads the group's kept decision from the store and, when it places the first object,
keeps that zone for the group (the first replica's wins; the loser re-decides with the winner's
zone), for `admission.group_memory`: a group's pods created one by one all get the first one's
zone. Every answer is `allowed`,
with the patch (mode enforce) and one warning line. Every decision is counted (`zonemedic_admission_decisions_total{outcome}`) and
timed; every request but a dry run is recorded (`admission_decisions`), by a background writer so
the database is off the answer's path (a dry run keeps nothing, kept group decisions included:
`sideEffects: None`). The store away: decisions are answered and counted, a kept group decision
is not read (the object is decided on its own) and the records are logged as lost.
What it does not do: call the API server, or write to the cluster.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from datetime import datetime

import orjson

from agent.admission.decision import Decider, Decision, View
from agent.admission.review import AdmissionRequest, ReviewError, parse_review, response
from agent.admission.subject import Subject, identify
from agent.errors import UnavailableError
from agent.model.admission import PLACING, AdmissionOutcome, AdmissionRecord
from agent.settings import Settings
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)
INVALID = "invalid"  # the counter's outcome for a body that is not an AdmissionReview
OPTED_OUT = "disabled"  # the object label's value that opts a job out
QUEUE_SIZE = 10_000


class RecordWriter:
    """Writes admission records to the store on a thread of its own (bounded; a full queue or
    an unreachable store loses the record, logged)."""

    def __init__(self, store: IncidentStore) -> None:
        self._store = store
        self._queue: queue.Queue[AdmissionRecord | None] = queue.Queue(maxsize=QUEUE_SIZE)
        self._thread = threading.Thread(target=self._run, name="admission-records", daemon=True)
        self._thread.start()

    def put(self, record: AdmissionRecord) -> None:
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            log.warning("admission record lost: the writer is behind", extra={"job": record.job_name})

    def _run(self) -> None:
        while True:
            record = self._queue.get()
            if record is None:
                return
            try:
                self._store.record_admission(record)
            except UnavailableError as exc:
                log.warning("admission record lost: the store is away",
                            extra={"job": record.job_name, "error": str(exc)})  # fmt: skip
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        """Wait until every record put so far is written (or lost)."""
        self._queue.join()

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)


class Webhook:
    """The admission webhook over the cache's view (see the module docstring)."""

    def __init__(
        self, settings: Settings, *, view: Callable[[], View], ready: Callable[[], bool],
        store: IncidentStore | None, count: Callable[[str], None],
        observe: Callable[[float], None], now: Callable[[], datetime],
    ) -> None:  # fmt: skip
        self.settings = settings
        self._view, self._ready, self._store = view, ready, store
        self._count, self._observe, self._now = count, observe, now
        self._decider = Decider(settings.diagnosis)
        self._lock = threading.Lock()
        self.records = RecordWriter(store) if store is not None else None

    def handle(self, body: bytes) -> tuple[int, bytes]:
        """The HTTP status and JSON answer for one request body."""
        started = time.perf_counter()
        try:
            request = parse_review(body)
        except ReviewError as exc:
            self._count(INVALID)
            return 400, orjson.dumps({"error": str(exc)})
        outcome, warning, patch, record = self.decide(request)
        self._count(outcome.value)
        if record is not None and not request.dry_run and self.records is not None:
            self.records.put(record)
        answer = response(request.uid, patch=patch, warnings=[warning])
        self._observe(time.perf_counter() - started)
        return 200, orjson.dumps(answer)

    def decide(
        self, request: AdmissionRequest
    ) -> tuple[AdmissionOutcome, str, tuple[dict[str, object], ...], AdmissionRecord | None]:
        """(outcome, warning, JSON patch, the record to keep) for one request."""
        settings = self.settings
        kind = request.kind
        subject = identify(request.object, group=kind.group, version=kind.version, kind=kind.kind,
                           namespace=request.namespace, groups=settings.diagnosis.groups)  # fmt: skip
        shown = f"{kind.kind} {request.namespace}/{request.name or '(generated name)'}"
        if subject is None or request.operation != "CREATE":
            why = ("not a CREATE" if subject is not None
                   else "not a kind zonemedic places (nor a configured group's workload)")  # fmt: skip
            return AdmissionOutcome.SKIPPED, f"zonemedic: {shown} passed unchanged: {why}", (), None
        labels = (request.object.get("metadata") or {}).get("labels") or {}
        if labels.get(settings.admission.object_label) == OPTED_OUT:
            decision = self._unchanged(subject, f"opted out ({settings.admission.object_label}="
                                                f"{OPTED_OUT})")  # fmt: skip
        elif not self._ready():
            decision = self._unchanged(subject, "the agent's watch cache is not synced yet")
        else:
            decision = self._decide(subject, request)
        return decision.outcome, decision.warning, decision.patch, self._record(request, subject, decision)

    def _unchanged(self, subject: Subject, why: str) -> Decision:
        return Decision(AdmissionOutcome.SKIPPED, subject.ref,
                        f"zonemedic: {subject.kind_name} {subject.ref.namespace}/{subject.name} "
                        f"passed unchanged: {why}")  # fmt: skip

    def _decide(self, subject: Subject, request: AdmissionRequest) -> Decision:
        enforce = self.settings.admission.enforcing
        group = subject.group
        kept = self._kept(subject) if group is not None else None
        with self._lock:
            view = self._view()
            decision = self._decider.decide(subject, view, enforce=enforce, kept=kept)
        if (group is None or kept is not None or decision.zone is None or request.dry_run
                or decision.outcome not in PLACING or self._store is None):  # fmt: skip
            return decision
        try:
            winner = self._store.keep_group_zone(
                cluster=self.settings.cluster_name, namespace=subject.ref.namespace,
                group=group.name, zone=decision.zone, object_kind=subject.kind_name,
                object_name=subject.name, now=self._now(), memory=self.settings.admission.group_memory)  # fmt: skip
        except UnavailableError as exc:
            log.warning("a group's admission decision was not kept: the store is away",
                        extra={"group": group.name, "error": str(exc)})  # fmt: skip
            return decision
        if winner == decision.zone:
            return decision
        with self._lock:
            return self._decider.decide(subject, self._view(), enforce=enforce, kept=winner)

    def _kept(self, subject: Subject) -> str | None:
        if self._store is None or subject.group is None:
            return None
        try:
            return self._store.kept_group_zone(
                cluster=self.settings.cluster_name, namespace=subject.ref.namespace,
                group=subject.group.name, now=self._now(), memory=self.settings.admission.group_memory)  # fmt: skip
        except UnavailableError as exc:
            log.warning("a group's kept admission decision was not read: the store is away",
                        extra={"group": subject.group.name, "error": str(exc)})  # fmt: skip
            return None

    def _record(self, request: AdmissionRequest, subject: Subject, decision: Decision) -> AdmissionRecord:
        return AdmissionRecord(
            cluster=self.settings.cluster_name, request_uid=request.uid, decided_at=self._now(),
            job_kind=subject.ref.kind.value, job_namespace=subject.ref.namespace,
            job_name=subject.ref.name, object_kind=subject.kind_name, object_name=subject.name,
            outcome=decision.outcome, zone=decision.zone, mode=self.settings.admission.mode.value,
            warning=decision.warning, kueue=decision.kueue, kept=decision.kept,
        )  # fmt: skip

    def stop(self) -> None:
        if self.records is not None:
            self.records.stop()
