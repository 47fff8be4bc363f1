"""Test harness: a real Prometheus server (the Debian `prometheus` binary) on a free loopback port.

Who calls it: end-to-end tests and benchmarks that need real PromQL (the twin's exporter, the agent's
Prometheus source). It starts `prometheus` with a generated config scraping the given targets, or with
TSDB blocks backfilled from an OpenMetrics text by `promtool tsdb create-blocks-from openmetrics`
(instant data, no waiting for scrapes). What it does not do: install Prometheus (.ci/run does that)
or talk to anything outside 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def prometheus_available() -> bool:
    return Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()


requires_prometheus = pytest.mark.skipif(
    not prometheus_available(), reason="the prometheus Debian package is not installed"
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PrometheusServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    command: list[str] = field(default_factory=list)

    def stop(self) -> None:
        """Stop the server (a fault: queries fail until `restart`)."""
        _stop(self.process)

    def restart(self, timeout: float = 30.0) -> None:
        """Start the stopped server again on the same port and data directory."""
        _stop(self.process)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT)
        if not _wait_ready(self, timeout):
            raise AssertionError(f"prometheus did not restart: {self.log_path.read_text()[-2000:]}")

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with _open(f"{self.url}{path}?{query}", timeout=10) as resp:
            body = json.loads(resp.read())
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus {path} failed: {body}")
        return body["data"]

    def query(self, promql: str, *, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; returns the `result` list (vector samples with string values)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("/api/v1/query", **params)
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_for(
        self,
        promql: str,
        predicate: Callable[[list[dict[str, Any]]], bool],
        *,
        timeout: float = 30.0,
        interval: float = 0.5,
    ) -> list[dict[str, Any]]:
        """Poll `promql` until `predicate(result)` holds; fail with the last result on timeout."""
        deadline = time.monotonic() + timeout
        last: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            last = self.query(promql)
            if predicate(last):
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting on {promql!r}; last: {last}")

    def targets_up(self) -> bool:
        data = self.api("/api/v1/targets")
        active = data.get("activeTargets", [])
        return bool(active) and all(t.get("health") == "up" for t in active)


def _write_config(path: Path, targets: Sequence[str], scrape_interval: str) -> None:
    lines = [
        "global:",
        f"  scrape_interval: {scrape_interval}",
        f"  evaluation_interval: {scrape_interval}",
    ]
    if not targets:
        lines.append("scrape_configs: []")
    else:
        lines += [
            "scrape_configs:",
            "  - job_name: twin",
            "    honor_labels: true",
            f"    scrape_interval: {scrape_interval}",
            f"    scrape_timeout: {scrape_interval}",
            "    static_configs:",
            "      - targets: [" + ", ".join(f"'{t}'" for t in targets) + "]",
        ]
    path.write_text("\n".join(lines) + "\n")


def backfill(openmetrics: str, data_dir: Path) -> None:
    """Create TSDB blocks in `data_dir` from OpenMetrics text (must end with `# EOF`)."""
    text = openmetrics if openmetrics.rstrip().endswith("# EOF") else openmetrics + "\n# EOF\n"
    source = data_dir.parent / "backfill.om"
    source.write_text(text)
    proc = subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "-q", str(source), str(data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"promtool backfill failed: {proc.stderr or proc.stdout}")


@contextlib.contextmanager
def running_prometheus(
    tmp_path: Path,
    *,
    scrape_targets: Sequence[str] = (),
    scrape_interval: str = "1s",
    openmetrics: str | None = None,
    tls_cert_key: tuple[Path, Path] | None = None,
    start_timeout: float = 30.0,
) -> Iterator[PrometheusServer]:
    """Run a real Prometheus for the duration of the block; always stopped afterwards.

    `scrape_targets` are `host:port` strings (loopback only) scraped with honor_labels.
    `openmetrics` is backfilled into the TSDB before start, for instant historical data.
    `tls_cert_key` (PEM certificate and key files) makes it serve HTTPS (`--web.config.file`).
    """
    root = tmp_path / f"prometheus-{free_port()}"
    data_dir = root / "data"
    data_dir.mkdir(parents=True)
    config = root / "prometheus.yml"
    _write_config(config, scrape_targets, scrape_interval)
    if openmetrics is not None:
        backfill(openmetrics, data_dir)
    log_path = root / "prometheus.log"
    extra: list[str] = []
    scheme = "http"
    if tls_cert_key is not None:
        web_config = root / "web.yml"
        cert, key = tls_cert_key
        web_config.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
        extra.append(f"--web.config.file={web_config}")
        scheme = "https"
    for _attempt in range(3):
        port = free_port()
        log = log_path.open("wb")
        command = [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={data_dir}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=30d",
            "--log.level=warn",
            *extra,
        ]
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        server = PrometheusServer(f"{scheme}://127.0.0.1:{port}", process, log_path, command)
        if _wait_ready(server, start_timeout):
            break
        _stop(process)
        log.close()
    else:
        raise AssertionError(f"prometheus did not start: {log_path.read_text()[-2000:]}")
    try:
        yield server
    finally:
        _stop(server.process)
        log.close()


def _wait_ready(server: PrometheusServer, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        try:
            with _open(f"{server.url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def _open(url: str, *, timeout: float) -> Any:
    """urlopen that accepts the harness's own self-signed certificate (the tests check TLS)."""
    context = ssl._create_unverified_context() if url.startswith("https:") else None
    return urllib.request.urlopen(url, timeout=timeout, context=context)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
