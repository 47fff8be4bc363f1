"""Discovery for the twin's API: version, API groups and resource lists, a minimal OpenAPI v3,
and the resolution of a request path to a resource route.

Answers what kubectl and the official client read before they send a request (/version, /api,
/apis, /apis/GROUP, /api/v1 and /apis/GROUP/VERSION resource lists with subresources, short names
and categories, and /openapi/v3 with the PATCH operations and their `fieldValidation` parameter)
from the twin's resource table, less the kinds of an optional API group (Kueue's) not installed in
the store: those are absent from discovery and their paths resolve to nothing (404), as on a
cluster without their CRDs. Used by the HTTP layer (apihandler.py); it does not serve objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.twin.resources import OPTIONAL_GROUPS, RESOURCES, ResourceType

KUBERNETES_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-zonemedic-twin",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "scale": ["get", "patch", "update"],
    "binding": ["create"],
    "log": ["get"],
    "exec": ["create", "get"],
    "attach": ["create", "get"],
    "portforward": ["create", "get"],
}
_SUBRESOURCE_KINDS = {"binding": "Binding", "scale": "Scale", "exec": "PodExecOptions",
                      "attach": "PodAttachOptions", "portforward": "PodPortForwardOptions"}


@dataclass(frozen=True)
class Route:
    """A request path resolved to a resource, its namespace, name and subresource."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


def _resource_entry(rt: ResourceType) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    out = [entry]
    for sub in rt.subresources:
        item: dict[str, Any] = {
            "name": f"{rt.plural}/{sub}",
            "singularName": "",
            "namespaced": rt.namespaced,
            "kind": _SUBRESOURCE_KINDS.get(sub, rt.kind),
            "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"]),
        }
        if sub == "scale":  # served as autoscaling/v1 Scale, whatever the parent's group
            item.update(group="autoscaling", version="v1")
        out.append(item)
    return out


def _group_entry(name: str, versions: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
        "preferredVersion": {"groupVersion": f"{name}/{versions[0]}", "version": versions[0]},
    }


class Discovery:
    """The resource table indexed by group and version, and the documents built from it; `served`
    says which kinds the cluster serves now (an optional group's CRDs may not be installed)."""

    def __init__(self, served: Callable[[ResourceType], bool] = lambda _rt: True) -> None:
        self._served = served
        self._all: dict[tuple[str, str], dict[str, ResourceType]] = {}
        for rt in RESOURCES:
            self._all.setdefault((rt.group, rt.version), {})[rt.plural] = rt
        self._optional = [rt for rt in RESOURCES if rt.group in OPTIONAL_GROUPS]
        self._views: dict[tuple[bool, ...], dict[tuple[str, str], dict[str, ResourceType]]] = {}

    @property
    def _by_gv(self) -> dict[tuple[str, str], dict[str, ResourceType]]:
        """The served kinds by group and version (one view per set of installed groups)."""
        state = tuple(self._served(rt) for rt in self._optional)
        view = self._views.get(state)
        if view is None:
            view = {}
            for gv, kinds in self._all.items():
                kept = {plural: rt for plural, rt in kinds.items() if self._served(rt)}
                if kept:
                    view[gv] = kept
            self._views[state] = view
        return view

    def _groups(self) -> dict[str, list[str]]:
        """Group name -> its served versions, in table order (core group is "")."""
        out: dict[str, list[str]] = {}
        for group, version in self._by_gv:
            versions = out.setdefault(group, [])
            if version not in versions:
                versions.append(version)
        return out

    def route(self, parts: list[str]) -> Route | None:
        """Resolve /api/v1/... or /apis/g/v/... path segments to a resource route."""
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        kinds = self._by_gv.get((group, version))
        if not kinds or not rest:
            return None
        namespace = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and rest[2] in kinds
            and (kinds[rest[2]].namespaced)
        ):
            namespace, rest = rest[1], rest[2:]
        rt = kinds.get(rest[0])
        if rt is None or len(rest) > 3:
            return None
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return Route(rt, namespace, name, sub)

    def document(self, parts: list[str], *, port: int) -> Any:
        """The discovery document for a path, or None when the path is not a discovery path."""
        if parts == ["version"]:
            return KUBERNETES_VERSION
        if parts[:2] == ["openapi", "v3"]:
            return self.openapi_v3(parts[2:])
        if parts == ["api"]:
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}
                ],
            }
        if parts == ["apis"]:
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [_group_entry(g, vs) for g, vs in self._groups().items() if g],
            }
        served = self._groups()
        if len(parts) == 2 and parts[0] == "apis" and parts[1] in served:
            entry = _group_entry(parts[1], served[parts[1]])
            return {"kind": "APIGroup", "apiVersion": "v1", **entry}
        if parts == ["api", "v1"] or (len(parts) == 3 and parts[0] == "apis"):
            group, version = ("", "v1") if parts[0] == "api" else (parts[1], parts[2])
            kinds = self._by_gv.get((group, version))
            if kinds is None:
                return None
            resources = [e for rt in kinds.values() for e in _resource_entry(rt)]
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": resources,
            }
        return None

    def openapi_v3(self, rest: list[str]) -> Any:
        """A minimal OpenAPI v3: per group-version, the PATCH operations with their kind and the
        `fieldValidation` parameter, which is what kubectl reads to choose server-side field
        validation for `create -f`/`apply` (so it never needs the full schemas)."""
        if not rest:
            roots: dict[str, Any] = {}
            for group, version in self._by_gv:
                prefix = f"apis/{group}/{version}" if group else "api/v1"
                roots[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash=twin"}
            return {"paths": roots}
        if rest[:2] == ["api", "v1"] and len(rest) == 2:
            kinds = self._by_gv.get(("", "v1"))
        elif rest[:1] == ["apis"] and len(rest) == 3:
            kinds = self._by_gv.get((rest[1], rest[2]))
        else:
            kinds = None
        if kinds is None:
            return None
        param = {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
        paths: dict[str, Any] = {}
        for rt in kinds.values():
            item = "/namespaces/{namespace}" if rt.namespaced else ""
            path = f"{rt.base_path()}".replace(f"/{rt.plural}", f"{item}/{rt.plural}") + "/{name}"
            paths[path] = {
                "patch": {
                    "operationId": f"patch{rt.kind}",
                    "parameters": [param],
                    "responses": {"200": {"description": "OK"}},
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": {
                        "group": rt.group,
                        "version": rt.version,
                        "kind": rt.kind,
                    },
                }
            }
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes (zonemedic twin)", "version": "v1.32.0"},
            "paths": paths,
            "components": {},
        }
