"""Request accounting and fault injection for the twin's API server.

`Accounting` counts API requests per verb and resource (what benchmarks read to measure an
API-call budget) and keeps the request audit: each distinct (user, verb, API group, resource,
subresource) tried, and whether RBAC allowed it (what the RBAC tests compare with a ClusterRole), and
a log of the allowed writes (who wrote which object when: what a soak checks its guarantees on).
`Faults` holds injected faults: answer the next N requests with 500 or 429 + Retry-After
(optionally only for one verb/resource), add latency to every request, and refuse writes the way
admission does (`refuse`: a validating webhook that denies, or an exhausted ResourceQuota; for one
verb and resource, optionally one object name, dry runs only, real writes only, or both), and run
a callback on one real write (`on_write`: as it arrives, before it is applied: a request held in
flight; or once it landed, before its answer is sent: what a client does right after a write
landed is what the callback makes happen first). Closing
watch streams and expiring history act on the server and the store; the server exposes all of it
under /twin/. Thread-safe; no HTTP here (the HTTP layer words a refusal as the server does).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

WRITE_LOG = 200_000  # writes remembered (a soak's worth)


@dataclass(frozen=True, order=True)
class AuditEntry:
    """One kind of resource request a user tried, and whether it was allowed."""

    user: str
    verb: str
    group: str
    resource: str
    subresource: str
    allowed: bool


WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass(frozen=True)
class WriteRecord:
    """One write request that RBAC allowed (dry runs included, flagged), in arrival order."""

    at: float  # time.time() when it arrived
    user: str
    verb: str
    group: str
    resource: str
    namespace: str
    name: str
    dry_run: bool


class Accounting:
    """Request counts keyed "verb resource" (e.g. "list pods", "patch pytorchjobs"), and the
    audit of distinct requests per user (`audited`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._audit: Counter[AuditEntry] = Counter()
        self._writes: deque[WriteRecord] = deque(maxlen=WRITE_LOG)

    def record(self, verb: str, resource: str) -> None:
        with self._lock:
            self._counts[f"{verb} {resource}"] += 1

    def audit(self, entry: AuditEntry) -> None:
        """Note one resource request as RBAC judged it (before it is served or failed)."""
        with self._lock:
            self._audit[entry] += 1

    def write(self, record: WriteRecord) -> None:
        """Note one allowed write (the log keeps the last WRITE_LOG)."""
        with self._lock:
            self._writes.append(record)

    def writes(self) -> list[WriteRecord]:
        with self._lock:
            return list(self._writes)

    def audited(self) -> dict[AuditEntry, int]:
        """Every distinct request audited so far, with how many times it was made."""
        with self._lock:
            return dict(sorted(self._audit.items()))

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._audit.clear()
            self._writes.clear()


@dataclass(frozen=True)
class Failure:
    """How to answer one failed request."""

    code: int
    retry_after: int | None


@dataclass
class _FailRule:
    remaining: int
    code: int
    retry_after: int | None
    verb: str | None
    resource: str | None


class RefusalKind(StrEnum):
    WEBHOOK = "webhook"  # a validating admission webhook denies the request
    QUOTA = "quota"  # a ResourceQuota on object counts is exhausted
    CONFLICT = "conflict"  # another writer changed the object since it was read (409, a lost race)


@dataclass(frozen=True)
class Refusal:
    """How admission refuses one request: a webhook's name and message, or a quota's name; or a lost
    optimistic-lock race."""

    kind: RefusalKind
    source: str  # the webhook's or the ResourceQuota's name
    message: str  # the webhook's own message (unused for a quota)


@dataclass
class _RefuseRule:
    remaining: int | None  # None: every matching request until cleared
    refusal: Refusal
    verb: str
    resource: str
    name: str | None
    dry_run: bool | None  # None: dry runs and real writes; True: dry runs only; False: real only


@dataclass
class _WriteHook:
    callback: Callable[[WriteRecord], None]
    verb: str | None
    resource: str
    user: str | None
    landed: bool  # False: as the write arrives (before it is applied); True: once it landed


class Faults:
    """Injected faults; `take(verb, resource)` says whether to fail this request, `refusal(...)`
    whether admission refuses this write."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_FailRule] = []
        self._refusals: list[_RefuseRule] = []
        self._hooks: list[_WriteHook] = []
        self.latency_seconds = 0.0

    def on_write(
        self,
        callback: Callable[[WriteRecord], None],
        *,
        resource: str,
        verb: str | None = None,
        user: str | None = None,
        landed: bool = True,
    ) -> None:
        """Call `callback` once, on the next real (not dry-run) write of `resource` (by `verb` and
        `user` when given): as it arrives (`landed=False`: the request waits, unapplied, while the
        callback runs) or once it landed (before its answer is sent). It runs on the request's
        thread; what it raises is not the request's concern (the write is answered as usual)."""
        if verb is not None and verb not in WRITE_VERBS:
            raise ValueError(f"write hooks apply to writes ({', '.join(sorted(WRITE_VERBS))}), not {verb!r}")
        with self._lock:
            self._hooks.append(_WriteHook(callback, verb, resource, user, landed))

    def hooks(self) -> int:
        """Write hooks still armed."""
        with self._lock:
            return len(self._hooks)

    def disarm(self) -> None:
        """Drop every write hook and refusal still armed (failures and latency stay)."""
        with self._lock:
            self._hooks.clear()
            self._refusals.clear()

    def wrote(self, record: WriteRecord, *, landed: bool) -> None:
        """Run (and disarm) the hook due for this real write at this moment, if any."""
        if record.dry_run:
            return
        with self._lock:
            hook = next((h for h in self._hooks if h.landed == landed
                         and h.resource == record.resource and h.verb in (None, record.verb)
                         and h.user in (None, record.user)), None)
            if hook is None:
                return
            self._hooks.remove(hook)
        try:
            hook.callback(record)
        except Exception:
            logging.getLogger(__name__).exception("twin write hook failed")

    def refuse(
        self,
        *,
        verb: str,
        resource: str,
        kind: RefusalKind = RefusalKind.WEBHOOK,
        source: str | None = None,
        message: str = "the request does not meet the cluster's policy",
        count: int | None = None,
        name: str | None = None,
        dry_run: bool | None = None,
    ) -> None:
        """Refuse matching writes as admission does (403 Forbidden, worded by the HTTP layer), or
        as a write that lost the optimistic-lock race does (`CONFLICT`: 409 Conflict):
        `count` of them (None: until `clear`), of object `name` (None: any), dry runs only
        (`dry_run=True`), real writes only (False) or both (None)."""
        if verb not in WRITE_VERBS:
            raise ValueError(f"refusals apply to writes ({', '.join(sorted(WRITE_VERBS))}), not {verb!r}")
        if count is not None and count < 1:
            raise ValueError(f"refusal count must be at least 1, not {count}")
        kind = RefusalKind(kind)
        if kind is RefusalKind.QUOTA and verb != "create":
            raise ValueError("an object-count quota refuses creates only")
        default = {RefusalKind.WEBHOOK: "deny.twin.zonemedic.io", RefusalKind.QUOTA: "object-counts",
                   RefusalKind.CONFLICT: ""}[kind]  # fmt: skip
        with self._lock:
            self._refusals.append(_RefuseRule(
                count, Refusal(kind, source or default, message), verb, resource, name, dry_run,
            ))  # fmt: skip

    def refusal(self, verb: str, resource: str, *, name: str, dry_run: bool) -> Refusal | None:
        """The refusal due for this write, if any (a counted rule uses one up)."""
        with self._lock:
            for rule in self._refusals:
                if (rule.verb, rule.resource) != (verb, resource) or rule.name not in (None, name):
                    continue
                if rule.dry_run is not None and rule.dry_run != dry_run:
                    continue
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._refusals.remove(rule)
                return rule.refusal
        return None

    def refusals(self) -> int:
        """Refusal rules still armed."""
        with self._lock:
            return len(self._refusals)

    def fail(
        self,
        count: int,
        *,
        code: int = 500,
        retry_after: int | None = None,
        verb: str | None = None,
        resource: str | None = None,
    ) -> None:
        """Answer the next `count` matching requests with `code` (500 or 429)."""
        if code not in (429, 500, 503):
            raise ValueError(f"fault code must be 429, 500 or 503, not {code}")
        if count < 1:
            raise ValueError(f"fault count must be at least 1, not {count}")
        if code == 429 and retry_after is None:
            retry_after = 1
        with self._lock:
            self._rules.append(_FailRule(count, code, retry_after, verb, resource))

    def set_latency(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"latency must not be negative, not {seconds}")
        self.latency_seconds = seconds

    def take(self, verb: str, resource: str) -> Failure | None:
        with self._lock:
            for rule in self._rules:
                if rule.verb not in (None, verb) or rule.resource not in (None, resource):
                    continue
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self._rules.remove(rule)
                return Failure(rule.code, rule.retry_after)
        return None

    def pending(self) -> int:
        with self._lock:
            return sum(r.remaining for r in self._rules)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self._refusals.clear()
            self._hooks.clear()
            self.latency_seconds = 0.0
