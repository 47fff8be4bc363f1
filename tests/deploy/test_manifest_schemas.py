"""Every manifest deploy/ renders validates offline against the Kubernetes schemas of the supported
versions (kubernetes-validate's bundled JSON schemas, strict: an unknown field is an error).

Custom resources are not in those schemas. CiliumNetworkPolicy and PrometheusRule are checked
against the small structural schemas below (the fields we use, with unknown fields rejected, Cilium's
entity names and protocols); any other kind without a schema fails the test rather than passing
unchecked. No network: the schemas ship inside the package.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.support.kustomize import OVERLAYS, render

# The Kubernetes minor versions zonemedic supports (the client library's range and the versions
# current providers run); each must be one kubernetes-validate ships schemas for.
SUPPORTED = ("1.30", "1.31", "1.32", "1.33", "1.34", "1.35")

_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
_ENTITIES = {
    "type": "array",
    "minItems": 1,
    "items": {"enum": ["all", "world", "cluster", "host", "remote-node", "kube-apiserver",
                       "init", "health", "unmanaged", "ingress", "none"]},
}
_PORTS = {
    "type": "array",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "ports": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["port"],
                    "properties": {
                        # a string in the CRD: a number 0-65535 or a port name
                        "port": {"type": "string", "pattern": r"^([0-9]{1,5}|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$"},
                        "endPort": {"type": "integer", "minimum": 0, "maximum": 65535},
                        "protocol": {"enum": ["TCP", "UDP", "SCTP", "ICMP", "ICMPv6", "ANY"]},
                    },
                },
            },
            "rules": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "dns": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "minProperties": 1,
                            "maxProperties": 1,
                            "properties": {
                                "matchName": {"type": "string", "pattern": r"^[-a-zA-Z0-9_.]+$"},
                                "matchPattern": {"type": "string", "pattern": r"^[-a-zA-Z0-9_.*]+$"},
                            },
                        },
                    },
                    "http": {"type": "array"},
                },
            },
        },
    },
}
_FQDNS = _PORTS["items"]["properties"]["rules"]["properties"]["dns"]  # type: ignore[index]
_CNP_RULE_PEERS = {
    "ingress": {"fromEndpoints": {"type": "array", "items": _SELECTOR}, "fromEntities": _ENTITIES,
                "fromCIDR": {"type": "array"}, "fromCIDRSet": {"type": "array"}},
    "egress": {"toEndpoints": {"type": "array", "items": _SELECTOR}, "toEntities": _ENTITIES,
               "toFQDNs": _FQDNS, "toCIDR": {"type": "array"}, "toCIDRSet": {"type": "array"},
               "toServices": {"type": "array"}},
}


def _rules(direction: str) -> dict[str, Any]:
    return {
        "type": "array",
        "items": {
            "type": "object",
            "additionalProperties": False,
            "properties": {**_CNP_RULE_PEERS[direction], "toPorts": _PORTS},
        },
    }


_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}},
}
CUSTOM_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("cilium.io/v2", "CiliumNetworkPolicy"): {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {}, "kind": {}, "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["endpointSelector"],
                "properties": {
                    "description": {"type": "string"},
                    "endpointSelector": _SELECTOR,
                    "ingress": _rules("ingress"),
                    "egress": _rules("egress"),
                    "ingressDeny": _rules("ingress"),
                    "egressDeny": _rules("egress"),
                    "enableDefaultDeny": {"type": "object"},
                },
            },
        },
    },
    ("monitoring.coreos.com/v1", "PrometheusRule"): {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {}, "kind": {}, "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["groups"],
                "properties": {"groups": {"type": "array", "minItems": 1, "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "rules"],
                    "properties": {
                        "name": {"type": "string"},
                        "interval": {"type": "string"},
                        "rules": {"type": "array", "minItems": 1, "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["expr"],
                            "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
                            "properties": {
                                "record": {"type": "string"}, "alert": {"type": "string"},
                                "expr": {"type": ["string", "integer"]},
                                "for": {"type": "string"},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                            },
                        }},
                    },
                }}},
            },
        },
    },
}


def problems(doc: dict[str, Any], version: str) -> list[str]:
    """What is wrong with one manifest for one Kubernetes version (empty: valid)."""
    where = f"{doc.get('kind')} {doc.get('metadata', {}).get('name')} (Kubernetes {version})"
    custom = CUSTOM_SCHEMAS.get((doc.get("apiVersion", ""), doc.get("kind", "")))
    if custom is not None:
        validator = jsonschema.Draft202012Validator(custom)
        return [f"{where}: {'.'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator.iter_errors(doc)]
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [f"{where}: no schema ({exc.message}); add a structural one to CUSTOM_SCHEMAS"]
    except kubernetes_validate.ValidationError as exc:
        return [f"{where}: {'.'.join(map(str, exc.path))}: {exc.message}"]
    return []


def test_the_supported_versions_have_schemas() -> None:
    shipped = {kubernetes_validate.utils.major_minor(v) for v in kubernetes_validate.utils.all_versions()}
    assert set(SUPPORTED) <= shipped


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_manifest_is_valid_for_every_supported_version(overlay: str) -> None:
    docs = render(overlay)
    found = [p for version in SUPPORTED for doc in docs for p in problems(doc, version)]
    assert found == []


def _deployment() -> dict[str, Any]:
    return copy.deepcopy(next(d for d in render("base") if d["kind"] == "Deployment"))


def _cnp() -> dict[str, Any]:
    return copy.deepcopy(next(d for d in render("base") if d["kind"] == "CiliumNetworkPolicy"))


def _typo(doc: dict[str, Any]) -> dict[str, Any]:
    doc["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    return doc


def _wrong_type(doc: dict[str, Any]) -> dict[str, Any]:
    doc["spec"]["replicas"] = "two"
    return doc


def _bad_entity(doc: dict[str, Any]) -> dict[str, Any]:
    doc["spec"]["egress"][0]["toEntities"] = ["apiserver"]
    return doc


def _numeric_port(doc: dict[str, Any]) -> dict[str, Any]:
    doc["spec"]["ingress"][0]["toPorts"][0]["ports"][0]["port"] = 8080
    return doc


def _unknown_kind(doc: dict[str, Any]) -> dict[str, Any]:
    doc["apiVersion"] = "example.com/v1"
    return doc


@pytest.mark.parametrize(
    ("make", "change", "message"),
    [
        (_deployment, _typo, "'readinessprobe' was unexpected"),
        (_deployment, _wrong_type, "is not of type 'integer'"),
        (_cnp, _bad_entity, "'apiserver' is not one of"),
        (_cnp, _numeric_port, "8080 is not of type 'string'"),
        (_cnp, _unknown_kind, "no schema"),
    ],
)
def test_an_invalid_manifest_is_reported(make: Any, change: Any, message: str) -> None:
    """The check can fail: a typo'd field, a wrong type, a Cilium entity that does not exist, a port
    Cilium would reject, and a kind nobody has a schema for."""
    found = problems(change(make()), SUPPORTED[0])
    assert found and message in found[0], found
