"""The Prometheus harness itself: backfilled data is queryable, and a scrape target is scraped."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

from tests.support.prometheus import requires_prometheus, running_prometheus


@requires_prometheus
def test_backfilled_samples_are_queryable(tmp_path: Path) -> None:
    now = int(time.time())
    lines = ["# TYPE demo_util gauge"]
    lines += [f'demo_util{{job_name="a"}} {40 + i} {now - 600 + i * 60}' for i in range(10)]
    with running_prometheus(tmp_path, openmetrics="\n".join(lines) + "\n# EOF\n") as prom:
        result = prom.query("demo_util", at=now - 60)
        assert [r["metric"]["job_name"] for r in result] == ["a"]
        assert float(result[0]["value"][1]) == 49.0


@requires_prometheus
def test_scrapes_a_loopback_target(tmp_path: Path) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"# TYPE twin_up gauge\ntwin_up{zone=\"zone-a\"} 1\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        target = f"127.0.0.1:{server.server_address[1]}"
        with running_prometheus(tmp_path, scrape_targets=[target]) as prom:
            result = prom.wait_for("twin_up", lambda r: len(r) == 1, timeout=30)
            assert result[0]["metric"]["zone"] == "zone-a"
    finally:
        server.shutdown()
        server.server_close()
