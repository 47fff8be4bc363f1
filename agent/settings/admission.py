"""The `admission:` section: the agent's mutating admission webhook (admission-time prevention).

Who calls it: `agent.settings.sections.Settings` holds it; `agent.settings.builder` builds it from
the file (every key checked, as for every other section: `zonemedic config check`); the webhook's
server and decisions (`agent.admission`), the `zonemedic admission manifest` command and the
composition root read it. What it does not do: read the certificate files, serve anything, or
decide anything (it is data and the rules across its keys).

Keys: `enabled` (serve the webhook), `host`/`port` (where its HTTPS server listens: another port
than the HTTP API's), `cert_file`/`key_file` (the serving certificate, PEM: a mounted Secret, e.g.
cert-manager's; both or neither: without them the agent makes its own at start-up and patches
the CA into its own MutatingWebhookConfiguration), `mode` (`enforce`: the patch is returned;
`warn`: warnings only, no patch). The rest says what `zonemedic admission manifest` prints: the
configuration's and the webhook's names, the Service it is reached through (or `url`, a
`clientConfig.url`), the timeout, the opt-in namespace label and the opt-out object label, and
how often the certificate files are checked for a rotation; `group_memory`: how long a generic
group's first decision applies to the group's later objects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Annotated

from agent.errors import ConfigError
from agent.settings.bounds import PORT, Within

PATH = "/admission/mutate"  # the webhook's path on the admission port
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class AdmissionMode(StrEnum):
    """`admission.mode`: return the patch (`enforce`), or only say what it would do (`warn`)."""

    WARN = "warn"
    ENFORCE = "enforce"


@dataclass(frozen=True)
class AdmissionSettings:
    enabled: bool = False
    host: str = "0.0.0.0"
    port: Annotated[int, PORT] = 8443
    cert_file: str | None = None
    key_file: str | None = None
    mode: AdmissionMode = AdmissionMode.ENFORCE
    # the MutatingWebhookConfiguration (`zonemedic admission manifest`) and its one webhook
    configuration_name: str = "zonemedic"
    webhook_name: str = "placement.zonemedic.io"
    service_namespace: str = "zonemedic"
    service_name: str = "zonemedic"
    service_port: Annotated[int, Within(1, 65535)] = 443
    # a `clientConfig.url` instead of the Service reference (https://host:port/admission/mutate)
    url: str | None = None
    timeout_seconds: Annotated[int, Within(1, 30)] = 3
    # namespaces opt in with this label set to `enabled`; a job opts out with this label set to
    # `disabled` on its object
    namespace_label: str = "zonemedic.io/admission"
    object_label: str = "zonemedic.io/admission"
    # how often the certificate files are looked at (a rotated certificate is served without a
    # restart)
    cert_reload: Annotated[timedelta, Within(timedelta(seconds=1), timedelta(hours=24))] = (
        timedelta(seconds=30))
    # how long a generic group's first decision (its zone, kept in the store) applies to the
    # group's later objects
    group_memory: Annotated[timedelta, Within(timedelta(minutes=1), timedelta(days=7))] = (
        timedelta(hours=1))

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("admission.cert_file, admission.key_file: set both (a mounted "
                              "certificate and its key) or neither (the agent makes its own)")
        if self.url is not None and not self.url.startswith("https://"):
            raise ConfigError(f"admission.url: must start with https://, got {self.url!r}")
        for key, value in (("configuration_name", self.configuration_name),
                           ("service_namespace", self.service_namespace),
                           ("service_name", self.service_name)):  # fmt: skip
            if not _DNS_LABEL.match(value):
                raise ConfigError(f"admission.{key}: must be a DNS label (lower case letters, "
                                  f"digits, '-'), got {value!r}")  # fmt: skip
        if not _DNS_NAME.match(self.webhook_name) or self.webhook_name.count(".") < 2:
            raise ConfigError("admission.webhook_name: must be a DNS name of at least three "
                              f"segments (placement.zonemedic.io), got {self.webhook_name!r}")
        for key, value in (("namespace_label", self.namespace_label),
                           ("object_label", self.object_label)):  # fmt: skip
            if not _LABEL_KEY.match(value):
                raise ConfigError(f"admission.{key}: must be a label key, got {value!r}")

    @property
    def enforcing(self) -> bool:
        return self.mode is AdmissionMode.ENFORCE
