"""Writes a kubeconfig file pointing kubectl and the kubernetes client at the twin.

Called by `zonemedic twin apiserver`, by `twin up` and by tests. One cluster (with the twin's CA
when it serves TLS), one user (a bearer token, or none when the twin runs without
authentication), one context, made current.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml


def render(
    server: str,
    *,
    token: str | None = None,
    user: str = "twin-user",
    namespace: str = "default",
    context: str = "twin",
    ca_pem: bytes | None = None,
) -> str:
    user_entry: dict[str, str] = {"token": token} if token else {}
    cluster: dict[str, str] = {"server": server}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": "twin", "cluster": cluster}],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [
            {"name": context, "context": {"cluster": "twin", "user": user, "namespace": namespace}}
        ],
        "current-context": context,
    }
    return str(yaml.safe_dump(config, sort_keys=False))


def write(
    path: str | os.PathLike[str],
    server: str,
    *,
    token: str | None = None,
    user: str = "twin-user",
    namespace: str = "default",
    ca_pem: bytes | None = None,
) -> Path:
    """Write the kubeconfig (mode 0600, as kubectl writes its own) and return its path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = render(server, token=token, user=user, namespace=namespace, ca_pem=ca_pem)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return target
