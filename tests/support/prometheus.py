"""Test harness: a real Prometheus server (the Debian `prometheus` binary) on a free loopback port.

Who calls it: end-to-end tests and benchmarks that need real PromQL (the twin's exporter, the agent's
Prometheus source). It starts `prometheus` (the package's `agent.rig.prometheus`, which the rig
uses too) with a generated config scraping the given targets, or with TSDB blocks backfilled from an OpenMetrics text by `promtool tsdb create-blocks-from openmetrics`
(instant data, no waiting for scrapes). What it does not do: install Prometheus (.ci/run does that)
or talk to anything outside 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.errors import UnavailableError
from agent.rig import prometheus as server
from agent.rig.prometheus import free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def prometheus_available() -> bool:
    return Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()


requires_prometheus = pytest.mark.skipif(
    not prometheus_available(), reason="the prometheus Debian package is not installed"
)


class PrometheusServer(server.PrometheusServer):
    """The package's server with the assertions tests wait on."""

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
    rule_files: Sequence[Path] = (),
) -> Iterator[PrometheusServer]:
    """Run a real Prometheus for the duration of the block; always stopped afterwards.

    `scrape_targets` are `host:port` strings (loopback only) scraped with honor_labels.
    `openmetrics` is backfilled into the TSDB before start, for instant historical data.
    `tls_cert_key` (PEM certificate and key files) makes it serve HTTPS (`--web.config.file`).
    `rule_files`: recording/alerting rule files it loads (evaluated every `scrape_interval`).
    """
    root = tmp_path / f"prometheus-{free_port()}"
    data_dir = root / "data"
    data_dir.mkdir(parents=True)
    if openmetrics is not None:
        backfill(openmetrics, data_dir)
    web_config = None
    if tls_cert_key is not None:
        web_config = root / "web.yml"
        cert, key = tls_cert_key
        web_config.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    prom = PrometheusServer(root, binary=Path(PROMETHEUS), scrape_targets=scrape_targets,
                            scrape_interval=scrape_interval, web_config=web_config,
                            rule_files=rule_files)
    try:
        prom.start(timeout=start_timeout)
    except UnavailableError as exc:
        raise AssertionError(str(exc)) from exc
    try:
        yield prom
    finally:
        prom.stop()


__all__ = ["PROMETHEUS", "PROMTOOL", "PrometheusServer", "backfill", "free_port",
           "prometheus_available", "requires_prometheus", "running_prometheus"]
