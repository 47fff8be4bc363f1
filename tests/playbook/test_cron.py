"""Cron validation and normalisation (crontab weekdays -> names APScheduler cannot misread)."""

from __future__ import annotations

import pytest

from agent.playbook.cron import CronError, CronSpec, parse_cron


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0 8 * * 1-5", CronSpec("0", "8", "*", "*", "mon,tue,wed,thu,fri")),
        ("*/15 * * * *", CronSpec("*/15", "*", "*", "*", "*")),
        ("0 0 * * 0", CronSpec("0", "0", "*", "*", "sun")),
        ("0 0 * * 7", CronSpec("0", "0", "*", "*", "sun")),
        ("0 0 * * sat,sun", CronSpec("0", "0", "*", "*", "sun,sat")),
        ("0 0 1 JAN *", CronSpec("0", "0", "1", "jan", "*")),
        ("@daily", CronSpec("0", "0", "*", "*", "*")),
        ("@weekly", CronSpec("0", "0", "*", "*", "sun")),
        ("5,35 9-17/2 1-15 * */2", CronSpec("5,35", "9-17/2", "1-15", "*", "sun,tue,thu,sat")),
    ],
)
def test_parse_cron(expr: str, expected: CronSpec) -> None:
    assert parse_cron(expr) == expected


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("* * * *", "expected 5 fields"),
        ("60 * * * *", "minute: 60 is outside 0-59"),
        ("* * 0 * *", "day of month: 0 is outside 1-31"),
        ("* * * 13 *", "month: 13 is outside 1-12"),
        ("* * * * 8", "day of week: 8 is outside 0-7"),
        ("*/0 * * * *", "minute: bad step"),
        ("5-1 * * * *", "minute: range '5-1' runs backwards"),
        ("a * * * *", "minute: 'a' is not a number"),
        ("1,,2 * * * *", "minute: empty list item"),
    ],
)
def test_parse_cron_rejects(expr: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        parse_cron(expr)
