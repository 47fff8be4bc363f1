"""MutatingWebhookConfigurations as the API server stores them: their defaults and validation.

`admissionregistration.k8s.io/v1` defaults, set on every write (the server's scheme defaulting):
`failurePolicy: Fail`, `matchPolicy: Equivalent`, empty `namespaceSelector`/`objectSelector`
(match everything), `timeoutSeconds: 10`, `reinvocationPolicy: Never`, each rule's `scope: "*"`
and a service reference's `port: 443`. Validation (422 Invalid, worded as the registry's field
errors): a webhook name that is a DNS subdomain with at least three segments, unique in its
configuration; `sideEffects` and `admissionReviewVersions` required (v1 accepts only `None` and
`NoneOnDryRun`: `Some` and `Unknown` are v1beta1 values the v1 API refuses); a known review
version; exactly one of `clientConfig.url` (https, no fragment or query) and
`clientConfig.service` (namespace and name required, path starting with `/`, port 1-65535);
`timeoutSeconds` 1-30; the enums of failurePolicy, matchPolicy, reinvocationPolicy, operations
and scope; label selectors that parse.

`register` adds both as the store's in-process admission hooks for the kind (store.py calls it).
It does not call webhooks (admission_webhooks.py does).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from agent.errors import PolicyError
from agent.model.selector import parse_label_selector
from agent.twin.apierror import FieldProblem, invalid_fields
from agent.twin.resources import lookup

if TYPE_CHECKING:
    from agent.twin.writes import Writes

Obj = dict[str, Any]
GROUP = "admissionregistration.k8s.io"
KIND = "MutatingWebhookConfiguration"
MUTATING_CONFIGS = lookup("mutatingwebhookconfigurations", group=GROUP)
REVIEW_VERSIONS = ("v1", "v1beta1")
DEFAULT_TIMEOUT = 10
_SIDE_EFFECTS = ("None", "NoneOnDryRun")
_FAILURE = ("Ignore", "Fail")
_MATCH = ("Exact", "Equivalent")
_REINVOCATION = ("Never", "IfNeeded")
_OPERATIONS = ("*", "CREATE", "UPDATE", "DELETE", "CONNECT")
_SCOPES = ("*", "Cluster", "Namespaced")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f'"{v}"' for v in values)


def default_configuration(_old: Obj | None, new: Obj) -> None:
    """Fill in the v1 defaults of every webhook, as the server's defaulting does."""
    for hook in new.get("webhooks") or []:
        if not isinstance(hook, dict):
            continue
        hook.setdefault("failurePolicy", "Fail")
        hook.setdefault("matchPolicy", "Equivalent")
        hook.setdefault("namespaceSelector", {})
        hook.setdefault("objectSelector", {})
        hook.setdefault("timeoutSeconds", DEFAULT_TIMEOUT)
        hook.setdefault("reinvocationPolicy", "Never")
        for rule in hook.get("rules") or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")
        service = (hook.get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)


def _enum(problems: list[FieldProblem], path: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        problems.append(FieldProblem(path, "FieldValueNotSupported",
                                     f"supported values: {_quoted(allowed)}", f'"{value}"'))


def _client_config(problems: list[FieldProblem], path: str, config: Any) -> None:
    if not isinstance(config, Mapping):
        config = {}
    url, service = config.get("url"), config.get("service")
    if (url is None) == (service is None):
        problems.append(FieldProblem(path, "FieldValueRequired",
                                     "exactly one of url or service is required"))
        return
    if url is not None:
        parts = urlsplit(str(url))
        if parts.scheme != "https":
            problems.append(FieldProblem(f"{path}.url", "FieldValueInvalid",
                                         "'https' is the only allowed URL scheme", f'"{url}"'))
        elif not parts.hostname:
            problems.append(FieldProblem(f"{path}.url", "FieldValueInvalid",
                                         "host must be specified", f'"{url}"'))
        elif parts.query or parts.fragment:
            problems.append(FieldProblem(f"{path}.url", "FieldValueInvalid",
                                         "query parameters and fragments are not permitted",
                                         f'"{url}"'))
        return
    where = f"{path}.service"
    if not isinstance(service, Mapping):
        problems.append(FieldProblem(where, "FieldValueRequired", ""))
        return
    for key in ("namespace", "name"):
        if not service.get(key):
            problems.append(FieldProblem(f"{where}.{key}", "FieldValueRequired",
                                         f"service {key} is required"))
    svc_path = service.get("path")
    if svc_path is not None and not str(svc_path).startswith("/"):
        problems.append(FieldProblem(f"{where}.path", "FieldValueInvalid",
                                     "must start with a '/'", f'"{svc_path}"'))
    port = service.get("port", 443)
    if not isinstance(port, int) or not 1 <= port <= 65535:
        problems.append(FieldProblem(f"{where}.port", "FieldValueInvalid",
                                     "port is not valid: must be between 1 and 65535, inclusive",
                                     str(port)))


def _selector(problems: list[FieldProblem], path: str, selector: Any) -> None:
    try:
        parse_label_selector(selector, where=path)
    except PolicyError as exc:
        problems.append(FieldProblem(path, "FieldValueInvalid", str(exc)))


def _rules(problems: list[FieldProblem], path: str, rules: Any) -> None:
    for r, rule in enumerate(rules if isinstance(rules, list) else []):
        where = f"{path}[{r}]"
        if not isinstance(rule, Mapping):
            problems.append(FieldProblem(where, "FieldValueInvalid", "must be an object"))
            continue
        for key in ("operations", "apiGroups", "apiVersions", "resources"):
            if not rule.get(key):
                problems.append(FieldProblem(f"{where}.{key}", "FieldValueRequired", ""))
        for o, op in enumerate(rule.get("operations") or []):
            _enum(problems, f"{where}.operations[{o}]", op, _OPERATIONS)
        _enum(problems, f"{where}.scope", rule.get("scope", "*"), _SCOPES)


def _webhook(problems: list[FieldProblem], path: str, hook: Mapping[str, Any]) -> None:
    name = str(hook.get("name") or "")
    if not name:
        problems.append(FieldProblem(f"{path}.name", "FieldValueRequired", ""))
    elif not _SUBDOMAIN.match(name) or len(name) > 253:
        problems.append(FieldProblem(f"{path}.name", "FieldValueInvalid",
                                     "a lowercase RFC 1123 subdomain must consist of lower case "
                                     "alphanumeric characters, '-' or '.', and must start and end "
                                     "with an alphanumeric character", f'"{name}"'))
    elif name.count(".") < 2:
        problems.append(FieldProblem(f"{path}.name", "FieldValueInvalid",
                                     "should be a domain with at least three segments separated "
                                     "by dots", f'"{name}"'))
    if "sideEffects" not in hook:
        problems.append(FieldProblem(f"{path}.sideEffects", "FieldValueRequired",
                                     f"must specify one of {_quoted(_SIDE_EFFECTS)}"))
    else:
        _enum(problems, f"{path}.sideEffects", hook.get("sideEffects"), _SIDE_EFFECTS)
    versions = hook.get("admissionReviewVersions")
    if not versions:
        problems.append(FieldProblem(f"{path}.admissionReviewVersions", "FieldValueRequired",
                                     f"must specify one of {', '.join(REVIEW_VERSIONS)}"))
    elif not any(v in REVIEW_VERSIONS for v in versions):
        problems.append(FieldProblem(f"{path}.admissionReviewVersions", "FieldValueInvalid",
                                     f"must include at least one of {', '.join(REVIEW_VERSIONS)}",
                                     str(versions)))
    timeout = hook.get("timeoutSeconds", DEFAULT_TIMEOUT)
    if not isinstance(timeout, int) or not 1 <= timeout <= 30:
        problems.append(FieldProblem(f"{path}.timeoutSeconds", "FieldValueInvalid",
                                     "the timeout value must be between 1 and 30 seconds",
                                     str(timeout)))
    _enum(problems, f"{path}.failurePolicy", hook.get("failurePolicy", "Fail"), _FAILURE)
    _enum(problems, f"{path}.matchPolicy", hook.get("matchPolicy", "Equivalent"), _MATCH)
    _enum(problems, f"{path}.reinvocationPolicy", hook.get("reinvocationPolicy", "Never"),
          _REINVOCATION)
    _client_config(problems, f"{path}.clientConfig", hook.get("clientConfig"))
    _rules(problems, f"{path}.rules", hook.get("rules"))
    _selector(problems, f"{path}.namespaceSelector", hook.get("namespaceSelector"))
    _selector(problems, f"{path}.objectSelector", hook.get("objectSelector"))


def validate_configuration(_old: Obj | None, new: Obj) -> None:
    """422 Invalid naming every bad field of the configuration's webhooks."""
    problems: list[FieldProblem] = []
    seen: set[str] = set()
    hooks = new.get("webhooks") or []
    if not isinstance(hooks, list):
        problems.append(FieldProblem("webhooks", "FieldValueInvalid", "must be a list"))
        hooks = []
    for i, hook in enumerate(hooks):
        path = f"webhooks[{i}]"
        if not isinstance(hook, Mapping):
            problems.append(FieldProblem(path, "FieldValueInvalid", "must be an object"))
            continue
        _webhook(problems, path, hook)
        name = str(hook.get("name") or "")
        if name and name in seen:
            problems.append(FieldProblem(f"{path}.name", "FieldValueDuplicate", "", f'"{name}"'))
        seen.add(name)
    if problems:
        name = str((new.get("metadata") or {}).get("name") or "")
        raise invalid_fields(GROUP, KIND, name, problems)


def register(writes: Writes) -> None:
    """Default and validate every write of a MutatingWebhookConfiguration."""
    writes.add_mutation(MUTATING_CONFIGS, default_configuration)
    writes.add_admission(MUTATING_CONFIGS, validate_configuration)
