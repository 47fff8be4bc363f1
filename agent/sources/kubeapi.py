"""Raw JSON access to the Kubernetes API through the official client's connection and auth.

Called by `agent.sources.kube` (discovery, list, watch streams) and `agent.runtime.leader` (Leases).
It builds the `ApiClient` from settings (kubeconfig/context, else in-cluster, else the default
kubeconfig), then sends requests with `ApiClient.param_serialize` + `call_api`, which return the
urllib3 response unread (`_preload_content=False` semantics): bodies are parsed with orjson, never
through the client's model classes (slow and large for 150,000 pods). Library errors are wrapped
into `KubeApiError` here. What it does not do: retry (callers own their backoff).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from agent.errors import ConfigError, UnavailableError
from agent.settings import KubernetesSettings

POOL_SIZE = 32


class KubeApiError(UnavailableError):
    """A request failed: `status` 0 for network errors; `retry_after` from a 429/503 answer."""

    def __init__(
        self,
        status: int,
        reason: str,
        *,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"HTTP {status}: {reason}" if status else reason)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after
        self.body = body or {}


def build_api_client(settings: KubernetesSettings) -> Any:
    """An official `ApiClient`: explicit kubeconfig/context, else in-cluster, else ~/.kube/config."""
    import kubernetes
    from kubernetes.config.config_exception import ConfigException

    client: Any = kubernetes.client
    config: Any = kubernetes.config

    def configuration() -> Any:
        c = client.Configuration()
        c.connection_pool_maxsize = POOL_SIZE  # one long-lived watch per resource, plus requests
        return c

    try:
        if settings.kubeconfig or settings.context:
            return config.new_client_from_config(
                config_file=settings.kubeconfig,
                context=settings.context,
                persist_config=False,
                client_configuration=configuration(),
            )
        try:
            in_cluster = configuration()
            config.load_incluster_config(client_configuration=in_cluster)
            return client.ApiClient(in_cluster)
        except ConfigException:
            return config.new_client_from_config(
                persist_config=False, client_configuration=configuration()
            )
    except (ConfigException, OSError, ValueError) as exc:
        raise ConfigError(f"kubernetes: cannot load a cluster configuration: {exc}") from exc


def _retry_after(headers: Any) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _drain(response: Any) -> bytes:
    """The whole body of an urllib3 response, its connection handed back to the pool; a broken
    transfer is a `KubeApiError` (status 0)."""
    from urllib3.exceptions import HTTPError

    try:
        data: bytes = response.read()
    except (HTTPError, OSError) as exc:
        raise KubeApiError(0, f"{type(exc).__name__}: {exc}") from exc
    finally:
        response.release_conn()
    return data


@dataclass
class KubeApi:
    """One ApiClient; thread-safe as urllib3's pool is."""

    api_client: Any

    def open(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        timeout: float | tuple[float, float] | None = None,
    ) -> Any:
        """Send a request and return the unread urllib3 response of a 2xx answer."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            params = self.api_client.param_serialize(
                method=method,
                resource_path=path,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
            )
            rest = self.api_client.call_api(*params, _request_timeout=timeout)
        except ApiException as exc:
            raise KubeApiError(exc.status or 0, str(exc.reason)) from exc
        except (HTTPError, OSError) as exc:
            raise KubeApiError(0, f"{type(exc).__name__}: {exc}") from exc
        response = rest.response
        if 200 <= response.status < 300:
            return response
        try:
            data = _drain(response)
        except KubeApiError:
            data = b""
        try:
            status_body = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError:
            status_body = {}
        if not isinstance(status_body, dict):
            status_body = {}
        reason = str(status_body.get("message") or response.reason or "")
        raise KubeApiError(
            response.status,
            reason,
            retry_after=_retry_after(response.headers),
            body=status_body,
        )

    def json(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        timeout: float | tuple[float, float] | None = None,
    ) -> Any:
        data = _drain(self.open(method, path, query=query, body=body, timeout=timeout))
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise KubeApiError(0, f"invalid JSON from {path}: {exc}") from exc


def iter_lines(response: Any, *, chunk_size: int = 65536) -> Iterator[bytes]:
    """Split a streamed (chunked) response into newline-terminated lines."""
    buffer = b""
    for chunk in response.stream(chunk_size, decode_content=True):
        buffer += chunk
        while True:
            newline = buffer.find(b"\n")
            if newline < 0:
                break
            line, buffer = buffer[:newline], buffer[newline + 1 :]
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer
