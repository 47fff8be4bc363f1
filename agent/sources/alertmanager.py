"""Alertmanager webhook (v4 payload): lenient parsing, dedupe, and mapping alert labels to jobs.

Called by the HTTP app's `POST /alertmanager` handler (through `agent.runtime.alerts`), which turns
`PayloadError` into a 4xx with the reason and hands `Alert`s on. Pure: bytes in, plain data out; the
`Deduper` holds a bounded in-memory set and reads no clock.

Lenient means: only `alerts` (a list of mappings each with a `labels` mapping) is required; unknown
fields are ignored; a missing per-alert `status` falls back to the group's, then to `firing`; a
missing `fingerprint` is derived from the sorted labels (stable, no generated text); number, boolean
and null label values are turned into strings, while a list or object where text belongs is refused
(400) whatever its depth. The body must be UTF-8 and strict JSON without a key twice
(`agent.parsing.strict_json`): a duplicate label could otherwise mean one job to us and another
to whoever reads the alert next. Bodies past `MAX_BODY` are refused (the HTTP layer stops reading them). Alerts name their job through labels: `namespace` (or
`exported_namespace`, `destination_namespace`), then a job name (`training_job`, `job_name`,
`label_training_kubeflow_org_job_name`, `label_jobset_sigs_k8s_io_jobset_name`, `created_by_name`
with `created_by_kind`; a TrainJob is named by its JobSet's kind and name too), else a pod
(`pod`, `exported_pod`, `destination_pod`) that the caller resolves through its pod index.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from agent.errors import InputError
from agent.model.job import JobRef
from agent.model.workload import KUBEFLOW_LABELS, JobKind, workload
from agent.parsing.member import member
from agent.parsing.strict_json import JsonError, parse_json

MAX_BODY = 4 * 1024 * 1024


class PayloadError(InputError):
    """The webhook body cannot be used; the message is the reason given back to Alertmanager."""


class AlertStatus(StrEnum):
    FIRING = "firing"
    RESOLVED = "resolved"


@dataclass(frozen=True)
class Alert:
    status: AlertStatus
    labels: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=dict)
    starts_at: str = ""
    ends_at: str = ""
    fingerprint: str = ""

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    @property
    def dedupe_key(self) -> tuple[str, str, str]:
        return (self.fingerprint, self.status.value, self.starts_at)


@dataclass(frozen=True)
class Webhook:
    receiver: str
    status: AlertStatus
    alerts: tuple[Alert, ...]
    group_key: str = ""


def _text(value: Any, where: str) -> str:
    """A string, or a number/boolean/null written as JSON text; a list or object is refused
    (whatever its depth: nothing here walks it)."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool | int | float):
        return orjson.dumps(value).decode()
    raise PayloadError(f"{where}: expected a string, got a JSON {type(value).__name__}")


def _strings(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PayloadError(f"{where}: expected an object of strings")
    return {str(k): _text(v, member(where, str(k))) for k, v in value.items()}


def _status(value: Any, default: AlertStatus) -> AlertStatus:
    if isinstance(value, str) and value.lower() in AlertStatus.__members__.values():
        return AlertStatus(value.lower())
    return default


def fingerprint_of(labels: Mapping[str, str]) -> str:
    text = "\x00".join(f"{k}\x01{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_webhook(body: bytes) -> Webhook:
    """Parse an Alertmanager webhook body (version 4, leniently)."""
    if len(body) > MAX_BODY:
        raise PayloadError(f"body too large ({len(body)} bytes, limit {MAX_BODY})")
    try:
        data = parse_json(body)  # UTF-8, strict JSON, no key twice
    except JsonError as exc:
        raise PayloadError(str(exc)) from None
    if not isinstance(data, dict):
        raise PayloadError("body must be a JSON object")
    raw_alerts = data.get("alerts")
    if not isinstance(raw_alerts, list):
        raise PayloadError("alerts: expected a list")
    group_status = _status(data.get("status"), AlertStatus.FIRING)
    alerts = []
    for i, raw in enumerate(raw_alerts):
        if not isinstance(raw, dict):
            raise PayloadError(f"alerts[{i}]: expected an object")
        if "labels" not in raw:
            raise PayloadError(f"alerts[{i}].labels: missing")
        labels = _strings(raw.get("labels"), f"alerts[{i}].labels")
        fingerprint = raw.get("fingerprint")
        alerts.append(
            Alert(
                status=_status(raw.get("status"), group_status),
                labels=labels,
                annotations=_strings(raw.get("annotations"), f"alerts[{i}].annotations"),
                starts_at=_text(raw.get("startsAt") or "", f"alerts[{i}].startsAt"),
                ends_at=_text(raw.get("endsAt") or "", f"alerts[{i}].endsAt"),
                fingerprint=fingerprint
                if isinstance(fingerprint, str) and fingerprint
                else fingerprint_of(labels),
            )
        )
    return Webhook(
        receiver=_text(data.get("receiver") or "", "receiver"),
        status=group_status,
        alerts=tuple(alerts),
        group_key=_text(data.get("groupKey") or "", "groupKey"),
    )


class Deduper:
    """Remembers the last `capacity` (fingerprint, status, startsAt) keys of alerts already handled;
    thread-compatible only under the caller's lock. The caller remembers an alert only once its
    handling is done (stored), so a re-send of an alert whose handling failed is handled again."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    def seen(self, alert: Alert) -> bool:
        """True when the alert's key was remembered (Alertmanager re-sends every group_interval)."""
        key = alert.dedupe_key
        if key in self._seen:
            self._seen.move_to_end(key)
            return True
        return False

    def remember(self, alert: Alert) -> None:
        """Remember the alert's key (the oldest key goes when over capacity)."""
        self._seen[alert.dedupe_key] = None
        self._seen.move_to_end(alert.dedupe_key)
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)


_NAMESPACE_LABELS = ("namespace", "exported_namespace", "destination_namespace")
def _series_label(pod_label: str) -> str:
    """The label kube-state-metrics gives a pod label on its series (`label_` and the name with
    every character outside [a-zA-Z0-9_] as `_`)."""
    return "label_" + "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_"
                              for c in pod_label)  # fmt: skip


_JOB_LABELS = ("training_job", "job_name", _series_label(KUBEFLOW_LABELS.job_name),
               _series_label(workload(JobKind.JOBSET).labels.job_name), "created_by_name")
_POD_LABELS = ("pod", "exported_pod", "destination_pod")
_KIND_LABELS = ("job_kind", "created_by_kind")


@dataclass(frozen=True)
class AlertTarget:
    """What an alert's labels say about the job it concerns (kind may be unknown)."""

    namespace: str
    job_name: str | None = None
    kind: str | None = None
    pod: str | None = None


def _first(labels: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return None


def target_of(alert: Alert) -> AlertTarget | None:
    """The namespace and job name or pod an alert names; None when it names no namespace."""
    namespace = _first(alert.labels, _NAMESPACE_LABELS)
    if namespace is None:
        return None
    return AlertTarget(
        namespace=namespace,
        job_name=_first(alert.labels, _JOB_LABELS),
        kind=_first(alert.labels, _KIND_LABELS),
        pod=_first(alert.labels, _POD_LABELS),
    )


def _kinds_named(kind: JobKind) -> tuple[str, ...]:
    """The kind names an alert may give a job of `kind`: its own, and the kind it is
    materialised as (a TrainJob's series are its JobSet's)."""
    if kind is JobKind.GROUP:
        return (kind.value,)
    materialised = workload(kind).materialised
    return (kind.value, *((materialised.value,) if materialised is not None else ()))


def resolve_jobs(
    target: AlertTarget,
    *,
    jobs_named: Callable[[str, str], list[JobRef]],
    job_of_pod: Callable[[str, str], JobRef | None],
) -> list[JobRef]:
    """The jobs an alert target maps to, using the cache's lookups (by name, or pod -> job)."""
    if target.job_name:
        found = jobs_named(target.namespace, target.job_name)
        if target.kind:
            found = [k for k in found if target.kind in _kinds_named(k.kind)]
        if found:
            return sorted(found)
    if target.pod:
        key = job_of_pod(target.namespace, target.pod)
        if key is not None:
            return [key]
    return []
