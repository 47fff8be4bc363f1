"""Authentication and RBAC authorization for the twin's API server.

Bearer tokens map to identities (user name and groups). Authorization evaluates the RBAC objects
(Role, ClusterRole, RoleBinding, ClusterRoleBinding) held in the store itself, so loading the
ClusterRole shipped in deploy/ (with `load_rbac`) and binding it to a token's identity gives that
token exactly those rights; `system:masters` may do anything. Called by apiserver.py for every
request and for SelfSubjectAccessReview. It does not speak HTTP.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from agent.errors import InputError
from agent.twin.apierror import ApiError
from agent.twin.resources import ResourceType, lookup
from agent.twin.store import Store

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()

    @classmethod
    def service_account(cls, namespace: str, name: str) -> UserInfo:
        return cls(
            f"system:serviceaccount:{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
        )


ADMIN = UserInfo("twin-admin", (MASTERS, AUTHENTICATED))


@dataclass(frozen=True)
class Attributes:
    """What a request wants to do, as RBAC sees it."""

    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""  # for non-resource requests

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)


@dataclass(frozen=True)
class _Rule:
    verbs: frozenset[str]
    api_groups: frozenset[str]
    resources: frozenset[str]
    resource_names: frozenset[str]
    non_resource_urls: tuple[str, ...]
    namespace: str | None  # None: every namespace (and cluster scope)

    def allows(self, a: Attributes) -> bool:
        if "*" not in self.verbs and a.verb not in self.verbs:
            return False
        if not a.is_resource:
            # Only a ClusterRoleBinding grants non-resource URLs (a RoleBinding's rules are
            # namespaced); `/prefix*` matches by prefix, `*` matches every path.
            return self.namespace is None and any(
                u in ("*", a.path) or (u.endswith("*") and a.path.startswith(u[:-1]))
                for u in self.non_resource_urls
            )
        if self.namespace is not None and a.namespace != self.namespace:
            return False
        if "*" not in self.api_groups and a.api_group not in self.api_groups:
            return False
        # As upstream RBAC: `*` matches every resource and subresource, `pods/status` exactly that
        # subresource, `*/status` that subresource of every resource (there is no `pods/*`).
        wanted = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
        if not (
            "*" in self.resources
            or wanted in self.resources
            or (a.subresource and f"*/{a.subresource}" in self.resources)
        ):
            return False
        return not self.resource_names or a.name in self.resource_names


def _rules(role: Mapping[str, Any], namespace: str | None) -> list[_Rule]:
    out = []
    for rule in role.get("rules") or ():
        out.append(
            _Rule(
                verbs=frozenset(rule.get("verbs") or ()),
                api_groups=frozenset(rule.get("apiGroups") or ()),
                resources=frozenset(rule.get("resources") or ()),
                resource_names=frozenset(rule.get("resourceNames") or ()),
                non_resource_urls=tuple(rule.get("nonResourceURLs") or ()),
                namespace=namespace,
            )
        )
    return out


def _subject_matches(subject: Mapping[str, Any], binding_ns: str, user: UserInfo) -> bool:
    kind = subject.get("kind")
    name = subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return user.name == f"system:serviceaccount:{ns}:{name}"
    return False


@dataclass
class Authenticator:
    """Bearer token -> identity. With no tokens at all, every request is the admin."""

    tokens: dict[str, UserInfo] = field(default_factory=dict)

    def add(self, token: str, user: UserInfo) -> None:
        self.tokens[token] = user

    def authenticate(self, authorization: str | None) -> UserInfo:
        if not self.tokens:
            return ADMIN
        if authorization and authorization.lower().startswith("bearer "):
            user = self.tokens.get(authorization[7:].strip())
            if user is not None:
                return user
        raise ApiError(401, "Unauthorized", "Unauthorized")


class Authorizer:
    """RBAC over the store's Role/ClusterRole/RoleBinding/ClusterRoleBinding objects."""

    _KINDS = ("roles", "clusterroles", "rolebindings", "clusterrolebindings")

    def __init__(self, store: Store) -> None:
        self._store = store
        self._types: tuple[ResourceType, ...] = tuple(
            lookup(k, "rbac.authorization.k8s.io") for k in self._KINDS
        )
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, tuple[int, ...]], list[_Rule]] = {}

    def rules_for(self, user: UserInfo) -> list[_Rule]:
        version = tuple(self._store.type_version(t) for t in self._types)
        key = (user.name + "|" + ",".join(user.groups), version)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        roles_t, croles_t, bindings_t, cbindings_t = self._types
        croles = {r["metadata"]["name"]: r for r in self._store.list(croles_t)[0]}
        roles = {
            (r["metadata"]["namespace"], r["metadata"]["name"]): r
            for r in self._store.list(roles_t)[0]
        }
        rules: list[_Rule] = []
        for b in self._store.list(cbindings_t)[0]:
            if any(_subject_matches(s, "", user) for s in b.get("subjects") or ()):
                role = croles.get((b.get("roleRef") or {}).get("name", ""))
                if role is not None:
                    rules.extend(_rules(role, None))
        for b in self._store.list(bindings_t)[0]:
            ns = b["metadata"]["namespace"]
            if not any(_subject_matches(s, ns, user) for s in b.get("subjects") or ()):
                continue
            ref = b.get("roleRef") or {}
            if ref.get("kind") == "ClusterRole":
                found = croles.get(ref.get("name", ""))
            else:
                found = roles.get((ns, ref.get("name", "")))
            if found is not None:
                rules.extend(_rules(found, ns))
        with self._lock:
            if len(self._cache) > 1000:
                self._cache.clear()
            self._cache[key] = rules
        return rules

    def allowed(self, user: UserInfo, attrs: Attributes) -> bool:
        if MASTERS in user.groups:
            return True
        if not attrs.is_resource and attrs.verb == "get" and _public_path(attrs.path):
            return True
        if attrs.is_resource and attrs.resource == "selfsubjectaccessreviews":
            return True
        return any(rule.allows(attrs) for rule in self.rules_for(user))

    def authorize(self, user: UserInfo, attrs: Attributes) -> None:
        """Raise the real server's 403 Forbidden when `user` may not do `attrs`."""
        if self.allowed(user, attrs):
            return
        raise forbidden(user, attrs)


def _public_path(path: str) -> bool:
    # system:discovery and system:public-info-viewer grant these to every authenticated user.
    return path in ("/api", "/apis", "/version", "/healthz", "/livez", "/readyz") or (
        path.startswith(("/api/", "/apis/", "/openapi/"))
    )


def forbidden(user: UserInfo, attrs: Attributes) -> ApiError:
    if not attrs.is_resource:
        return ApiError(
            403,
            "Forbidden",
            f'forbidden: User "{user.name}" cannot {attrs.verb} path "{attrs.path}"',
        )
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    return ApiError(
        403,
        "Forbidden",
        f'{subject} is forbidden: User "{user.name}" cannot {attrs.verb} resource "{resource}" '
        f'in API group "{attrs.api_group}" {scope}',
        details={"name": attrs.name, "group": attrs.api_group, "kind": attrs.resource},
    )


def access_review(
    authorizer: Authorizer, user: UserInfo, body: Mapping[str, Any]
) -> dict[str, Any]:
    """Answer a SelfSubjectAccessReview (what `kubectl auth can-i` posts)."""
    spec = body.get("spec") or {}
    res = spec.get("resourceAttributes")
    non = spec.get("nonResourceAttributes")
    if res:
        attrs = Attributes(
            verb=res.get("verb", ""),
            api_group=res.get("group", ""),
            resource=res.get("resource", ""),
            subresource=res.get("subresource", ""),
            namespace=res.get("namespace", ""),
            name=res.get("name", ""),
        )
    elif non:
        attrs = Attributes(verb=non.get("verb", ""), path=non.get("path", ""))
    else:
        raise ApiError(
            422,
            "Invalid",
            "SelfSubjectAccessReview.authorization.k8s.io is "
            "invalid: spec: Invalid value: exactly one of nonResourceAttributes or "
            "resourceAttributes must be specified",
        )
    allowed = authorizer.allowed(user, attrs)
    out = dict(body)
    out["apiVersion"] = "authorization.k8s.io/v1"
    out["kind"] = "SelfSubjectAccessReview"
    out["metadata"] = {"creationTimestamp": None}
    out["status"] = {"allowed": allowed}
    if allowed:
        out["status"]["reason"] = "allowed by the twin's RBAC"
    return out


_RBAC_KINDS = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ServiceAccount"}


def load_rbac(
    store: Store, documents: Iterable[Mapping[str, Any]], *, namespace: str = "default"
) -> int:
    """Create (or replace) the RBAC objects among `documents` in the store; returns how many.

    Other kinds are skipped, so a whole deploy/ manifest file can be passed. A namespaced object
    without a namespace goes to `namespace` (what `kubectl apply -n` or kustomize's `namespace:`
    does).
    """
    count = 0
    for doc in documents:
        if not isinstance(doc, Mapping) or doc.get("kind") not in _RBAC_KINDS:
            continue
        rt = lookup(
            str(doc["kind"]),
            None if doc["kind"] == "ServiceAccount" else "rbac.authorization.k8s.io",
        )
        meta = doc.get("metadata") or {}
        name = meta.get("name", "")
        ns = meta.get("namespace") or (namespace if rt.namespaced else None)
        try:
            store.delete(rt, name, namespace=ns)
        except ApiError as exc:
            if exc.code != 404:
                raise
        store.create(rt, doc, namespace=ns)
        count += 1
    return count


def read_rbac_file(path: str) -> list[dict[str, Any]]:
    """The YAML documents of a file, or InputError naming the file."""
    try:
        with open(path, encoding="utf-8") as handle:
            return [d for d in yaml.safe_load_all(handle) if d]
    except OSError as exc:
        raise InputError(f"cannot read RBAC file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise InputError(f"RBAC file {path} is not valid YAML: {exc}") from exc


def ensure_namespaces(
    store: Store, documents: Iterable[Mapping[str, Any]], *, namespace: str | None = None
) -> None:
    """Create the namespaces the namespaced documents live in (and `namespace`), when missing."""
    ns_rt = lookup("namespaces")
    wanted = [(doc.get("metadata") or {}).get("namespace") for doc in documents]
    for ns in [namespace, *wanted]:
        if ns:
            try:
                store.create(ns_rt, {"metadata": {"name": ns}})
            except ApiError as exc:
                if exc.code != 409:
                    raise
