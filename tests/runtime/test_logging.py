"""Structured JSON logs: one object per line, extras merged, exceptions included."""

from __future__ import annotations

import io
import logging

import orjson

from agent.runtime.logging import configure_logging


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
