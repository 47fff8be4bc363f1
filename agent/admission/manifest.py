"""The MutatingWebhookConfiguration of the agent's admission webhook, for one configuration.

Who calls it: `zonemedic admission manifest --config FILE` (the one in deploy/ is its output
for deploy/base/config.yaml; a test keeps them equal), and the composition root (the
configuration's and the webhooks' names, for the caBundle patch). Pure: settings in, a manifest
dict out.

The webhook: `admissionReviewVersions: [v1]`, `sideEffects: None` (a dry run records nothing),
`failurePolicy: Ignore` (the agent away, or slow past `timeoutSeconds`: the job is created as
it is, and a split is caught after it starts as before), `reinvocationPolicy: IfNeeded` (called
again after a later webhook, e.g. Kueue's, changed the object: an already placed job passes
unchanged), `matchPolicy: Equivalent`; rules for CREATE of every training kind at every version
it serves (`agent.model.workload`), and of Deployments and batch Jobs when generic groups are
configured; a namespace opts in with `admission.namespace_label: enabled`; an object opts out
with `admission.object_label: disabled` (the objectSelector). Reached through the Service
(`service_namespace/service_name:service_port`, path `/admission/mutate`) or, with
`admission.url`, at that URL.

Pods: a group placed pod by pod (`diagnosis.groups[].admit_pods: true`) gets a webhook of its
own, `<group>.pods.<admission.webhook_name>`, with the same client, policies and opt-out, and one
rule, CREATE of `pods`; its objectSelector adds the group's selector (matchLabels) so only the
group's pods are sent (every other pod of an opted-in namespace costs the API server nothing),
and its namespaceSelector adds the group's namespace, when it names one. Without such a group
the configuration has no pods rule at all. The caBundle is left out: cert-manager injects it (the annotation,
when `cert_file` is set: a mounted certificate) or the agent patches its own in at start-up.
"""

from __future__ import annotations

from typing import Any

from agent.model.workload import BATCH_JOB, DEPLOYMENT, WORKLOADS
from agent.settings import ADMISSION_PATH, GroupSpec, Settings

API_VERSION = "admissionregistration.k8s.io/v1"
KIND = "MutatingWebhookConfiguration"
ENABLED = "enabled"
DISABLED = "disabled"
NAMESPACE_NAME = "kubernetes.io/metadata.name"  # the label the API server sets on every namespace
POD_RULE: dict[str, Any] = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                            "resources": ["pods"], "scope": "Namespaced"}  # fmt: skip


def certificate_name(settings: Settings) -> str:
    """The cert-manager Certificate deploy/ names for the webhook's serving certificate."""
    return f"{settings.admission.service_name}-admission"


def rules(settings: Settings) -> list[dict[str, Any]]:
    """One rule per kind the webhook places: CREATE, namespaced."""
    out = [{"operations": ["CREATE"], "apiGroups": [w.group], "apiVersions": list(w.versions),
            "resources": [w.plural], "scope": "Namespaced"} for w in WORKLOADS]  # fmt: skip
    if settings.diagnosis.groups:
        out.extend({"operations": ["CREATE"], "apiGroups": [o.group], "apiVersions": [o.version],
                    "resources": [o.plural], "scope": "Namespaced"}
                   for o in (DEPLOYMENT, BATCH_JOB))  # fmt: skip
    return out


def pod_groups(settings: Settings) -> list[GroupSpec]:
    """The groups placed pod by pod (each gets a `pods` webhook)."""
    return [g for g in settings.diagnosis.groups if g.admit_pods]


def webhook_names(settings: Settings) -> list[str]:
    """The configuration's webhooks, in its order: the main one, then one per pod-by-pod group."""
    main = settings.admission.webhook_name
    return [main, *(f"{g.name}.pods.{main}" for g in pod_groups(settings))]


def webhook_configuration(settings: Settings, *, url: str | None = None) -> dict[str, Any]:
    """The MutatingWebhookConfiguration (see the module docstring); `url` overrides
    `admission.url`."""
    admission = settings.admission
    target = url or admission.url
    client: dict[str, Any]
    if target is not None:
        client = {"url": target}
    else:
        client = {"service": {"namespace": admission.service_namespace,
                              "name": admission.service_name, "path": ADMISSION_PATH,
                              "port": admission.service_port}}  # fmt: skip
    metadata: dict[str, Any] = {"name": admission.configuration_name,
                                "labels": {"app.kubernetes.io/name": "zonemedic"}}  # fmt: skip
    if admission.cert_file is not None:
        metadata["annotations"] = {
            "cert-manager.io/inject-ca-from": f"{admission.service_namespace}/{certificate_name(settings)}"}
    opt_out = {"key": admission.object_label, "operator": "NotIn", "values": [DISABLED]}

    def webhook(name: str, *, rules: list[dict[str, Any]], namespaces: dict[str, Any],
                objects: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
        return {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "timeoutSeconds": admission.timeout_seconds,
            "reinvocationPolicy": "IfNeeded",
            "matchPolicy": "Equivalent",
            "clientConfig": client,
            "namespaceSelector": namespaces,
            "objectSelector": objects,
            "rules": rules,
        }  # fmt: skip

    opt_in = {admission.namespace_label: ENABLED}
    webhooks = [webhook(admission.webhook_name, rules=rules(settings),
                        namespaces={"matchLabels": opt_in}, objects={"matchExpressions": [opt_out]})]
    for group, name in zip(pod_groups(settings), webhook_names(settings)[1:], strict=True):
        namespaces: dict[str, Any] = {"matchLabels": dict(opt_in)}
        if group.namespace is not None:
            namespaces["matchExpressions"] = [{"key": NAMESPACE_NAME, "operator": "In",
                                               "values": [group.namespace]}]  # fmt: skip
        webhooks.append(webhook(name, rules=[POD_RULE], namespaces=namespaces, objects={
            "matchLabels": dict(group.selector), "matchExpressions": [opt_out]}))
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "webhooks": webhooks}
