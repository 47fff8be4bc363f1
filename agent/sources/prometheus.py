"""Prometheus source: per-job GPU utilization now, its baseline, and drops, for all jobs at once.

Called by the runtime (sweeps and the detector's metric refresh). Exactly two queries per fetch
whatever the number of jobs: a range query of per-job utilization over the drop window, and an
instant query of the baseline (the same expression averaged over the window one `baseline_offset`
ago). The per-job expression averages dcgm-exporter's `DCGM_FI_DEV_GPU_UTIL` by (namespace,
created_by_name), joined `on (namespace, pod)` with kube-state-metrics' `kube_pod_info` of
training-job pods (`created_by_kind`), with `exported_namespace`/`exported_pod` (scrapes without
honorLabels) folded back into `namespace`/`pod` by `label_replace`. A JobSet's pods are created by
its batch Jobs: they are joined on `kube_pod_labels`' JobSet-name label instead (kube-state-metrics
must allow it: `--metric-labels-allowlist=pods=[jobset.sigs.k8s.io/jobset-name,...]`) and reported
as the JobSet's; a TrainJob's figures are its JobSet's (same name).

Prometheus being down, slow or answering garbage is never an exception to the caller: `fetch`
returns a `MetricsReport` with `available=False` and the reason ("metrics unavailable: ..."). Drop
detection itself is the pure `agent.sources.drop`. What it does not do: decide what a drop means.
"""

from __future__ import annotations

import logging
import math
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import requests
from urllib3.exceptions import InsecureRequestWarning
from urllib3.util.retry import Retry

from agent.errors import ConfigError
from agent.model.job import JobRef
from agent.model.workload import WORKLOADS, JobKind, workload, workload_named
from agent.settings import PrometheusSettings, read_secret_file
from agent.sources.drop import DropVerdict, detect_drop

log = logging.getLogger(__name__)

UTILIZATION_METRIC = "DCGM_FI_DEV_GPU_UTIL"
# `created_by_kind` of training-job pods (the kinds that create their own pods)
JOB_KINDS = tuple(w.kind.value for w in WORKLOADS if w.pods_owned_by is None)
_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")
# kube-state-metrics' name for the JobSet-name pod label (kube_pod_labels)
JOBSET_NAME_LABEL = "label_" + _LABEL_CHARS.sub("_", workload(JobKind.JOBSET).labels.job_name)
UNAVAILABLE = "metrics unavailable"


def promql_duration(value: timedelta) -> str:
    """A PromQL duration literal (`600s`, `1500ms`)."""
    ms = round(value.total_seconds() * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _unexport(selector: str) -> str:
    """Fold `exported_pod`/`exported_namespace` into `pod`/`namespace` where they are set."""
    inner = f'label_replace({selector}, "pod", "$1", "exported_pod", "(.+)")'
    return f'label_replace({inner}, "namespace", "$1", "exported_namespace", "(.+)")'


def job_utilization_expr(kinds: Iterable[str] = JOB_KINDS) -> str:
    """Average GPU utilization (0-100) per (namespace, created_by_kind, created_by_name): the
    pods `kinds` create, or (`created_by_kind` the JobSet's kind) the pods of each JobSet."""
    kind_re = "|".join(kinds)
    gpus = _unexport(f'{UTILIZATION_METRIC}{{pod!=""}}')
    pods = _unexport(f'kube_pod_info{{created_by_kind=~"{kind_re}"}}')
    jobset_pods = _unexport(f'kube_pod_labels{{{JOBSET_NAME_LABEL}!=""}}')
    named = (
        f'label_replace(label_replace(max by (namespace, pod, {JOBSET_NAME_LABEL}) ({jobset_pods}), '
        f'"created_by_name", "$1", "{JOBSET_NAME_LABEL}", "(.+)"), '
        f'"created_by_kind", "{JobKind.JOBSET.value}", "", "")'
    )
    group = "avg by (namespace, created_by_kind, created_by_name) ("
    join = f"{gpus} * on (namespace, pod) group_left (created_by_kind, created_by_name) "
    return (
        f"{group}{join}max by (namespace, pod, created_by_kind, created_by_name) ({pods}))"
        f" or {group}{join}{named})"
    )


def baseline_expr(expr: str, *, window: timedelta, step: timedelta, offset: timedelta) -> str:
    return (
        f"avg_over_time(({expr})[{promql_duration(window)}:{promql_duration(step)}] "
        f"offset {promql_duration(offset)})"
    )


def query_step(window: timedelta) -> timedelta:
    """Resolution of the range query: about 20 points over the window, at least 1 s."""
    return max(timedelta(seconds=1), timedelta(seconds=int(window.total_seconds() / 20)))


@dataclass(frozen=True)
class JobMetrics:
    now: float | None
    baseline: float | None
    drop: DropVerdict
    samples: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class MetricsReport:
    available: bool
    at: datetime
    jobs: dict[JobRef, JobMetrics] = field(default_factory=dict)
    error: str | None = None
    queries: int = 0

    def for_job(self, key: JobRef) -> JobMetrics | None:
        """The job's figures; a kind materialised as another (TrainJob: its JobSet) has the
        figures of that object of its name."""
        found = self.jobs.get(key)
        if found is None and key.kind is not JobKind.GROUP:
            materialised = workload(key.kind).materialised
            if materialised is not None:
                return self.jobs.get(JobRef(materialised, key.namespace, key.name))
        return found

    @property
    def status(self) -> str:
        return "ok" if self.available else (self.error or UNAVAILABLE)


class QueryFailedError(Exception):
    """Internal: one query failed (wrapped into a MetricsReport before reaching callers)."""


def _job_ref(metric: dict[str, Any]) -> JobRef | None:
    kind, ns, name = (
        metric.get("created_by_kind"),
        metric.get("namespace"),
        metric.get("created_by_name"),
    )
    if not (isinstance(kind, str) and isinstance(ns, str) and isinstance(name, str)):
        return None
    found = workload_named(kind)
    if found is None or not (ns and name):
        return None  # a series of another owner kind (the query selects the training kinds)
    return JobRef(found.kind, ns, name)


def _number(raw: Any) -> float | None:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


class PrometheusSource:
    """Thin adapter over prometheus-api-client with timeout, bounded retry, headers, token, TLS."""

    def __init__(
        self,
        settings: PrometheusSettings,
        *,
        on_query: Callable[[bool], None] | None = None,
    ) -> None:
        if not settings.url:
            raise ValueError("PrometheusSource needs prometheus.url")
        self.url = settings.url.rstrip("/")
        self.settings = settings
        self._on_query = on_query
        self.step = query_step(settings.drop_duration)
        self.expr = job_utilization_expr()
        self.baseline = baseline_expr(
            self.expr,
            window=settings.drop_duration,
            step=self.step,
            offset=settings.baseline_offset,
        )
        if not settings.verify_tls and self.url.startswith("https:"):
            # Said once here, rather than by urllib3 on every query (for this host only).
            log.warning("prometheus.verify_tls is false: the server certificate is not checked")
            host = urlsplit(self.url).hostname or ""
            warnings.filterwarnings(
                "ignore",
                message=f"Unverified HTTPS request is being made to host '{re.escape(host)}'",
                category=InsecureRequestWarning,
            )

    def _client(self) -> Any:
        from prometheus_api_client import PrometheusConnect

        s = self.settings
        headers = dict(s.headers)
        if s.bearer_token_file:
            try:
                token = read_secret_file(s.bearer_token_file, key="prometheus.bearer_token_file")
            except ConfigError as exc:
                raise QueryFailedError(str(exc)) from exc
            headers["Authorization"] = f"Bearer {token}"
        session = requests.Session()
        session.verify = s.ca_file if (s.verify_tls and s.ca_file) else s.verify_tls
        retry = Retry(
            total=s.retries,
            connect=s.retries,
            read=s.retries,
            status=s.retries,
            backoff_factor=0.2,
            status_forcelist=(429, 502, 503, 504),
            respect_retry_after_header=True,
            raise_on_status=False,
        )
        return PrometheusConnect(
            url=self.url,
            headers=headers,
            disable_ssl=not s.verify_tls,
            retry=retry,
            session=session,
            timeout=s.timeout.total_seconds(),
        )

    def _call(self, fn: Callable[[], Any]) -> Any:
        from prometheus_api_client.exceptions import PrometheusApiClientException

        try:
            result = fn()
        except (requests.RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            if self._on_query:
                self._on_query(False)
            raise QueryFailedError(f"{type(exc).__name__}: {str(exc)[:200]}") from exc
        if self._on_query:
            self._on_query(True)
        if not isinstance(result, list):
            raise QueryFailedError(f"unexpected answer: {str(result)[:200]}")
        return result

    def instant(self, expr: str, *, at: datetime) -> list[Any]:
        """One instant query at `at` (the egress source's query); `QueryFailedError` with the
        reason when Prometheus fails or answers garbage."""
        client = self._client()
        try:
            found: list[Any] = self._call(
                lambda: client.custom_query(expr, params={"time": at.timestamp()})
            )
            return found
        finally:
            client.close()

    def fetch(self, now: datetime) -> MetricsReport:
        """Utilization, baseline and drop verdict of every job Prometheus knows, at `now`."""
        s = self.settings
        queries = 0
        try:
            client = self._client()
            try:
                start = now - s.drop_duration
                step_s = promql_duration(self.step)
                queries += 1
                series = self._call(
                    lambda: client.custom_query_range(
                        self.expr, start_time=start, end_time=now, step=step_s
                    )
                )
                queries += 1
                base = self._call(
                    lambda: client.custom_query(self.baseline, params={"time": now.timestamp()})
                )
            finally:
                client.close()
        except QueryFailedError as exc:
            log.warning("prometheus query failed", extra={"error": str(exc), "url": s.url})
            return MetricsReport(
                available=False, at=now, error=f"{UNAVAILABLE}: {exc}", queries=queries
            )
        return self._report(series, base, now=now, queries=queries)

    def _report(
        self, series: list[Any], base: list[Any], *, now: datetime, queries: int
    ) -> MetricsReport:
        baselines: dict[JobRef, float] = {}
        for item in base:
            if not isinstance(item, dict):
                continue
            key = _job_ref(item.get("metric") or {})
            value = item.get("value")
            number = _number(value[1]) if isinstance(value, list) and len(value) == 2 else None
            if key is not None and number is not None:
                baselines[key] = number
        jobs: dict[JobRef, JobMetrics] = {}
        for item in series:
            if not isinstance(item, dict):
                continue
            key = _job_ref(item.get("metric") or {})
            if key is None:
                continue
            samples: list[tuple[float, float]] = []
            for point in item.get("values") or []:
                if isinstance(point, list) and len(point) == 2:
                    t, v = _number(point[0]), _number(point[1])
                    if t is not None and v is not None:
                        samples.append((t, v))
            samples.sort()
            baseline = baselines.get(key)
            verdict = detect_drop(
                samples,
                baseline,
                now=now.timestamp(),
                threshold=self.settings.drop_threshold,
                duration=self.settings.drop_duration,
                step=self.step,
            )
            jobs[key] = JobMetrics(
                now=samples[-1][1] if samples else None,
                baseline=baseline,
                drop=verdict,
                samples=tuple(samples),
            )
        for key, baseline in baselines.items():
            if key not in jobs:
                jobs[key] = JobMetrics(
                    now=None, baseline=baseline, drop=DropVerdict(False, "no current samples")
                )
        return MetricsReport(available=True, at=now, jobs=jobs, queries=queries)

