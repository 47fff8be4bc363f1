"""The credentials of `POST /alertmanager`: what Alertmanager's `http_config` sends, checked.

Who calls it: the composition of the agent (`agent.runtime.app`) reads them once at start-up
(`WebhookCredentials.of`, from the files `alertmanager.bearer_token_file` and
`alertmanager.basic_auth.password_file` name); the HTTP app (`agent.runtime.http`) asks
`allows(headers)` before it reads a webhook body. A bearer token (`Authorization: Bearer T`,
Alertmanager's `authorization: {credentials_file: ...}`) or basic auth (`Authorization: Basic
base64(user:password)`, Alertmanager's `basic_auth`) is accepted, either one when both are
configured; every comparison is constant-time (`hmac.compare_digest`), the user name and the
password both compared whatever the first gave. A refusal is answered 401 with the challenges
(`challenge`) in `WWW-Authenticate`.

`open_warning` is the one line that says the webhook takes alerts from anyone, for `config
check` and the agent's start-up log. What it does not do: rate-limit, or read the files again
(a rotated secret is read at the next start).
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field

from agent.settings import AlertmanagerSettings, read_secret_file

OPEN_WARNING = (
    "the Alertmanager webhook POST /alertmanager is open: anyone who reaches the HTTP port can "
    "open incidents, post to the team's channel and resolve alert incidents; set "
    "alertmanager.bearer_token_file or alertmanager.basic_auth (the credentials Alertmanager's "
    "http_config sends)"
)
REALM = "zonemedic"


def open_warning(settings: AlertmanagerSettings) -> str | None:
    """The warning for a webhook without credentials, or None when credentials are configured."""
    return OPEN_WARNING if settings.open else None


@dataclass(frozen=True)
class WebhookCredentials:
    """The secrets a webhook request must carry one of (as bytes, for constant-time checks)."""

    bearer: bytes | None = field(default=None, repr=False)
    username: bytes | None = None
    password: bytes | None = field(default=None, repr=False)

    @classmethod
    def of(cls, settings: AlertmanagerSettings) -> WebhookCredentials | None:
        """The configured credentials (None: the webhook is open); `ConfigError` naming the key
        when a secret file cannot be read or is empty."""
        if settings.open:
            return None
        bearer = (read_secret_file(settings.bearer_token_file,
                                   key="alertmanager.bearer_token_file").encode()
                  if settings.bearer_token_file else None)
        basic = settings.basic_auth
        password = (read_secret_file(basic.password_file,
                                     key="alertmanager.basic_auth.password_file").encode()
                    if basic is not None else None)
        return cls(bearer=bearer, username=basic.username.encode() if basic else None,
                   password=password)

    @property
    def challenge(self) -> str:
        """The `WWW-Authenticate` value of a refusal: the schemes this agent accepts."""
        schemes = []
        if self.bearer is not None:
            schemes.append(f'Bearer realm="{REALM}"')
        if self.password is not None:
            schemes.append(f'Basic realm="{REALM}", charset="UTF-8"')
        return ", ".join(schemes)

    def allows(self, headers: Mapping[str, str]) -> bool:
        """True when the `Authorization` header carries one of the configured credentials."""
        scheme, _, value = headers.get("authorization", "").strip().partition(" ")
        value = value.strip()
        scheme = scheme.lower()
        if scheme == "bearer" and self.bearer is not None:
            return hmac.compare_digest(value.encode(), self.bearer)
        if scheme == "basic" and self.password is not None and self.username is not None:
            try:
                decoded = base64.b64decode(value.encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError):
                return False
            user, sep, password = decoded.partition(b":")
            same_user = hmac.compare_digest(user, self.username)
            same_password = hmac.compare_digest(password, self.password)
            return bool(sep) and same_user and same_password
        return False
