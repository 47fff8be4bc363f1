"""Test harness: a twin API server on 127.0.0.1 with a kubeconfig, plus a kubectl runner."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agent.twin import kubeconfig
from agent.twin.apiserver import ApiServer
from agent.twin.auth import ADMIN, Authenticator, UserInfo
from agent.twin.store import Store

ADMIN_TOKEN = "admin-token"


@dataclass
class Twin:
    store: Store
    server: ApiServer
    kubeconfig: Path
    cache_dir: Path

    def kubectl(self, *args: str, kubeconfig: Path | None = None, check: bool = True,
                stdin: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(kubeconfig or self.kubeconfig),
               "KUBECACHEDIR": str(self.cache_dir), "HOME": str(self.cache_dir)}
        done = subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True,
                              input=stdin, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done


@contextmanager
def running_twin(tmp: Path, *, tokens: dict[str, UserInfo] | None = None,
                 bookmark_interval: float = 1.0) -> Iterator[Twin]:
    """A store and server; with `tokens`, auth is on and ADMIN_TOKEN is the admin."""
    store = Store()
    auth = Authenticator()
    if tokens is not None:
        auth.add(ADMIN_TOKEN, ADMIN)
        for token, user in tokens.items():
            auth.add(token, user)
    server = ApiServer(store, authenticator=auth, bookmark_interval=bookmark_interval,
                       tls=tokens is not None).start()
    path = kubeconfig.write(tmp / "kubeconfig", server.url, ca_pem=server.ca_pem,
                            token=ADMIN_TOKEN if tokens is not None else None)
    try:
        yield Twin(store, server, path, tmp / "kubecache")
    finally:
        server.stop()
        store.close()
