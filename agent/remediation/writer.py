"""The cluster writer: every write zonemedic makes to a cluster, and the only module that makes one.

Who calls it: the remediation run's steps (`agent.remediation.training_steps` for a Kubeflow
job's suspend, resume and restore patches; `agent.remediation.jobset_steps` for a TrainJob's or a
JobSet's suspend, override or template patch, resume and restore, and the child Jobs a rollback
recreates; `agent.remediation.kueue_steps` for a Kueue Workload's `spec.active` patches and
delete and a Kueue job's template annotations; `agent.remediation.group_steps` for a group's
Deployment patches and batch Job delete and create), and the admission webhook's start-up (the
caBundle of its own MutatingWebhookConfiguration, when the agent made its serving certificate:
`patch_webhook_ca_bundle`), built by `agent.remediation.remediator.Remediator` over the
agent's API client. What it does: sends JSON merge patches (`application/merge-patch+json` set
explicitly) through the official `kubernetes` client, with the field manager `zonemedic`, each
write optionally as a server-side dry run (`dryRun=All`) and each checked against the run's
`Fence` right before it is sent; wraps `ApiException` into `ClusterWriteError` (a 4xx) or
`WriteConflictError` (409), network failures and 5xx into `KubeApiError` (an UnavailableError).
It also binds a patch to the live object it was planned from (`fenced_patch`: its uid and, when
locked, its resourceVersion).

What it does not do: read the cluster (`agent.remediation.observe`), decide what to write (the
plan and the steps), or record anything.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from agent.errors import ClusterWriteError, WriteConflictError
from agent.model.workload import BATCH_JOB, DEPLOYMENT
from agent.remediation.fence import Fence
from agent.remediation.plan import Target
from agent.sources.kubeapi import KubeApiError

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
WEBHOOK_CONFIGURATION = "MutatingWebhookConfiguration"
FIELD_MANAGER = "zonemedic"


def uid_of(obj: Mapping[str, Any] | None) -> str | None:
    return None if obj is None else (obj.get("metadata") or {}).get("uid")


def resource_version_of(obj: Mapping[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


def fenced_patch(patch: Mapping[str, Any], obj: Mapping[str, Any], *, locked: bool) -> dict[str, Any]:
    """`patch` bound to the live object `obj`: its uid (a 409 if the name now holds another
    object) and, when `locked`, the resourceVersion read (a 409 if it changed since)."""
    out = copy.deepcopy(dict(patch))
    meta: dict[str, Any] = {"uid": uid_of(obj)}
    if locked:
        meta["resourceVersion"] = resource_version_of(obj)
    out["metadata"] = {**(out.get("metadata") or {}), **meta}
    return out


def _server_message(exc: Any) -> str:
    import orjson

    body = getattr(exc, "body", None)
    if body:
        try:
            data = orjson.loads(body)
        except (orjson.JSONDecodeError, TypeError):
            data = None
        if isinstance(data, dict) and data.get("message"):
            return str(data["message"])
    return str(getattr(exc, "reason", "") or exc)


class WriteVerb(StrEnum):
    PATCH = "patch"
    DELETE = "delete"
    CREATE = "create"


@dataclass(frozen=True)
class Write:
    """One write the server answered with success (what a `WriteObserver` is told)."""

    verb: WriteVerb
    kind: str
    namespace: str
    name: str
    dry_run: bool


WriteObserver = Callable[[Write], None]


class ClusterWriter:
    """Every write zonemedic makes to a cluster: merge patches of Kubeflow jobs and Deployments,
    batch Job delete and create. Each takes `dry_run` (server-side, `dryRun=All`) and the run's
    `fence`, checked right before the request is sent (`FenceClosedError`: nothing sent).
    `observer` hears each write the server accepted, right after its answer."""

    def __init__(
        self, api_client: Any, *, timeout: float = 10.0, observer: WriteObserver | None = None
    ) -> None:
        from kubernetes import client

        self._api_client = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self._apps = client.AppsV1Api(api_client)
        self._batch = client.BatchV1Api(api_client)
        self._admission = client.AdmissionregistrationV1Api(api_client)
        self._timeout = timeout
        self._observer = observer

    def _call(self, write: Write, fence: Fence, fn: Callable[[], Any]) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        what = f"{write.verb.value} {write.kind} {write.namespace}/{write.name}"
        fence.check(what)
        try:
            answer = fn()
        except ApiException as exc:
            status = int(exc.status or 0)
            message = _server_message(exc)
            if status == 409:
                raise WriteConflictError(status, message) from exc
            if 400 <= status < 500:
                raise ClusterWriteError(status, message) from exc
            raise KubeApiError(status, f"{what}: {message}") from exc
        except (HTTPError, OSError) as exc:
            raise KubeApiError(0, f"{what}: {type(exc).__name__}: {exc}") from exc
        if self._observer is not None:
            self._observer(write)
        return answer

    def _dry(self, dry_run: bool) -> dict[str, Any]:
        return {"dry_run": "All"} if dry_run else {}

    def patch_custom(
        self, target: Target, patch: Mapping[str, Any], *, fence: Fence, dry_run: bool = False
    ) -> Any:
        return self._call(
            Write(WriteVerb.PATCH, target.kind, target.namespace, target.name, dry_run), fence,
            lambda: self._custom.patch_namespaced_custom_object(
                target.group, target.version, target.namespace, target.plural, target.name,
                dict(patch), field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH,
                _request_timeout=self._timeout, **self._dry(dry_run),
            ),
        )  # fmt: skip

    def delete_custom(
        self, target: Target, *, fence: Fence, dry_run: bool = False
    ) -> None:
        """Delete a namespaced custom object (a Kueue Workload) only if it is the object
        `target.uid` (409 otherwise); gone is fine."""
        from kubernetes import client

        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=target.uid),
            dry_run=["All"] if dry_run else None,
        )
        try:
            self._call(
                Write(WriteVerb.DELETE, target.kind, target.namespace, target.name, dry_run), fence,
                lambda: self._custom.delete_namespaced_custom_object(
                    target.group, target.version, target.namespace, target.plural, target.name,
                    body=options, _request_timeout=self._timeout, **self._dry(dry_run),
                ),
            )  # fmt: skip
        except ClusterWriteError as exc:
            if exc.status != 404:
                raise

    def patch_deployment(
        self, namespace: str, name: str, patch: Mapping[str, Any], *, fence: Fence,
        dry_run: bool = False,
    ) -> Any:  # fmt: skip
        return self._call(
            Write(WriteVerb.PATCH, DEPLOYMENT.kind, namespace, name, dry_run), fence,
            lambda: self._apps.patch_namespaced_deployment(
                name, namespace, dict(patch), field_manager=FIELD_MANAGER,
                _content_type=MERGE_PATCH, _request_timeout=self._timeout, **self._dry(dry_run),
            ),
        )  # fmt: skip

    def delete_job(
        self, namespace: str, name: str, *, uid: str | None, resource_version: str | None,
        fence: Fence, dry_run: bool = False,
    ) -> None:  # fmt: skip
        """Delete a batch Job with Foreground propagation (its pods go first), only if it is the
        object `uid` at `resource_version` (409 otherwise); gone is fine."""
        from kubernetes import client

        options = client.V1DeleteOptions(
            propagation_policy="Foreground",
            preconditions=client.V1Preconditions(uid=uid, resource_version=resource_version),
            dry_run=["All"] if dry_run else None,
        )
        try:
            self._call(
                Write(WriteVerb.DELETE, BATCH_JOB.kind, namespace, name, dry_run), fence,
                lambda: self._batch.delete_namespaced_job(
                    name, namespace, body=options, _request_timeout=self._timeout,
                    **self._dry(dry_run),
                ),
            )  # fmt: skip
        except ClusterWriteError as exc:
            if exc.status != 404:
                raise

    def create_job(
        self, namespace: str, manifest: Mapping[str, Any], *, fence: Fence, dry_run: bool = False
    ) -> Any:
        name = str((manifest.get("metadata") or {}).get("name"))
        return self._call(
            Write(WriteVerb.CREATE, BATCH_JOB.kind, namespace, name, dry_run), fence,
            lambda: self._batch.create_namespaced_job(
                namespace, cast(Any, dict(manifest)), field_manager=FIELD_MANAGER,
                _request_timeout=self._timeout, **self._dry(dry_run),
            ),
        )  # fmt: skip

    def patch_webhook_ca_bundle(
        self, name: str, *, webhooks: Sequence[str], ca_bundle: str, fence: Fence
    ) -> Any:
        """Set the caBundle (base64 PEM) of the webhooks `webhooks`, the configuration's first
        ones in that order, in the MutatingWebhookConfiguration `name`: a JSON patch that tests
        each webhook's name first (a configuration whose webhooks are others is refused, 422)."""
        patch: list[dict[str, str]] = []
        for index, webhook in enumerate(webhooks):
            patch += [
                {"op": "test", "path": f"/webhooks/{index}/name", "value": webhook},
                {"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": ca_bundle},
            ]
        return self._call(
            Write(WriteVerb.PATCH, WEBHOOK_CONFIGURATION, "", name, False), fence,
            lambda: self._admission.patch_mutating_webhook_configuration(
                name, patch, field_manager=FIELD_MANAGER, _content_type=JSON_PATCH,
                _request_timeout=self._timeout,
            ),
        )  # fmt: skip
