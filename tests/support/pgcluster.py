"""A private PostgreSQL server for one test (a soak): its own data directory and port, so it can be
stopped and restarted for real without touching the machine's shared server.

`private_cluster(tmp_path)` runs `initdb` into a temporary directory (as the `postgres` user when
the test runs as root, through `runuser`), starts `postgres` on a free loopback port with trust
authentication, and yields a `PrivateCluster`: its `url` (a `postgresql+psycopg://` URL of a fresh
database), `restart()` (a real `pg_ctl restart -m fast`: every connection is cut) and `stop()` /
`start()`. Everything is stopped and removed afterwards. The binaries are the newest under
/usr/lib/postgresql/*/bin.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg


def binaries() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found else None


def available() -> bool:
    return binaries() is not None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PrivateCluster:
    bin: Path
    data: Path
    port: int
    log: Path
    run_as: list[str]
    database: str = "zonemedic"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{self.database}"

    def _ctl(self, *args: str, timeout: float = 60) -> None:
        done = subprocess.run(
            [*self.run_as, str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
             "-w", "-t", str(int(timeout)), *args],
            capture_output=True, text=True, timeout=timeout + 10, check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"pg_ctl {args[0]} failed: {done.stderr or done.stdout}\n"
                                 f"{self.log.read_text()[-2000:] if self.log.exists() else ''}")

    def start(self) -> None:
        self._ctl("start", "-o", f"-p {self.port} -k {self.data} -h 127.0.0.1 -F")

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")

    def restart(self) -> None:
        """A real restart: the server stops (fast: connections cut), then starts again."""
        self._ctl("restart", "-m", "fast", "-o", f"-p {self.port} -k {self.data} -h 127.0.0.1 -F")

    def running(self) -> bool:
        try:
            with psycopg.connect(self.dsn(), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"


@contextlib.contextmanager
def private_cluster() -> Iterator[PrivateCluster]:
    """An initialised, started private PostgreSQL with an empty database `zonemedic`."""
    bin_dir = binaries()
    if bin_dir is None:
        raise AssertionError("no PostgreSQL binaries under /usr/lib/postgresql/*/bin")
    root = Path(tempfile.mkdtemp(prefix="zonemedic-pg-"))
    run_as: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data = root / "data"
    cluster = PrivateCluster(bin_dir, data, _free_port(), root / "postgres.log", run_as)
    try:
        done = subprocess.run(
            [*run_as, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
             "--no-sync", "-E", "UTF8"],
            capture_output=True, text=True, timeout=120, check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"initdb failed: {done.stderr or done.stdout}")
        with (data / "postgresql.conf").open("a") as conf:
            conf.write("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                       "max_connections = 100\nshared_buffers = 32MB\n")
        cluster.start()
        deadline = time.monotonic() + 30
        while not cluster.running():
            if time.monotonic() > deadline:
                raise AssertionError(f"postgres did not start: {cluster.log.read_text()[-2000:]}")
            time.sleep(0.1)
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {cluster.database}")
        yield cluster
    finally:
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            if (data / "postmaster.pid").exists():
                cluster._ctl("stop", "-m", "immediate")
        shutil.rmtree(root, ignore_errors=True)
