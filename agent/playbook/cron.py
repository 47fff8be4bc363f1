"""Five-field cron expressions (crontab syntax, UTC): validation and normalisation.

Called by `agent.playbook.schema` (a bad schedule is a playbook error naming the field) and by
`agent.runtime.scheduler`, which hands the normalised fields to APScheduler. Normalisation matters:
APScheduler numbers weekdays from Monday = 0 while crontab uses Sunday = 0, so the day-of-week field
is expanded here into explicit names (`mon,tue`). Pure: no scheduler, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.errors import InputError
from agent.parsing.numbers import NumberError, parse_int

_ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
# the longest each month can be (February in a leap year): the day-of-month field must fit one
_MONTH_DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}
# (name, low, high, names mapped to numbers)
_FIELDS: list[tuple[str, int, int, dict[str, int]]] = [
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, {m: i + 1 for i, m in enumerate(_MONTHS)}),
    ("day of week", 0, 7, {d: i for i, d in enumerate(_DAYS)}),
]


class CronError(InputError):
    """A cron expression is malformed; the message names the field."""


@dataclass(frozen=True)
class CronSpec:
    """Fields ready for APScheduler's CronTrigger (day_of_week as names or `*`)."""

    minute: str
    hour: str
    day: str
    month: str
    day_of_week: str


def _value(token: str, field: tuple[str, int, int, dict[str, int]]) -> int:
    name, low, high, names = field
    lowered = token.lower()
    if lowered in names:
        return names[lowered]
    try:
        return parse_int(token, field=name, minimum=low, maximum=high)
    except NumberError as exc:
        raise CronError(str(exc)) from None


def _expand(part: str, field: tuple[str, int, int, dict[str, int]]) -> set[int]:
    name, low, high, _ = field
    values: set[int] = set()
    for item in part.split(","):
        if not item:
            raise CronError(f"{name}: empty list item in {part!r}")
        base, _, step_text = item.partition("/")
        step = 1
        if step_text:
            try:
                step = parse_int(step_text, field=f"{name} step", minimum=1, maximum=high)
            except NumberError as exc:
                raise CronError(str(exc)) from None
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = _value(first, field), _value(last, field)
            if start > end:
                raise CronError(f"{name}: range {base!r} runs backwards")
        else:
            start = _value(base, field)
            end = high if step_text else start
        values.update(range(start, end + 1, step))
    return values


def parse_cron(expr: str) -> CronSpec:
    """Validate a crontab expression (or @daily-style alias) and normalise it for APScheduler."""
    text = _ALIASES.get(expr.strip().lower(), expr.strip())
    parts = text.split()
    if len(parts) != 5:
        raise CronError(f"expected 5 fields (minute hour day month weekday), got {len(parts)}")
    expanded = [_expand(part, field) for part, field in zip(parts, _FIELDS, strict=True)]
    month_days, months = expanded[2], expanded[3]
    if not any(day <= _MONTH_DAYS[month] for month in months for day in month_days):
        raise CronError(
            f"day of month {parts[2]!r} never occurs in month {parts[3]!r}: the schedule never fires"
        )
    dow = parts[4]
    if dow == "*":
        day_of_week = "*"
    else:
        days = sorted({d % 7 for d in _expand(dow, _FIELDS[4])})
        day_of_week = ",".join(_DAYS[d] for d in days)
    return CronSpec(parts[0], parts[1], parts[2], parts[3].lower(), day_of_week)
