"""Delivery through the outbox: Slack rate limiting (429 with Retry-After) and failing (500)
delays messages, never loses them, and keeps their order per incident."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.fakes.slack import FakeSlack
from agent.model.lifecycle import EventKind, MessageKind, MessageStatus
from tests.chatops.harness import CHANNEL, ChatRig, now, start_rig

STEPS = ["dry_run", "suspend", "resume"]
WORDS = ["Dry run passed", "Job suspended", "Job resumed"]


def story(rig: ChatRig, incident: int) -> None:
    for step in STEPS:
        rig.store.add_event(incident, EventKind.REMEDIATION_STEP, now=now(), actor="zonemedic",
                            detail={"step": step, "succeeded": True})


def all_delivered(rig: ChatRig, incidents: list[int]) -> bool:
    for incident in incidents:
        messages = rig.store.get_incident(incident).messages
        if not messages or any(m.status is not MessageStatus.DELIVERED for m in messages):
            return False
    return True


@pytest.mark.parametrize("outage", [[429, 500], [500, 429]])
def test_outage_loses_nothing_and_keeps_order_per_incident(
    slack: FakeSlack, sqlite_template: Path, tmp_path: Path, outage: list[int]
) -> None:
    rig = start_rig(slack, sqlite_template, tmp_path, serve=False)
    try:
        incidents = [rig.open_incident(f"job{i}") for i in range(3)]
        for incident in incidents:
            story(rig, incident)
        slack.fail(status=outage[0], seconds=1.0, methods=["chat.postMessage", "chat.update"],
                   retry_after=1)
        rig.deliver_until(lambda: any(c.status == outage[0] for c in slack.calls()),
                          timeout=20)
        slack.fail(status=outage[1], seconds=2.5, methods=["chat.postMessage", "chat.update"],
                   retry_after=1)
        rig.deliver_until(lambda: all_delivered(rig, incidents), timeout=60)

        failures = [c for c in slack.calls() if c.status in (429, 500)]
        assert {c.status for c in failures} == set(outage), "both kinds of failure were seen"
        posts = slack.calls("chat.postMessage", ok_only=True)
        parents = [c for c in posts if "thread_ts" not in c.args]
        assert len(parents) == 3, "each finding posted exactly once"
        for incident in incidents:
            detail = rig.store.get_incident(incident)
            assert all(m.status is MessageStatus.DELIVERED for m in detail.messages)
            channel, _, ts = next(m.external_ref for m in detail.messages
                                  if m.kind is MessageKind.POST).partition("|")
            assert channel == CHANNEL
            replies = [c.args["text"] for c in posts if c.args.get("thread_ts") == ts]
            assert [w for t in replies for w in WORDS if w in t] == WORDS, "order per incident"
            first_reply = min(i for i, c in enumerate(posts) if c.args.get("thread_ts") == ts)
            parent_index = next(i for i, c in enumerate(posts) if c.args.get("text", "").startswith(
                f"zonemedic #{incident} "))
            assert parent_index < first_reply
    finally:
        rig.stop()


def test_rate_limit_pauses_the_deliverer_for_retry_after(
    slack: FakeSlack, sqlite_template: Path, tmp_path: Path
) -> None:
    rig = start_rig(slack, sqlite_template, tmp_path, serve=False)
    try:
        rig.open_incident()
        slack.fail(status=429, seconds=0.2, methods=["chat.postMessage"], retry_after=2)
        first = rig.deliver()
        assert first.failed == 1
        again = rig.deliver()
        assert again.paused and again.delivered == 0
        assert len(slack.calls("chat.postMessage")) == 1, "no call while paused"
        rig.deliver_until(lambda: bool(slack.calls("chat.postMessage", ok_only=True)), timeout=30)
    finally:
        rig.stop()


def test_digest_posts_open_resolved_and_gpu_hours(
    slack: FakeSlack, sqlite_template: Path, tmp_path: Path
) -> None:
    rig = start_rig(slack, sqlite_template, tmp_path, serve=False)
    try:
        rig.open_incident("a")
        unposted = rig.open_incident("b", awaiting=False)
        reason = "playbook zone-split: the job's pods request 0 GPU(s), fewer than min_gpus 1"
        rig.store.enqueue_message(MessageKind.DIGEST, payload={
            "playbook": "daily-digest", "not_posted": {str(unposted): reason}},
            now=now(), channel=CHANNEL, dedupe_key="digest:x")
        rig.deliver_until(lambda: any(c.args.get("text", "").startswith("zonemedic digest")
                                      for c in slack.calls("chat.postMessage", ok_only=True)))
        digest = next(c for c in slack.calls("chat.postMessage", ok_only=True)
                      if c.args["text"].startswith("zonemedic digest"))
        assert "2 open, 0 resolved in the last 1d, 0.0 GPU-hours recovered" in digest.args["text"]
        blocks = str(digest.args["blocks"])  # the open incidents, one line each
        assert blocks.count("not posted") == 1 and f"_not posted: {reason}_" in blocks
        unposted_line = blocks[blocks.index(f"#{unposted} "):blocks.index("not posted")]
        assert "\\n" not in unposted_line and "\n" not in unposted_line  # on b's own line
    finally:
        rig.stop()
