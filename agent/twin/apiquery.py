"""Query parameters of one twin API request, read the way the real API server reads them.

The last value of a repeated parameter wins; `flag` accepts 1/true/yes; `integer` answers 400
naming the parameter when the value is not an integer. Used by the HTTP layer's verb and watch
modules (apiverbs.py, apiwatch.py); it does not know what the parameters mean.
"""

from __future__ import annotations

from agent.twin.apierror import bad_request


class Query:
    """A parsed query string (`urllib.parse.parse_qs` with blank values kept)."""

    def __init__(self, raw: dict[str, list[str]]) -> None:
        self._raw = raw

    def all(self, name: str) -> list[str]:
        return list(self._raw.get(name, []))

    def one(self, name: str) -> str | None:
        values = self._raw.get(name)
        return values[-1] if values else None

    def flag(self, name: str) -> bool:
        return (self.one(name) or "").lower() in ("1", "true", "yes")

    def integer(self, name: str) -> int | None:
        raw = self.one(name)
        if raw is None or raw == "":
            return None
        try:
            return int(raw)
        except ValueError as exc:
            raise bad_request(f"{name}: invalid value {raw!r}: must be an integer") from exc
