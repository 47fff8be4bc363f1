"""A setting's bounds, written in its annotation: `port: Annotated[int, Within(0, 65535)]`.

Who calls it: `agent.settings.sections` declares each key's range with it, and
`agent.settings.builder` checks a converted value against it (the problem names the key and the
bound, `http.port: must be at most 65535, got 70000`). Pure data: it parses nothing and raises
nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any


@dataclass(frozen=True)
class Within:
    """A setting's bounds, written in its annotation: `port: Annotated[int, Within(0, 65535)]`.

    Numbers and durations must lie in [low, high] (either side may be open with None); strings must
    be one of `choices`."""

    low: Any = None
    high: Any = None
    choices: tuple[str, ...] = ()

    def problem(self, value: Any) -> str | None:
        if self.choices:
            return None if value in self.choices else f"expected one of {', '.join(self.choices)}"
        if self.low is not None and value < self.low:
            return f"must be at least {_shown_bound(self.low)}"
        if self.high is not None and value > self.high:
            return f"must be at most {_shown_bound(self.high)}"
        return None


def _shown_bound(bound: Any) -> str:
    if isinstance(bound, timedelta):
        return f"{bound.total_seconds():g}s"
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


POSITIVE = Within(low=timedelta(milliseconds=1))
NOT_NEGATIVE = Within(low=0)
PORT = Within(0, 65535)  # 0: any free port (tests)
