"""The MutatingWebhookConfiguration of the agent's admission webhook, for one configuration.

Who calls it: `zonemedic admission manifest --config FILE` (the one in deploy/ is its output
for deploy/base/config.yaml; a test keeps them equal), and the composition root (the
configuration's and the webhook's names, for the caBundle patch). Pure: settings in, a manifest
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
`admission.url`, at that URL. The caBundle is left out: cert-manager injects it (the annotation,
when `cert_file` is set: a mounted certificate) or the agent patches its own in at start-up.
"""

from __future__ import annotations

from typing import Any

from agent.model.workload import BATCH_JOB, DEPLOYMENT, WORKLOADS
from agent.settings import ADMISSION_PATH, Settings

API_VERSION = "admissionregistration.k8s.io/v1"
KIND = "MutatingWebhookConfiguration"
ENABLED = "enabled"
DISABLED = "disabled"


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
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "webhooks": [{
            "name": admission.webhook_name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "timeoutSeconds": admission.timeout_seconds,
            "reinvocationPolicy": "IfNeeded",
            "matchPolicy": "Equivalent",
            "clientConfig": client,
            "namespaceSelector": {"matchLabels": {admission.namespace_label: ENABLED}},
            "objectSelector": {"matchExpressions": [
                {"key": admission.object_label, "operator": "NotIn", "values": [DISABLED]}]},
            "rules": rules(settings),
        }],
    }  # fmt: skip
