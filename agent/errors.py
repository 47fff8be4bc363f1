"""The error types zonemedic owns. Adapters wrap library errors into these at their edge.

`InputError` (and its subclasses) means the user gave something wrong: the CLI prints its message on
one line and exits 2. Anything else reaching the top level is a bug or an outage.
"""

from __future__ import annotations


class ZonemedicError(Exception):
    """Base of every error zonemedic raises on purpose."""


class InputError(ZonemedicError):
    """Bad input from a user: a file, a flag, a config key. Exit status 2; nothing was changed."""


class ConfigError(InputError):
    """A configuration file or environment override is invalid; the message names the key.

    It may carry several problems (one per bad key, in file order): `problems` lists them and the
    message joins them with "; " so it stays one line."""

    def __init__(self, *problems: str) -> None:
        super().__init__("; ".join(problems))
        self.problems: tuple[str, ...] = problems


class SnapshotError(InputError):
    """A cluster snapshot file is malformed; the message names the file and the item index."""


class PolicyError(InputError):
    """A network policy cannot be understood (bad selector, unknown operator, wrong type)."""


class ExplainError(InputError):
    """An explain query is malformed or names what the cluster does not hold (a pod, a
    namespace); the message names the bad part in one line."""


class WhatIfError(InputError):
    """A what-if change names an object the cluster does not hold, or a kind it cannot delete."""


class PolicyFixError(InputError):
    """No allow policy can admit a job's denied flows (a deny rule, an L7 proxy, no Cilium);
    the message says which."""


class UnavailableError(ZonemedicError):
    """A dependency (database, Kubernetes API, Prometheus, Slack) cannot be reached right now."""


class ClusterWriteError(ZonemedicError):
    """The Kubernetes API refused a write (4xx): `status` and the server's own message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class WriteConflictError(ClusterWriteError):
    """409 Conflict: the object changed since it was read (optimistic lock) or already exists."""
