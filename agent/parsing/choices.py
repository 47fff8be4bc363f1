"""One of an enum's values, from user input: a CLI flag, an HTTP query parameter, a slash command's
word.

Who calls it: the `incidents` command's `--status` and `--verdict`, the incidents HTTP API's
filters and the Slack slash command's `status=`. Each caller names the field (`--status`,
`status`); a value that is none of the enum's values raises `InputError` naming the field, the
value and every accepted value; an absent value (None) is None. What it does not do: know any
field's meaning or default, or guess a near miss.
"""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

from agent.errors import InputError

E = TypeVar("E", bound=Enum)


def parse_choice(enum: type[E], value: str | None, *, field: str) -> E | None:
    """The member of `enum` whose value is `value`; None for None."""
    if value is None:
        return None
    try:
        return enum(value)
    except ValueError:
        known = ", ".join(str(member.value) for member in enum)
        raise InputError(f"{field}: unknown value {value!r} (one of: {known})") from None
