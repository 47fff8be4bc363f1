"""`zonemedic run` as a real process, for the rig's agents started the way users start them.

Who calls it: `agent.rig.rig.AgentRig.start_process` (the soak's replicas) and the command tests.
`AgentProcess` runs `python -m agent.cli run --config FILE` with the environment's `ZONEMEDIC_`
variables removed (plus the given overrides), collects its JSON log lines from stderr, finds its
HTTP API from the `http listening` line, reads its leadership from /metrics, and `stop` kills only
the process it started.

What it does not do: write the configuration (`agent.rig.config` does), or restart a process.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from agent.errors import UnavailableError


class AgentProcess:
    """`zonemedic run --config` with its JSON log lines collected from stderr."""

    def __init__(
        self, config: Path | None, *, cwd: Path | None = None, overrides: dict[str, str] | None = None
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZONEMEDIC_")}
        env.update(overrides or {})
        flags = ["--config", str(config)] if config is not None else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "run", *flags],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.lines: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = ""

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.raw.append(line)
            with contextlib.suppress(orjson.JSONDecodeError):
                self.lines.append(orjson.loads(line))

    def wait_url(self, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if line.get("message") == "http listening":
                    self.url = str(line["url"])
                    return self.url
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise UnavailableError(f"agent did not start: {b''.join(self.raw[-20:]).decode()}")

    def logged(self, message: str, **fields: str) -> dict[str, Any] | None:
        """The first log line with this message and these fields, if any yet."""
        for line in list(self.lines):
            if line.get("message") == message and all(line.get(k) == v for k, v in fields.items()):
                return line
        return None

    def get(self, path: str, **params: str) -> httpx.Response:
        return httpx.get(self.url + path, params=params, timeout=5)

    def leader(self) -> bool:
        try:
            return "zonemedic_leader 1.0" in self.get("/metrics").text
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
