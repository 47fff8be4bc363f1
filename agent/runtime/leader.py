"""Leader election on a `coordination.k8s.io/v1` Lease (the Python client ships no Lease lock).

Called by the composition root: `LeaderElector.run_in_thread()` starts the loop; `is_leader()` gates
sweeps and remediations, `term()` numbers the terms (a remediation writes only in the term it
started in); `stop()` releases the lease on shutdown. The decision is pure
(`decide(record, ...)`: create, acquire, renew or wait, from the lease as last seen and how long ago
it last changed by our own monotonic clock, as client-go does, so clock skew between replicas cannot
make two leaders). The I/O is thin: read, create, replace with the record's resourceVersion (a 409
Conflict means another replica won the race, so optimistic concurrency makes it safe).

Timing: the leader renews every `retry_period`; if it cannot renew for `renew_deadline` it stops
leading (calls `on_stopped_leading`) and `is_leader()` turns false at the deadline even when the
loop is stuck in a slow call; a renewal that lands after the deadline (the lease still ours) ends
that term and starts a new one (`on_stopped_leading`, then `on_started_leading`), so what leader
work refused in between is caught up. A follower takes over once the lease has not changed for
`lease_duration` (or at once when the holder released it); while it waits it logs `following` once
per holder it sees. What it does not do: run leader work.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from agent.sources.kubeapi import KubeApi, KubeApiError

log = logging.getLogger(__name__)


class LeaseAction(StrEnum):
    CREATE = "create"
    ACQUIRE = "acquire"
    RENEW = "renew"
    WAIT = "wait"


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    lease_duration_s: int
    acquire_time: datetime | None
    renew_time: datetime | None
    transitions: int
    resource_version: str
    annotations: dict[str, str] = field(default_factory=dict)


def decide(
    record: LeaseRecord | None,
    *,
    identity: str,
    unchanged_for: float,
) -> LeaseAction:
    """What to do next, given the lease as last read and for how long (seconds, by our monotonic
    clock) it has not changed."""
    if record is None:
        return LeaseAction.CREATE
    if record.holder == identity:
        return LeaseAction.RENEW
    if not record.holder:
        return LeaseAction.ACQUIRE  # released
    if unchanged_for >= record.lease_duration_s:
        return LeaseAction.ACQUIRE  # expired
    return LeaseAction.WAIT


def leading(last_renewed: float | None, *, now: float, renew_deadline: float) -> bool:
    """Leader work may run only while the last successful renewal is younger than the deadline."""
    return last_renewed is not None and now - last_renewed < renew_deadline


def micro_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def record_from(obj: dict[str, Any]) -> LeaseRecord:
    spec = obj.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        lease_duration_s=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=_parse_time(spec.get("acquireTime")),
        renew_time=_parse_time(spec.get("renewTime")),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str((obj.get("metadata") or {}).get("resourceVersion") or ""),
        annotations={
            str(k): str(v)
            for k, v in ((obj.get("metadata") or {}).get("annotations") or {}).items()
        },
    )


def lease_body(record: LeaseRecord, *, name: str, namespace: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if record.annotations:
        metadata["annotations"] = dict(record.annotations)
    if record.resource_version:
        metadata["resourceVersion"] = record.resource_version
    spec: dict[str, Any] = {
        "holderIdentity": record.holder,
        "leaseDurationSeconds": record.lease_duration_s,
        "leaseTransitions": record.transitions,
    }
    if record.acquire_time:
        spec["acquireTime"] = micro_time(record.acquire_time)
    if record.renew_time:
        spec["renewTime"] = micro_time(record.renew_time)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": spec,
    }


class LeaseConflictError(Exception):
    """Another replica changed or created the lease first (HTTP 409)."""


class LeaseUnavailableError(Exception):
    """The API server could not be asked (network, 5xx, 403...)."""


class LeaseClient:
    """The thin I/O: read, create, replace one Lease, as raw JSON through `KubeApi`."""

    def __init__(self, api: KubeApi, *, namespace: str, name: str) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    def _call(self, method: str, path: str, body: Any, *, timeout: float) -> dict[str, Any] | None:
        try:
            obj = self.api.json(method, path, body=body, timeout=timeout)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            if exc.status == 409:
                raise LeaseConflictError(exc.reason) from exc
            raise LeaseUnavailableError(str(exc)) from exc
        if not isinstance(obj, dict):
            raise LeaseUnavailableError(f"unexpected answer from {path}")
        return obj

    def get(self, *, timeout: float) -> LeaseRecord | None:
        obj = self._call("GET", f"{self.base}/{self.name}", None, timeout=timeout)
        return None if obj is None else record_from(obj)

    def create(self, record: LeaseRecord, *, timeout: float) -> LeaseRecord:
        body = lease_body(replace(record, resource_version=""), name=self.name, namespace=self.namespace)
        obj = self._call("POST", self.base, body, timeout=timeout)
        if obj is None:
            raise LeaseUnavailableError(f"namespace {self.namespace} not found")
        return record_from(obj)

    def replace(self, record: LeaseRecord, *, timeout: float) -> LeaseRecord:
        body = lease_body(record, name=self.name, namespace=self.namespace)
        obj = self._call("PUT", f"{self.base}/{self.name}", body, timeout=timeout)
        if obj is None:
            raise LeaseConflictError("lease was deleted")
        return record_from(obj)


@dataclass
class _Seen:
    record: LeaseRecord | None
    since: float


class LeaderElector:
    """Runs the acquire/renew loop for `identity`; callbacks run on the elector's thread."""

    def __init__(
        self,
        client: LeaseClient,
        *,
        identity: str,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
        on_started_leading: Callable[[], None] = lambda: None,
        on_stopped_leading: Callable[[], None] = lambda: None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.client = client
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.monotonic = monotonic
        self.wall = wall
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_renewed: float | None = None
        self._leading = False
        self._record: LeaseRecord | None = None
        self._seen = _Seen(None, monotonic())
        self.transitions_seen = 0
        self.late_renewals = 0  # renewals that landed after the renew deadline (new terms)
        self._pending: dict[str, str] = {}
        self._pending_lock = threading.Lock()
        self._following = ""

    def set_annotation(self, key: str, value: str) -> None:
        """Have the next renewal write `key: value` on the Lease (shared state for the next
        leader, e.g. which scheduled sweeps already ran)."""
        with self._pending_lock:
            self._pending[key] = value

    def annotations(self) -> dict[str, str]:
        """The Lease's annotations as last written or acquired (pending ones included)."""
        record = self._record
        with self._pending_lock:
            return {**(record.annotations if record else {}), **self._pending}

    def _with_pending(self, record: LeaseRecord) -> tuple[LeaseRecord, dict[str, str]]:
        with self._pending_lock:
            pending = dict(self._pending)
        if not pending:
            return record, pending
        return replace(record, annotations={**record.annotations, **pending}), pending

    def _written(self, pending: dict[str, str]) -> None:
        with self._pending_lock:
            for key, value in pending.items():
                if self._pending.get(key) == value:
                    del self._pending[key]

    def _follow(self, holder: str) -> None:
        """Log once per holder that this replica follows it (the lease is held and not expired)."""
        if holder and holder != self._following:
            self._following = holder
            log.info("following", extra={"identity": self.identity, "holder": holder})

    def is_leader(self) -> bool:
        return self._leading and leading(
            self._last_renewed, now=self.monotonic(), renew_deadline=self.renew_deadline
        )

    def term(self) -> int | None:
        """The leadership term this replica is in (it grows by one each time it starts leading,
        a late renewal included), or None while it does not lead: what a remediation's write
        fence compares (`agent.remediation.fence`)."""
        return self.transitions_seen if self.is_leader() else None

    def _timeout(self) -> float:
        if self._leading and self._last_renewed is not None:
            left = self._last_renewed + self.renew_deadline - self.monotonic()
            return max(0.1, min(self.retry_period, left))
        return max(0.1, self.retry_period)

    def _observe(self, record: LeaseRecord | None) -> float:
        """Remember the record; return for how long it has not changed (seconds)."""
        now = self.monotonic()
        previous = self._seen.record
        if previous is None or record is None or previous.resource_version != record.resource_version:
            self._seen = _Seen(record, now)
        return now - self._seen.since

    def try_acquire_or_renew(self) -> bool:
        """One step: True when we hold the lease afterwards."""
        timeout = self._timeout()
        started = self.monotonic()
        try:
            record = self.client.get(timeout=timeout)
            unchanged_for = self._observe(record)
            action = decide(record, identity=self.identity, unchanged_for=unchanged_for)
            now = self.wall()
            duration_s = max(1, round(self.lease_duration))
            if action is LeaseAction.WAIT:
                assert record is not None
                self._follow(record.holder)
                return False
            if action is LeaseAction.CREATE:
                self._record = self.client.create(
                    LeaseRecord(self.identity, duration_s, now, now, 0, ""), timeout=timeout
                )
            elif action is LeaseAction.ACQUIRE:
                assert record is not None
                self._record = self.client.replace(
                    replace(
                        record,
                        holder=self.identity,
                        lease_duration_s=duration_s,
                        acquire_time=now,
                        renew_time=now,
                        transitions=record.transitions + 1,
                    ),
                    timeout=timeout,
                )
            else:
                assert record is not None
                renewed, pending = self._with_pending(
                    replace(record, renew_time=now, lease_duration_s=duration_s)
                )
                self._record = self.client.replace(renewed, timeout=timeout)
                self._written(pending)
        except LeaseConflictError as exc:
            log.info("lease conflict", extra={"identity": self.identity, "error": str(exc)})
            return False
        except LeaseUnavailableError as exc:
            log.warning("lease unavailable", extra={"identity": self.identity, "error": str(exc)})
            return False
        self._observe(self._record)
        self._last_renewed = started
        self._following = ""
        return True

    def _set_leading(self, value: bool) -> None:
        if value == self._leading:
            return
        self._leading = value
        if value:
            self.transitions_seen += 1
            log.info("started leading", extra={"identity": self.identity})
            self.on_started_leading()
        else:
            log.warning("stopped leading", extra={"identity": self.identity})
            self.on_stopped_leading()

    def step(self) -> None:
        previous = self._last_renewed
        ok = self.try_acquire_or_renew()
        if ok and self._leading and not leading(
            previous, now=self.monotonic(), renew_deadline=self.renew_deadline
        ):
            # renewed only after the renew deadline: `is_leader()` said False meanwhile, so leader
            # work was refused in between; that term ended, and the new one starts afresh
            # (`on_started_leading` catches up what was refused)
            log.warning("lease renewed after the renew deadline: a new term",
                        extra={"identity": self.identity})
            self.late_renewals += 1
            self._set_leading(False)
        if ok:
            self._set_leading(True)
        elif self._leading and not leading(
            self._last_renewed, now=self.monotonic(), renew_deadline=self.renew_deadline
        ):
            self._set_leading(False)
        elif self._leading and self._record is not None:
            # someone else holds it now: stop at once rather than at the deadline
            seen = self._seen.record
            if seen is not None and seen.holder and seen.holder != self.identity:
                self._set_leading(False)

    def _guarded_step(self) -> None:
        try:
            self.step()
        except Exception:  # top-level loop: log and keep electing
            log.exception("leader election step failed", extra={"identity": self.identity})

    def run(self, *, stepped: bool = False) -> None:
        """Step every `retry_period` until stopped (`stepped`: the first step was just taken, so
        the loop waits before its next one); then stop leading and release the lease."""
        if stepped:
            self._stop.wait(self.retry_period)
        while not self._stop.is_set():
            self._guarded_step()
            self._stop.wait(self.retry_period)
        self._set_leading(False)
        self.release()

    def run_in_thread(self, *, step_first: bool = False) -> threading.Thread:
        """Run the loop on its own thread; `step_first`: take the first step on the caller's
        thread before that (the caller then knows whether it leads, as `is_leader()` says, and
        the callbacks of that step run on its thread)."""
        if step_first:
            self._guarded_step()
        self._thread = threading.Thread(
            target=self.run, kwargs={"stepped": step_first}, name="leader-election", daemon=True
        )
        self._thread.start()
        return self._thread

    def release(self) -> None:
        """Give the lease up (holder cleared) so a follower can take over at once."""
        record = self._record
        if record is None or record.holder != self.identity:
            return
        try:
            released, pending = self._with_pending(
                replace(record, holder="", lease_duration_s=1, renew_time=self.wall())
            )
            self._record = self.client.replace(released, timeout=max(0.5, self.retry_period))
            self._written(pending)
            log.info("released the lease", extra={"identity": self.identity})
        except (LeaseConflictError, LeaseUnavailableError) as exc:
            log.warning("could not release the lease", extra={"error": str(exc)})
        self._last_renewed = None

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)


class AlwaysLeader:
    """Leader election disabled (a single replica): always the leader, in one term."""

    def is_leader(self) -> bool:
        return True

    def term(self) -> int:
        return 0
