"""The fake Slack Web API: the real slack_sdk WebClient against it, failures on demand, signed
requests, and the proof that chat tests reach loopback addresses only."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier

from agent.fakes.slack import FakeSlack
from tests.support.loopback import LOOPBACK_ONLY


def client(fake: FakeSlack) -> WebClient:
    return WebClient(token=fake.bot_token, base_url=fake.base_url, timeout=5)


def test_post_update_replies_and_every_call_recorded(slack: FakeSlack) -> None:
    web = client(slack)
    assert web.auth_test()["user_id"] == slack.bot_user_id
    posted = web.chat_postMessage(channel="C1", text="hello", blocks=[{"type": "divider"}])
    ts = posted["ts"]
    web.chat_postMessage(channel="C1", text="in thread", thread_ts=ts)
    web.chat_update(channel="C1", ts=ts, text="changed", blocks=[])
    replies = web.conversations_replies(channel="C1", ts=ts)["messages"]
    assert [m["text"] for m in replies] == ["changed", "in thread"]
    assert [c.method for c in slack.calls()] == [
        "auth.test", "chat.postMessage", "chat.postMessage", "chat.update", "conversations.replies"
    ]
    assert slack.calls("chat.postMessage")[0].args["blocks"] == [{"type": "divider"}]


def test_users_groups_and_ephemeral(slack: FakeSlack) -> None:
    web = client(slack)
    assert web.users_info(user="U1")["user"]["name"] == "alice"
    assert web.usergroups_users_list(usergroup="S1")["users"] == ["U3"]
    with pytest.raises(SlackApiError):
        web.usergroups_users_list(usergroup="S404")
    web.chat_postEphemeral(channel="C1", user="U9", text="no")
    assert [m.text for m in slack.ephemeral("U9")] == ["no"]


def test_v2_upload_lands_in_the_thread(slack: FakeSlack) -> None:
    web = client(slack)
    ts = web.chat_postMessage(channel="C1", text="finding")["ts"]
    web.files_upload_v2(content=b"\x89PNG fake", filename="u.png", channel="C1", thread_ts=ts)
    assert [c.method for c in slack.calls()][-3:] == [
        "files.getUploadURLExternal", "upload", "files.completeUploadExternal"
    ]
    message = slack.message("C1", ts)
    assert message is not None and len(message.files) == 1
    assert slack.uploaded(message.files[0]) == b"\x89PNG fake"


def test_wrong_token_is_refused(slack: FakeSlack) -> None:
    web = WebClient(token="xoxb-wrong", base_url=slack.base_url)
    with pytest.raises(SlackApiError) as err:
        web.chat_postMessage(channel="C1", text="x")
    assert err.value.response["error"] == "invalid_auth"


@pytest.mark.parametrize("status", [429, 500])
def test_failures_on_demand_for_a_period(slack: FakeSlack, status: int) -> None:
    web = WebClient(token=slack.bot_token, base_url=slack.base_url, retry_handlers=[])
    slack.fail(status=status, seconds=0.3, methods=["chat.postMessage"], retry_after=7)
    with pytest.raises(SlackApiError) as err:
        web.chat_postMessage(channel="C1", text="x")
    assert err.value.response.status_code == status
    if status == 429:
        assert err.value.response.headers["Retry-After"] == "7"
    assert web.auth_test()["ok"]  # other methods unaffected
    slack.heal()
    assert web.chat_postMessage(channel="C1", text="x")["ok"]


def test_signed_requests_verify_with_slack_sdk(slack: FakeSlack) -> None:
    body = slack.action_body(user="U1", action_id="approve", value="42")
    headers = slack.signed_headers(body)
    verifier = SignatureVerifier(slack.signing_secret)
    assert verifier.is_valid_request(body, headers)
    assert not SignatureVerifier("other").is_valid_request(body, headers)


def test_every_address_reached_is_loopback(slack: FakeSlack, loopback_only: list[Any]) -> None:
    web = client(slack)
    web.chat_postMessage(channel="C1", text="x")
    assert web.base_url.startswith("http://127.0.0.1:")
    assert loopback_only, "the guard saw the connection"
    assert all(addr[0] in ("127.0.0.1", "::1") for addr in loopback_only)
    assert {c.host.rsplit(":", 1)[0] for c in slack.calls()} == {"127.0.0.1"}


def test_the_guard_refuses_other_addresses() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(OSError, match=LOOPBACK_ONLY):
            sock.connect(("192.0.2.1", 443))  # TEST-NET-1: never routed
    finally:
        sock.close()


def test_post_to_agent_refuses_non_loopback() -> None:
    with pytest.raises(ValueError, match="loopback"):
        FakeSlack.post("http://example.com/slack/events", b"", {})
