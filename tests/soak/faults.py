"""The soak's random faults, one at a time at a bounded rate: watch streams cut, 410 storms
(history compacted and every watch cut), API 500s and 429s (the twin's fault injection), the
Prometheus server stopped then started again, Slack answering 429 or 500 for a while, the
private PostgreSQL restarted (a real restart: every connection cut), and the leader SIGKILLed
(a fresh replica started in its place). Three strike at a remediation's write, armed on the twin's
API server for the agents' next real write of a training job or of a generic group's workload
(one armed at a time, none while a leader is paused, dropped if no write comes within
ARMED_FOR): `record_refused` stops PostgreSQL once the write landed, before its answer (the
write is in the cluster, its record cannot be made; the database comes back after a few
seconds), on the next write of a PyTorchJob, a batch Job or a Deployment; `leader_pause`
SIGSTOPs the leader as its write arrives (a PyTorchJob write, a batch Job's DELETE, a
Deployment's patch) and holds the request until the other replica leads, then SIGCONTs it and
lets the late write through; `admission_refused` has admission (a validating webhook,
DENY_WEBHOOK) refuse either the next PyTorchJob patch (the refusal is armed as the write
arrives, for that request: a write still on its way from before cannot take it) or, for every
other one armed (the first, the third, ...), the CREATE of a group's worker Job recreated from the plan
(annotated `.../planned` by the agent; its dry run passes, the real CREATE after the DELETE is
refused, as a quota used up meanwhile would: the agent must recreate the original). The first
faults are one of each kind, in a random order; then kinds are drawn by weight. Every fault
injected is counted by kind; `Faults.struck` lists the armed ones that struck (kind, the
PyTorchJob or the group's workload written, verb, time).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agent.remediation.group_steps import RECREATED_ANNOTATION
from agent.remediation.template import TemplateState
from agent.twin.apierror import ApiError
from agent.twin.faults import WriteRecord
from tests.soak.rig import Rig
from tests.soak.workload import BATCH_JOBS

KINDS = ("watch_cut", "storm_410", "api_500", "api_429", "prometheus_restart", "slack_429",
         "slack_500", "database_restart", "leader_kill", "record_refused", "leader_pause",
         "admission_refused")
WEIGHTS = (3, 2, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1)
MIN_GAP = {"leader_kill": 15.0, "database_restart": 10.0}  # seconds between two of these
ARMED = ("record_refused", "leader_pause", "admission_refused")
ARMED_FOR = 30.0  # an armed fault no write struck is dropped after this many seconds
DENY_WEBHOOK = "deny.soak.zonemedic.io"
JOB_RESOURCE = "pytorchjobs"
# the writes `record_refused` (any verb) and `leader_pause` (these verbs) strike
RECORD_TARGETS = ((JOB_RESOURCE, None), ("jobs", None), ("deployments", None))
PAUSE_TARGETS = ((JOB_RESOURCE, None), ("jobs", "delete"), ("deployments", "patch"))


@dataclass(frozen=True)
class Struck:
    """An armed fault that struck the agents' write of a job."""

    kind: str
    namespace: str
    name: str
    verb: str
    at: float  # time.time()


@dataclass
class FaultLog:
    counts: Counter[str] = field(default_factory=Counter)
    lines: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, kind: str, detail: str = "", *, count: bool = True) -> None:
        """Log a line; `count`: it is a fault injected (not what became of an armed one)."""
        with self.lock:
            if count:
                self.counts[kind] += 1
            self.lines.append(f"{time.strftime('%H:%M:%S')} {kind} {detail}".rstrip())


class Faults:
    def __init__(self, rig: Rig, rng: random.Random) -> None:
        self.rig = rig
        self.rng = rng
        self.log = FaultLog()
        self.last: dict[str, float] = {}
        self.deck: list[str] = []
        self.dealt = False
        self.struck: list[Struck] = []
        self.armed: tuple[str, float] | None = None  # kind, time.monotonic() armed
        self.pausing = threading.Event()  # a leader is SIGSTOPped (no leader kill meanwhile)
        self.claim = threading.Lock()  # one of the hooks armed for one fault strikes
        self.refuse_create = False  # admission refuses the next planned group Job CREATE
        self.admissions = 0  # admission refusals armed so far
        self.real_create: int | None = None  # the thread serving the agents' real Job CREATE
        rig.cluster.store.add_admission(BATCH_JOBS, self._admit_job)
        self.pg_lock = threading.Lock()  # one PostgreSQL stop/start at a time
        self.threads: list[threading.Thread] = []

    def inject(self) -> str:
        """One random fault (one whose minimum gap has not passed becomes a watch cut)."""
        if not self.deck and not self.dealt:  # every kind once first, in a random order
            self.deck = self.rng.sample(KINDS, len(KINDS))
            self.dealt = True
        kind = self.deck.pop() if self.deck else self.rng.choices(KINDS, weights=WEIGHTS)[0]
        if time.monotonic() - self.last.get(kind, -1e9) < MIN_GAP.get(kind, 0.0):
            kind = "watch_cut"
        self._drop_stale()
        if (kind in ARMED and (self.armed is not None or self.pausing.is_set())) or (
                kind == "leader_kill" and self.pausing.is_set()):
            kind = "watch_cut"  # one armed fault at a time, and none while a leader is paused
        rig, rng = self.rig, self.rng
        api = rig.access.server
        if kind == "watch_cut":
            self.log.note(kind, f"{api.close_watches()} streams")
        elif kind == "storm_410":
            api.expire_history()
            self.log.note(kind, f"{api.close_watches()} streams")
        elif kind in ("api_500", "api_429"):
            count = rng.randint(3, 15)
            code = 500 if kind == "api_500" else 429
            api.faults.fail(count, code=code, retry_after=1 if code == 429 else None)
            self.log.note(kind, f"{count} requests")
        elif kind == "prometheus_restart":
            rig.prometheus.stop()
            time.sleep(rng.uniform(1, 4))
            rig.prometheus.restart()
            self.log.note(kind)
        elif kind in ("slack_429", "slack_500"):
            seconds = rng.uniform(1, 4)
            rig.slack.fail(status=429 if kind == "slack_429" else 500, seconds=seconds)
            self.log.note(kind, f"{seconds:.1f}s")
        elif kind == "database_restart":
            with self.pg_lock:
                rig.pg.restart()
            self.log.note(kind)
        elif kind in ARMED:
            self._arm(kind)
            self.log.note(kind, "armed for the next agent write of a job")
        elif kind == "leader_kill" and rig.replace_leader():
            self.log.note(kind)
        self.last[kind] = time.monotonic()
        return kind

    def _drop_stale(self) -> None:
        if self.armed is not None and time.monotonic() - self.armed[1] > ARMED_FOR:
            api = self.rig.access.server.faults
            if api.hooks() or api.refusals() or self.refuse_create:
                api.disarm()
                self.refuse_create = False
                self.log.note("disarmed", f"{self.armed[0]}: no agent write within {ARMED_FOR:.0f}s",
                              count=False)
            self.armed = None

    def _arm(self, kind: str) -> None:
        api = self.rig.access.server.faults
        user = self.rig.access.user.name
        self.armed = (kind, time.monotonic())
        if kind == "admission_refused":
            self.admissions += 1
            if self.admissions % 2 == 1:  # the first, third, ...: a group's recreated Job
                self.refuse_create = True
                api.on_write(self._mark_create, resource="jobs", verb="create", user=user,
                             landed=False)
                return
            api.on_write(self._refuse_admission, resource=JOB_RESOURCE, verb="patch", user=user,
                         landed=False)
            return
        if kind == "record_refused":
            for resource, verb in RECORD_TARGETS:
                api.on_write(self._refuse_record, resource=resource, verb=verb, user=user,
                             landed=True)
        else:
            for resource, verb in PAUSE_TARGETS:
                api.on_write(self._pause_leader, resource=resource, verb=verb, user=user,
                             landed=False)

    def _claimed(self, *, pause: bool = False) -> bool:
        """Whether this strike is the armed fault's (the first of its hooks to fire): the
        others are dropped. `pause`: a leader is about to be paused, marked in the same step (no
        other armed fault or leader kill in between)."""
        with self.claim:
            if self.armed is None:
                return False
            if pause:
                self.pausing.set()
            self.armed = None
        self.rig.access.server.faults.disarm()
        return True

    def _strike(self, kind: str, record: WriteRecord) -> None:
        with self.log.lock:
            self.struck.append(Struck(kind, record.namespace, record.name, record.verb, time.time()))
        self.log.note(f"{kind} struck", f"{record.verb} {record.namespace}/{record.name}",
                      count=False)
        self.armed = None

    def _mark_create(self, record: WriteRecord) -> None:
        """On the API server's thread, the agents' next real CREATE of a batch Job arrived,
        before admission: admission (`_admit_job`, on this same thread) sees its body next. The
        hook is armed again for the next CREATE while no planned Job was refused."""
        if not self.refuse_create:
            return
        self.real_create = threading.get_ident()
        self.rig.access.server.faults.on_write(self._mark_create, resource="jobs", verb="create",
                                               user=record.user, landed=False)

    def _admit_job(self, _old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        """The soak's validating webhook on batch Jobs: armed, it refuses the agents' real
        CREATE of a group's worker Job recreated from the plan (never a dry run, never the
        original's re-creation, never another writer's Job)."""
        if not self.refuse_create or self.real_create != threading.get_ident():
            return
        self.real_create = None
        meta = new.get("metadata") or {}
        stamp = str((meta.get("annotations") or {}).get(RECREATED_ANNOTATION) or "")
        if not stamp.endswith(f"/{TemplateState.PLANNED.value}") or not self._claimed():
            return
        self.refuse_create = False
        self._strike("admission_refused", WriteRecord(
            time.time(), "", "create", "batch", "jobs", str(meta.get("namespace") or ""),
            str(meta.get("name") or ""), False))  # fmt: skip
        raise ApiError(403, "Forbidden", f'admission webhook "{DENY_WEBHOOK}" denied the '
                                         "request: the soak refuses this recreated Job")

    def _refuse_admission(self, record: WriteRecord) -> None:
        """On the API server's thread, the agents' next real patch of a job arrived, before
        admission: admission is told to refuse that job's next real patch, which is this very
        request (the refusal is armed here, not when the fault is, so a write that arrived before
        and is still on its way, such as a paused leader's held write, cannot take it, leaving
        the write struck here to land as if nothing were wrong)."""
        if not self._claimed():
            return
        self.rig.access.server.faults.refuse(
            verb="patch", resource=JOB_RESOURCE, source=DENY_WEBHOOK, count=1, name=record.name,
            dry_run=False, message="the soak refuses this write")  # fmt: skip
        self._strike("admission_refused", record)

    def _refuse_record(self, record: WriteRecord) -> None:
        """On the API server's thread, the write landed and is not answered yet: the database
        stops, so the agent's record of that step is refused; it starts again a few seconds on."""
        if not self._claimed():
            return
        self._strike("record_refused", record)
        with self.pg_lock:
            self.rig.pg.stop()
        down = self.rng.uniform(2, 5)

        def start_later() -> None:
            time.sleep(down)
            with self.pg_lock:
                if not self.rig.pg.running():
                    self.rig.pg.start()

        thread = threading.Thread(target=start_later, name="soak-pg-back", daemon=True)
        self.threads.append(thread)
        thread.start()

    def _pause_leader(self, record: WriteRecord) -> None:
        """On the API server's thread, the write arrived and is held: the leader that sent it is
        SIGSTOPped; once the other replica leads (bounded) and a little later, it is SIGCONTed
        and the held write goes on to be applied (a late write of an old leader)."""
        if not self._claimed(pause=True):  # paused before disarmed: no other armed fault meanwhile
            return
        self._strike("leader_pause", record)
        leader = self.rig.leader()
        if leader is None:
            self.pausing.clear()
            return
        os.kill(leader.proc.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                others = [r for r in self.rig.live() if r is not leader]
                if any(r.leader() for r in others):
                    break
                time.sleep(0.3)
            time.sleep(self.rng.uniform(1, 4))
        finally:
            os.kill(leader.proc.pid, signal.SIGCONT)
            self.pausing.clear()

    def heal(self) -> None:
        """End of the faults: nothing pending, everything up."""
        for thread in self.threads:
            thread.join(30)
        self.rig.access.server.faults.clear()
        self.armed = None
        self.refuse_create = False
        self.rig.slack.heal()
        if self.rig.prometheus.process.poll() is not None:
            self.rig.prometheus.restart()
        with self.pg_lock:
            if not self.rig.pg.running():
                self.rig.pg.start()
