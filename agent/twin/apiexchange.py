"""One HTTP request and its answer, as the twin's verb and watch modules see it.

`Exchange` is the narrow interface the HTTP handler (apihandler.py) gives to the modules that
serve resources (apiverbs.py) and watches (apiwatch.py): the request's headers and decoded body,
and the ways to answer (a whole JSON body, or a chunked stream). It holds no logic of its own.
"""

from __future__ import annotations

from typing import Any, Protocol


class Exchange(Protocol):
    def header(self, name: str) -> str:
        """A request header ("" when absent)."""
        ...

    def json_body(self) -> Any:
        """The request body decoded as JSON (None when empty; 400 when not JSON)."""
        ...

    def object_body(self) -> Any:
        """The request body as a JSON value: decoded from JSON, or from Kubernetes protobuf when
        the Content-Type says so (415 for a kind the twin cannot decode)."""
        ...

    def yaml_body(self) -> Any:
        """The request body decoded as YAML (an apply patch)."""
        ...

    def review_body(self) -> dict[str, Any]:
        """A SelfSubjectAccessReview body, JSON or Kubernetes protobuf."""
        ...

    def send(
        self,
        code: int,
        body: bytes,
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None: ...

    def send_json(self, code: int, obj: Any) -> None: ...

    def start_stream(self, *, content_type: str = "application/json") -> None:
        """Send a 200 with chunked transfer encoding; then `chunk` each piece, then `end_stream`."""
        ...

    def chunk(self, data: bytes) -> None: ...

    def end_stream(self) -> None: ...

    def client_gone(self) -> bool:
        """Whether the client closed the connection (checked while a stream has nothing to send)."""
        ...

    def drop_connection(self) -> None:
        """The client went away: close this connection after the current request."""
        ...
