"""The Slack app manifest asks for exactly the scopes of the Web API methods the agent calls, and
routes interactivity and the slash command to the endpoint the agent serves."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from agent.chatops.slack import COMMAND, EVENTS_PATH

REPO = Path(__file__).resolve().parents[2]
SCOPE_OF = {
    "chat_postMessage": "chat:write",
    "chat_update": "chat:write",
    "chat_postEphemeral": "chat:write",
    "files_upload_v2": "files:write",
    "users_info": "users:read",
    "usergroups_users_list": "usergroups:read",
}


def called_methods() -> set[str]:
    methods: set[str] = set()
    for path in (REPO / "agent" / "chatops").glob("*.py"):
        methods |= set(re.findall(r"\bclient\.([a-z]+_[A-Za-z0-9_]+)\(", path.read_text()))
    return methods


def test_scopes_are_exactly_those_of_the_methods_called() -> None:
    manifest = yaml.safe_load((REPO / "deploy" / "slack-app.yaml").read_text())
    methods = called_methods()
    assert methods, "the scan found the adapter's calls"
    unknown = methods - set(SCOPE_OF)
    assert not unknown, f"add the scope of {unknown} to SCOPE_OF and the manifest"
    needed = {SCOPE_OF[m] for m in methods} | {"commands"}
    assert set(manifest["oauth_config"]["scopes"]["bot"]) == needed
    assert "event_subscriptions" not in manifest.get("settings", {})


def test_endpoints_match_the_agent() -> None:
    manifest = yaml.safe_load((REPO / "deploy" / "slack-app.yaml").read_text())
    (command,) = manifest["features"]["slash_commands"]
    assert command["command"] == COMMAND
    assert command["url"].endswith(EVENTS_PATH)
    assert manifest["settings"]["interactivity"]["request_url"].endswith(EVENTS_PATH)
