"""Prometheus source against the real Prometheus (backfilled by promtool), and its failure modes.

The happy path runs the real per-job PromQL (dcgm-exporter utilization joined with
kube-state-metrics' `kube_pod_info`) on data with both label styles (plain
`namespace`/`pod` and `exported_*` from a scrape without honorLabels). Failure modes (down, 503s,
garbage) must give "metrics unavailable", never an exception. Headers/token/retry counting use a
tiny stdlib HTTP server standing in for Prometheus's API.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.model.job import JobRef
from agent.model.workload import JobKind
from agent.settings import PrometheusSettings
from agent.sources.prometheus import PrometheusSource, job_utilization_expr, promql_duration
from tests.support.prometheus import free_port, requires_prometheus, running_prometheus

KINDS = ("PyTorchJob", "TFJob")


def _openmetrics(now: int) -> str:
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    info = ["# TYPE kube_pod_info gauge"]
    start = now - 2 * 3600
    for t in range(start, now + 1, 30):
        dropped = t > now - 15 * 60
        # resnet (PyTorchJob): plain labels, 2 pods x 2 GPUs, 90% then 30% for the last 15 min
        for pod in ("resnet-master-0", "resnet-worker-0"):
            for gpu in ("0", "1"):
                value = 30 if dropped else 90
                lines.append(
                    f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",namespace="ml",pod="{pod}"}} {value} {t}'
                )
        # bert (TFJob): scraped without honorLabels -> exported_*; steady 80%
        lines.append(
            'DCGM_FI_DEV_GPU_UTIL{gpu="0",namespace="monitoring",pod="dcgm-exporter-abc",'
            f'exported_namespace="nlp",exported_pod="bert-worker-0"}} 80 {t}'
        )
        # a Deployment's pod: never a job
        lines.append(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",namespace="web",pod="api-1"}} 50 {t}')
        for ns, pod, kind, name in (
            ("ml", "resnet-master-0", "PyTorchJob", "resnet"),
            ("ml", "resnet-worker-0", "PyTorchJob", "resnet"),
            ("nlp", "bert-worker-0", "TFJob", "bert"),
            ("web", "api-1", "ReplicaSet", "api-7d9"),
        ):
            info.append(
                f'kube_pod_info{{namespace="{ns}",pod="{pod}",node="n1",'
                f'created_by_kind="{kind}",created_by_name="{name}"}} 1 {t}'
            )
    return "\n".join(lines + info) + "\n# EOF\n"


def _settings(url: str, **kw: object) -> PrometheusSettings:
    base: dict[str, object] = {
        "url": url,
        "timeout": timedelta(seconds=5),
        "retries": 1,
        "drop_threshold": 0.7,
        "drop_duration": timedelta(minutes=10),
        "baseline_offset": timedelta(hours=1),
    }
    base.update(kw)
    return PrometheusSettings(**base)  # type: ignore[arg-type]


@requires_prometheus
def test_per_job_utilization_baseline_and_drop_against_real_prometheus(tmp_path: Path) -> None:
    now = int(time.time()) // 30 * 30
    with running_prometheus(tmp_path, openmetrics=_openmetrics(now)) as prom:
        outcomes: list[bool] = []
        source = PrometheusSource(_settings(prom.url), on_query=outcomes.append)
        report = source.fetch(datetime.fromtimestamp(now, UTC))
    assert report.available, report.error
    assert report.queries == 2 and outcomes == [True, True]
    assert set(report.jobs) == {JobRef(JobKind.PYTORCH, "ml", "resnet"), JobRef(JobKind.TF, "nlp", "bert")}
    resnet = report.jobs[JobRef(JobKind.PYTORCH, "ml", "resnet")]
    assert resnet.now == pytest.approx(30)
    assert resnet.baseline == pytest.approx(90)
    assert resnet.drop.dropped, resnet.drop.reason
    bert = report.jobs[JobRef(JobKind.TF, "nlp", "bert")]
    assert bert.now == pytest.approx(80)
    assert bert.baseline == pytest.approx(80)
    assert not bert.drop.dropped


def test_prometheus_down_is_metrics_unavailable_not_a_crash() -> None:
    source = PrometheusSource(_settings(f"http://127.0.0.1:{free_port()}", retries=1))
    report = source.fetch(datetime.now(UTC))
    assert not report.available
    assert report.error is not None and report.error.startswith("metrics unavailable")
    assert report.jobs == {}


class _FakeApi(http.server.BaseHTTPRequestHandler):
    """Stands in for Prometheus's HTTP API: records requests, answers per `mode`."""

    requests_seen: list[dict[str, str]] = []
    mode = "ok"

    def do_GET(self) -> None:
        type(self).requests_seen.append(dict(self.headers.items()) | {"path": self.path})
        if self.mode == "503":
            self._send(503, b"busy")
        elif self.mode == "garbage":
            self._send(200, b"<html>not json</html>")
        else:
            body = {"status": "success", "data": {"resultType": "matrix", "result": []}}
            self._send(200, json.dumps(body).encode())

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def fake_api() -> Iterator[str]:
    _FakeApi.requests_seen = []
    _FakeApi.mode = "ok"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_headers_and_bearer_token_are_sent(fake_api: str, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    source = PrometheusSource(
        _settings(fake_api, headers={"X-Scope-OrgID": "team-a"}, bearer_token_file=str(token))
    )
    report = source.fetch(datetime.now(UTC))
    assert report.available, report.error
    assert len(_FakeApi.requests_seen) == 2
    for seen in _FakeApi.requests_seen:
        assert seen["Authorization"] == "Bearer s3cret"
        assert seen["X-Scope-OrgID"] == "team-a"


@pytest.mark.parametrize(("mode", "requests_expected"), [("503", 3), ("garbage", 1)])
def test_bad_answers_are_retried_boundedly_then_unavailable(
    fake_api: str, mode: str, requests_expected: int
) -> None:
    _FakeApi.mode = mode
    outcomes: list[bool] = []
    source = PrometheusSource(_settings(fake_api, retries=2), on_query=outcomes.append)
    report = source.fetch(datetime.now(UTC))
    assert not report.available
    assert report.error is not None and "metrics unavailable" in report.error
    assert len(_FakeApi.requests_seen) == requests_expected  # 1 try + `retries` retries on 503
    assert outcomes == [False]


def test_unreadable_token_file_is_unavailable(fake_api: str, tmp_path: Path) -> None:
    source = PrometheusSource(_settings(fake_api, bearer_token_file=str(tmp_path / "missing")))
    report = source.fetch(datetime.now(UTC))
    assert not report.available
    assert "bearer_token_file" in (report.error or "")
    assert _FakeApi.requests_seen == []


def test_query_shape() -> None:
    expr = job_utilization_expr(KINDS)
    assert 'created_by_kind=~"PyTorchJob|TFJob"' in expr
    assert '"exported_pod"' in expr and '"exported_namespace"' in expr
    assert promql_duration(timedelta(minutes=10)) == "600s"
    assert promql_duration(timedelta(milliseconds=1500)) == "1500ms"


@requires_prometheus
def test_tls_ca_file_and_verification_against_real_prometheus(tmp_path: Path) -> None:
    from agent.twin.tls import certificate  # a self-signed certificate for 127.0.0.1

    pem = certificate()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(pem.cert_pem)
    key.write_bytes(pem.key_pem)
    now = int(time.time()) // 30 * 30
    with running_prometheus(tmp_path, openmetrics=_openmetrics(now), tls_cert_key=(cert, key)) as prom:
        assert prom.url.startswith("https://")
        at = datetime.fromtimestamp(now, UTC)
        trusted = PrometheusSource(_settings(prom.url, ca_file=str(cert))).fetch(at)
        untrusted = PrometheusSource(_settings(prom.url, retries=0)).fetch(at)
        unverified = PrometheusSource(_settings(prom.url, verify_tls=False)).fetch(at)
    assert trusted.available, trusted.error
    assert JobRef(JobKind.PYTORCH, "ml", "resnet") in trusted.jobs
    assert not untrusted.available
    assert untrusted.error is not None and "SSL" in untrusted.error
    assert unverified.available, unverified.error
