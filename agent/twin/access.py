"""Access to the twin as a ServiceAccount bound by RBAC manifests (the agent's own deploy/ role).

`serve_as_service_account` loads the Roles, ClusterRoles and bindings of some manifests (for
example deploy/base/rbac.yaml and serviceaccount.yaml, with the kustomization's namespace) into
the twin's store, finds the one ServiceAccount their bindings name, and starts an API server (TLS)
where a fresh bearer token is that ServiceAccount and another is the admin: a client using the
first has exactly the rights the manifests grant (403 Forbidden otherwise, worded as the real
server words it). `Access.kubeconfig` writes a kubeconfig for either. RBAC objects created later
through the API take effect at once (the authorizer reads the store).

Used by tests and the demo through `TwinCluster.serve_api_as`; `twin apiserver --rbac` loads
manifests the same way (auth.py). It does not render kustomizations: pass the documents.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import InputError
from agent.twin import kubeconfig
from agent.twin.apiserver import ApiServer
from agent.twin.apistate import PodActivitySource
from agent.twin.auth import (
    ADMIN,
    Authenticator,
    UserInfo,
    ensure_namespaces,
    load_rbac,
    read_rbac_file,
)
from agent.twin.store import Store

_BINDINGS = ("RoleBinding", "ClusterRoleBinding")


@dataclass(frozen=True)
class Access:
    """A running API server and the tokens that reach it."""

    server: ApiServer
    user: UserInfo
    token: str
    admin_token: str

    def kubeconfig(self, path: str | os.PathLike[str], *, admin: bool = False) -> Path:
        """Write a kubeconfig that authenticates as the ServiceAccount (or the admin)."""
        return kubeconfig.write(
            path,
            self.server.url,
            ca_pem=self.server.ca_pem,
            token=self.admin_token if admin else self.token,
        )


def read_manifests(
    paths: Iterable[str | os.PathLike[str]], *, namespace: str = "default"
) -> list[dict[str, Any]]:
    """The YAML documents of the files, namespaced RBAC objects without a namespace put in
    `namespace` (as kustomize's `namespace:` does); InputError names an unreadable file."""
    out = []
    for path in paths:
        for doc in read_rbac_file(str(path)):
            if not isinstance(doc, dict):
                raise InputError(f"{path}: a manifest must be a mapping, got {type(doc).__name__}")
            if doc.get("kind") in ("Role", "RoleBinding", "ServiceAccount"):
                meta = doc.setdefault("metadata", {})
                meta.setdefault("namespace", namespace)
            out.append(doc)
    return out


def bound_service_account(documents: Iterable[Mapping[str, Any]]) -> UserInfo:
    """The one ServiceAccount that the bindings among `documents` name as a subject."""
    found = set()
    for doc in documents:
        if doc.get("kind") not in _BINDINGS:
            continue
        binding_ns = str((doc.get("metadata") or {}).get("namespace") or "")
        for subject in doc.get("subjects") or ():
            if subject.get("kind") == "ServiceAccount":
                found.add((str(subject.get("namespace") or binding_ns), str(subject.get("name"))))
    if len(found) != 1:
        named = ", ".join(f"{ns}/{name}" for ns, name in sorted(found)) or "none"
        raise InputError(
            f"the RBAC manifests must bind exactly one ServiceAccount (found: {named})"
        )
    ((namespace, name),) = found
    return UserInfo.service_account(namespace, name)


def grant(store: Store, documents: Sequence[Mapping[str, Any]]) -> UserInfo:
    """Load the manifests' RBAC objects (and their namespaces) into the store; the bound
    ServiceAccount."""
    user = bound_service_account(documents)
    ensure_namespaces(store, documents)
    load_rbac(store, documents)
    return user


def serve_as_service_account(
    store: Store,
    documents: Sequence[Mapping[str, Any]],
    *,
    port: int = 0,
    tls: bool = True,
    pod_activity: PodActivitySource | None = None,
) -> Access:
    """Grant the manifests' rights and start an API server with a token for the ServiceAccount
    they bind and one for the admin (stop it with `access.server.stop()`)."""
    user = grant(store, documents)
    token, admin_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    authenticator = Authenticator({token: user, admin_token: ADMIN})
    server = ApiServer(store, port=port, authenticator=authenticator, tls=tls,
                       pod_activity=pod_activity).start()
    return Access(server=server, user=user, token=token, admin_token=admin_token)
