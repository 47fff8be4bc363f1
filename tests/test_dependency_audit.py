"""`tools/dependency_audit.py` (run by `make lint`): a known vulnerability in the lock fails, an
unreachable or empty vulnerability service only warns. Judged from pip-audit's JSON (table), and
end to end with pip-audit against a local OSV-compatible service over HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tools.dependency_audit import Outcome, judge

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("stdout", "stderr", "outcome", "first_line"),
    [
        (json.dumps({"dependencies": [{"name": "a", "version": "1", "vulns": []}]}), "",
         Outcome.OK, "ok: 1 locked packages, no known vulnerability"),
        (json.dumps({"dependencies": [
            {"name": "a", "version": "1", "vulns": [{"id": "PYSEC-1", "fix_versions": ["1.1"]}]},
            {"name": "b", "skip_reason": "Dependency not found on PyPI"},
        ]}), "", Outcome.VULNERABLE, "error: a 1: PYSEC-1 (fix: 1.1)"),
        (json.dumps({"dependencies": [{"name": "b", "skip_reason": "Dependency not found on PyPI"}]}),
         "", Outcome.UNAUDITED, "warning: 1 of 1 locked packages could not be audited"),
        ("", "Traceback ...\nrequests.exceptions.ConnectionError: Max retries exceeded\n",
         Outcome.UNAUDITED, "warning: the vulnerability service could not be used"),
        ("{not json", "", Outcome.UNAUDITED, "warning: the vulnerability service could not be used"),
    ],
)
def test_judge(stdout: str, stderr: str, outcome: Outcome, first_line: str) -> None:
    verdict = judge(stdout, stderr)
    assert verdict.outcome is outcome
    assert verdict.lines[0].startswith(first_line)
    assert verdict.exit_code == (1 if outcome is Outcome.VULNERABLE else 0)


class FakeOsv(BaseHTTPRequestHandler):
    """An OSV `/v1/query` service: `vulnerable` maps package name -> advisory id; `fail` answers 500."""

    vulnerable: dict[str, str] = {}
    fail = False
    queries: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        query = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).queries.append(query)
        if self.fail:
            self.send_response(500)
            self.end_headers()
            return
        name = query["package"]["name"]
        body: dict[str, Any] = {}
        if name in self.vulnerable:
            body = {"vulns": [{
                "id": self.vulnerable[name],
                "summary": "a test advisory",
                "affected": [{"package": {"name": name, "ecosystem": "PyPI"},
                              "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "99.0"}]}]}],
            }]}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def osv() -> Iterator[str]:
    FakeOsv.vulnerable, FakeOsv.fail, FakeOsv.queries = {}, False, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOsv)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/query"
    finally:
        server.shutdown()
        server.server_close()


def _audit(tmp_path: Path, osv_url: str) -> subprocess.CompletedProcess[str]:
    lock = tmp_path / "constraints.txt"
    lock.write_text("PyYAML==6.0.3\norjson==3.11.4\n")
    return subprocess.run(
        [sys.executable, str(REPO / "tools" / "dependency_audit.py"), str(lock),
         "-s", "osv", "--osv-url", osv_url, "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=120, check=False,
    )


def test_a_known_vulnerability_fails(tmp_path: Path, osv: str) -> None:
    FakeOsv.vulnerable = {"pyyaml": "GHSA-test-0001"}
    done = _audit(tmp_path, osv)
    assert done.returncode == 1, done.stderr
    assert "dependency audit: error: pyyaml 6.0.3: GHSA-test-0001 (fix: 99.0)" in done.stderr
    assert sorted(q["package"]["name"] for q in FakeOsv.queries) == ["orjson", "pyyaml"]


def test_a_clean_lock_passes(tmp_path: Path, osv: str) -> None:
    done = _audit(tmp_path, osv)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "dependency audit: ok: 2 locked packages, no known vulnerability\n"


def test_a_failing_service_only_warns(tmp_path: Path, osv: str) -> None:
    FakeOsv.fail = True
    done = _audit(tmp_path, osv)
    assert done.returncode == 0
    assert done.stdout.startswith("dependency audit: warning: ")


def test_an_unreachable_service_only_warns(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = _audit(tmp_path, f"http://127.0.0.1:{port}/v1/query")
    assert done.returncode == 0
    assert done.stdout.startswith("dependency audit: warning: ")
