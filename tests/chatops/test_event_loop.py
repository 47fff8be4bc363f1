"""No blocking call on the HTTP server's event loop: with the fake Slack hanging `auth.test`
(the workspace id is looked up on the first signed request when Slack was away at start-up),
a signed click waits on a worker thread while `/healthz`, `/readyz` and `/metrics` answer at
once, and a second click is refused at once instead of queueing behind the first."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from agent.chatops.blocks import ButtonAction
from agent.chatops.slack import EVENTS_PATH
from agent.fakes.slack import AgentResponse, FakeSlack
from agent.runtime.http import build_app
from agent.runtime.metrics import AgentMetrics
from agent.runtime.server import HttpServer
from tests.chatops.harness import start_rig
from tests.support.waiting import wait

APPROVE = ButtonAction.APPROVE.value


def _timed(client: httpx.Client, path: str) -> float:
    started = time.perf_counter()
    answer = client.get(path)
    assert answer.status_code == 200, (path, answer.text)
    return time.perf_counter() - started


def test_a_hanging_auth_test_blocks_no_route(slack: FakeSlack, sqlite_template: Any,
                                             tmp_path: Path) -> None:
    slack.fail(status=500, seconds=60, methods=["auth.test"])  # Slack away at start-up
    rig = start_rig(slack, sqlite_template, tmp_path, serve=False)
    assert rig.chat.handlers is not None and rig.chat.handlers.workspace is not None
    rig.chat.handlers.workspace.retry = 0.0  # ask again on the next request
    slack.heal()
    slack.hang(["auth.test"])
    app = build_app(metrics=AgentMetrics(), readiness=lambda: {"database": True},
                    extra_routes=rig.chat.routes)
    server = HttpServer(app, host="127.0.0.1", port=0).start()
    answers: list[AgentResponse] = []
    incident = rig.open_incident()
    click = threading.Thread(target=lambda: answers.append(slack.click(
        server.url + EVENTS_PATH, user="U1", action_id=APPROVE, value=str(incident))))
    try:
        click.start()
        wait(lambda: slack.hanging == 1, timeout=10, what="the click waiting on auth.test")
        with httpx.Client(base_url=server.url, timeout=5) as client:
            times = [_timed(client, path) for _ in range(5)
                     for path in ("/healthz", "/readyz", "/metrics")]
            # the event loop used to wait for auth.test: every route froze for the client's
            # 10 s timeout (here: until release)
            assert statistics.median(times) < 0.1 and max(times) < 1.0, times
            second = slack.click(server.url + EVENTS_PATH, user="U1", action_id=APPROVE,
                                 value=str(incident))
            assert second.status == 403 and second.seconds < 1.0
            assert b"not known yet" in second.body
            assert slack.hanging == 1  # one auth.test at a time
        assert not answers  # the first click still waits
    finally:
        slack.release()
        click.join(15)
        server.stop()
        rig.stop()
    (first,) = answers
    assert first.status == 200  # auth.test answered our team: the click went on
