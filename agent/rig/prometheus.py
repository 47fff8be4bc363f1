"""A real Prometheus server (the Debian `prometheus` binary) on a free loopback port.

Who calls it: the rig (`agent.rig.rig.AgentRig.start_prometheus`: a Prometheus scraping the
twin's exporter, for the demo, the end-to-end tests and the soak) and the test harness
(`tests/support/prometheus.py`, which adds backfilled data and assertions on top). `find_binary`
says where the binary is (None when it is not installed); `PrometheusServer.start` writes a
configuration scraping the given `host:port` targets with `honor_labels` (as the DCGM exporter
needs) into its own directory, starts the process with its TSDB there, and waits for `/-/ready`;
`stop` terminates it (then kills it if it does not exit). A server that does not become ready is
stopped and retried on another port, then `UnavailableError` names its log.

What it does not do: install Prometheus, reach anything outside 127.0.0.1, or interpret metrics.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from agent.errors import UnavailableError

DEFAULT_BINARY = Path("/usr/bin/prometheus")
START_ATTEMPTS = 3


def find_binary(name: str = "prometheus") -> Path | None:
    """The Prometheus binary on PATH, else the Debian package's; None when neither exists."""
    found = shutil.which(name)
    if found:
        return Path(found)
    default = DEFAULT_BINARY.with_name(name)
    return default if default.exists() else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape_config(
    targets: Sequence[str], scrape_interval: str, rule_files: Sequence[Path] = ()
) -> str:
    """prometheus.yml scraping `targets` (loopback `host:port`) every `scrape_interval`, loading
    `rule_files` (evaluated at the same interval)."""
    lines = [
        "global:",
        f"  scrape_interval: {scrape_interval}",
        f"  evaluation_interval: {scrape_interval}",
    ]
    if rule_files:
        lines += ["rule_files:", *(f"  - '{f}'" for f in rule_files)]
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
    return "\n".join(lines) + "\n"


def open_url(url: str, *, timeout: float) -> Any:
    """urlopen that accepts a self-signed certificate (the server's own, on loopback)."""
    context = ssl._create_unverified_context() if url.startswith("https:") else None
    return urllib.request.urlopen(url, timeout=timeout, context=context)


class PrometheusServer:
    """One Prometheus process with its configuration, TSDB and log under `directory`."""

    def __init__(
        self,
        directory: Path,
        *,
        binary: Path,
        scrape_targets: Sequence[str] = (),
        scrape_interval: str = "1s",
        web_config: Path | None = None,
        retention: str = "30d",
        rule_files: Sequence[Path] = (),
    ) -> None:
        self.directory = directory
        self.binary = binary
        self.data_dir = directory / "data"
        self.config = directory / "prometheus.yml"
        self.log_path = directory / "prometheus.log"
        self.scrape_targets = list(scrape_targets)
        self.scrape_interval = scrape_interval
        self.web_config = web_config
        self.retention = retention
        self.rule_files = list(rule_files)
        self.url = ""
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, *, timeout: float = 30.0, port: int | None = None) -> PrometheusServer:
        """Start and wait until ready (retried on another port, unless `port` is given);
        `UnavailableError` if it never is."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            scrape_config(self.scrape_targets, self.scrape_interval, self.rule_files)
        )
        scheme = "https" if self.web_config is not None else "http"
        extra = [f"--web.config.file={self.web_config}"] if self.web_config is not None else []
        fixed = port
        for _attempt in range(START_ATTEMPTS if fixed is None else 1):
            port = fixed if fixed is not None else free_port()
            self._log = self.log_path.open("ab")
            self.process = subprocess.Popen(
                [
                    str(self.binary),
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.data_dir}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    f"--storage.tsdb.retention.time={self.retention}",
                    "--log.level=warn",
                    *extra,
                ],
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            self.url = f"{scheme}://127.0.0.1:{port}"
            if self._wait_ready(timeout):
                return self
            self.stop()
        tail = self.log_path.read_text(errors="replace")[-2000:]
        raise UnavailableError(f"prometheus did not start (log {self.log_path}): {tail}")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            try:
                with open_url(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def restart(self, *, timeout: float = 30.0) -> PrometheusServer:
        """Stop, then start again on the same port and TSDB (an outage that ends)."""
        port = int(self.url.rsplit(":", 1)[1])
        self.stop()
        return self.start(timeout=timeout, port=port)

    def stop(self) -> None:
        """Terminate the process (kill it after 10 s); idempotent."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def api(self, path: str, **params: str) -> Any:
        """GET an HTTP API path; the `data` of a successful answer, else `UnavailableError`."""
        query = urllib.parse.urlencode(params)
        try:
            with open_url(f"{self.url}{path}?{query}", timeout=10) as resp:
                body = json.loads(resp.read())
        except (OSError, ValueError) as exc:
            raise UnavailableError(f"prometheus {path}: {exc}") from exc
        if not isinstance(body, dict) or body.get("status") != "success":
            raise UnavailableError(f"prometheus {path} failed: {body}")
        return body["data"]

    def query(self, promql: str, *, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; the `result` list (vector samples with string values)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        result: list[dict[str, Any]] = self.api("/api/v1/query", **params)["result"]
        return result

    def query_range(
        self, promql: str, *, start: float, end: float, step: float
    ) -> list[dict[str, Any]]:
        """Range query; the `result` list (matrix series with string values)."""
        result: list[dict[str, Any]] = self.api(
            "/api/v1/query_range", query=promql, start=f"{start:.3f}", end=f"{end:.3f}",
            step=f"{step:g}",
        )["result"]
        return result
