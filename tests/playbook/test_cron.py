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
        ("0 0 29 2 *", CronSpec("0", "0", "29", "2", "*")),  # leap years
        ("0 0 31 1-3 *", CronSpec("0", "0", "31", "1-3", "*")),  # January and March
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
        ("60 * * * *", "minute: must be from 0 to 59, got 60"),
        ("* * 0 * *", "day of month: must be from 1 to 31, got 0"),
        ("* * * 13 *", "month: must be from 1 to 12, got 13"),
        ("* * * * 8", "day of week: must be from 0 to 7, got 8"),
        ("*/0 * * * *", "minute step: must be from 1 to 59, got 0"),
        ("*/x * * * *", "minute step: expected a whole number"),
        ("5-1 * * * *", "minute: range '5-1' runs backwards"),
        ("a * * * *", "minute: expected a whole number from 0 to 59, got 'a'"),
        # non-ASCII digits are not numbers: "²".isdigit() and "٨".isdigit() are both True
        ("² * * * *", "minute: expected a whole number from 0 to 59, got '²'"),
        ("* ٨ * * *", "hour: expected a whole number from 0 to 23, got '٨'"),
        ("99999999999999999999999 * * * *", "minute: expected a whole number"),
        ("-1 * * * *", "minute: expected a whole number"),
        # schedules that can never fire
        ("0 0 31 2 *", "never occurs in month '2': the schedule never fires"),
        ("0 0 30,31 feb *", "never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("1,,2 * * * *", "minute: empty list item"),
    ],
)
def test_parse_cron_rejects(expr: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        parse_cron(expr)
