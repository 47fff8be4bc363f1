"""Logs: JSON lines (extras merged, exceptions included) and text lines for people."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from agent.runtime.logging import (
    NOISY_LIBRARIES,
    LogFormat,
    TextFormatter,
    configure_logging,
    verbosity_level,
)


@pytest.fixture(autouse=True)
def _restore_levels() -> Iterator[None]:
    """configure_logging sets process-wide levels: put them back for the tests after these."""
    names = ["", *NOISY_LIBRARIES]
    saved = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def test_json_lines_with_extras_and_exceptions() -> None:
    stream = io.StringIO()
    handler = configure_logging("info", stream)
    try:
        log = logging.getLogger("agent.test")
        log.info("watching %s", "pods", extra={"resources": ["pods"], "count": 3})
        log.debug("hidden")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed", extra={"job": "ml/resnet"})
        lines = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logging.getLogger().removeHandler(handler)
    assert [line["message"] for line in lines] == ["watching pods", "failed"]
    assert lines[0]["resources"] == ["pods"] and lines[0]["count"] == 3
    assert lines[0]["level"] == "info" and lines[0]["logger"] == "agent.test"
    assert lines[0]["time"].endswith("+00:00")
    assert "ValueError: boom" in lines[1]["exception"]
    assert lines[1]["job"] == "ml/resnet"


def _record(level: int, message: str, *, exc: BaseException | None = None,
            **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("agent.test", level, __file__, 1, message, None,
                               (type(exc), exc, exc.__traceback__) if exc else None)
    record.created = 1_790_000_000.0  # 2026-09-21 14:13:20 UTC
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def _boom() -> ValueError:
    try:
        raise ValueError("boom")
    except ValueError as exc:
        return exc


@pytest.mark.parametrize(
    ("formatter", "record", "expected"),
    [
        (TextFormatter(), _record(logging.WARNING, "caches not synced"),
         "zonemedic: warning: caches not synced"),
        (TextFormatter(), _record(logging.INFO, "watching", resources=["pods", "nodes"], retry_in=0.15994),
         "zonemedic: info: watching (resources=pods,nodes, retry_in=0.16)"),
        (TextFormatter(timestamps=True), _record(logging.ERROR, "sweep failed"),
         "2026-09-21 14:13:20Z error   sweep failed"),
        (TextFormatter(), _record(logging.ERROR, "failed", exc=_boom()),
         "zonemedic: error: failed: ValueError: boom"),
        # outside text in a line a person reads: one line, no sequence the terminal obeys
        (TextFormatter(), _record(logging.WARNING, "slack request refused",
                                  user="U9\nzonemedic: info: approved\x1b[2J", detail="a\rb"),
         "zonemedic: warning: slack request refused "
         "(user=U9\\nzonemedic: info: approved\\x1b[2J, detail=a\\rb)"),
        (TextFormatter(timestamps=True), _record(logging.ERROR, "cannot read \x1b]0;x\x07"),
         "2026-09-21 14:13:20Z error   cannot read \\x1b]0;x\\x07"),
    ],
)
def test_text_lines_for_people(formatter: TextFormatter, record: logging.LogRecord, expected: str) -> None:
    assert formatter.format(record) == expected


def test_text_shows_the_traceback_only_at_debug() -> None:
    stream = io.StringIO()
    handler = configure_logging("debug", stream, fmt=LogFormat.TEXT, timestamps=False)
    try:
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("agent.test").exception("failed")
    finally:
        logging.getLogger().removeHandler(handler)
    text = stream.getvalue()
    assert text.startswith("zonemedic: error: failed\nTraceback (most recent call last):")
    assert "ValueError: boom" in text


@pytest.mark.parametrize(("verbose", "level"), [(0, "warning"), (1, "info"), (2, "debug"), (5, "debug")])
def test_verbosity_levels(verbose: int, level: str) -> None:
    assert verbosity_level(verbose) == level


@pytest.mark.parametrize(
    ("fmt", "level", "urllib3"),
    [
        (LogFormat.TEXT, "warning", logging.ERROR),  # a person sees our warning, not its retries
        (LogFormat.JSON, "info", logging.WARNING),
        (LogFormat.TEXT, "debug", logging.DEBUG),
    ],
)
def test_library_chatter_is_quiet_for_people(fmt: LogFormat, level: str, urllib3: int) -> None:
    handler = configure_logging(level, io.StringIO(), fmt=fmt)
    try:
        assert logging.getLogger("urllib3").level == urllib3
    finally:
        logging.getLogger().removeHandler(handler)
