"""`/zonemedic explain` end to end: the fake Slack sends a signed slash command, the chat layer
asks the explainer (the evaluator over a parsed kubectl dump) and replies ephemerally, rendered for
a person; a bad query is one line saying what is wrong."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agent.commands.diagnose import load_snapshot
from agent.fakes.slack import FakeSlack
from agent.policy.explanation import ExplainQuery, PodIndex, explain
from agent.settings import DiagnosisSettings
from tests.chatops.harness import CHANNEL, ChatRig, start_rig

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def explaining(slack: FakeSlack, sqlite_template: Path, tmp_path: Path) -> Iterator[ChatRig]:
    snapshot = load_snapshot([REPO / "examples" / "split-blocked.yaml"])
    policies = snapshot.policy_set(DiagnosisSettings(pod_zone_label="zone"))
    index = PodIndex(snapshot.state)

    def answer(query: ExplainQuery) -> Mapping[str, Any]:
        return explain(index, policies, query, mirror_keys=("zone",)).to_dict()

    rig = start_rig(slack, sqlite_template, tmp_path, explain=answer)
    try:
        yield rig
    finally:
        rig.stop()


def ask(rig: ChatRig, text: str, user: str = "U9") -> tuple[str, str]:
    answer = rig.slack.command(rig.url, user=user, text=text)
    assert answer.status == 200
    rig.wait(lambda: bool(rig.slack.ephemeral(user)))
    reply = rig.slack.ephemeral(user)[0]
    assert reply.channel == CHANNEL
    return reply.text, json.dumps(reply.blocks)


def test_a_denied_flow_is_explained_to_anyone(explaining: ChatRig) -> None:
    text, blocks = ask(explaining, "explain from ml/resnet-worker-0 to ml/resnet-master-0 port 23456")
    assert text == "ml/resnet-worker-0 → ml/resnet-master-0 port 23456/TCP: DENIED at ingress"
    assert "denied by default: no allow rule matches (Hubble POLICY_DENIED)" in blocks
    assert "made default deny by: CiliumNetworkPolicy/ml/zone-b-only" in blocks
    assert "zone label: zone=zone-a" in blocks


def test_a_pod_to_be(explaining: ChatRig) -> None:
    text, blocks = ask(explaining, "explain from ml from-labels zone=zone-b to ml/resnet-master-0 "
                                   "port 23456/tcp")
    assert text.endswith(": allowed")
    assert "allow rule CiliumNetworkPolicy/ml/zone-b-only spec.ingress[0]" in blocks


@pytest.mark.parametrize(("text", "expected"), [
    ("explain from ml/nope to ml/resnet-master-0 port 1", "no pod ml/nope in the cluster"),
    ("explain from ml/resnet-worker-0 to ml/resnet-master-0 port 80/gre",
     "`explain`: port: unknown protocol 'gre' (TCP, UDP, SCTP or ANY)"),
])
def test_bad_queries_say_what_is_wrong(explaining: ChatRig, text: str, expected: str) -> None:
    reply, _ = ask(explaining, text)
    assert reply == expected


def test_without_an_explainer_it_says_so(slack: FakeSlack, sqlite_template: Path,
                                         tmp_path: Path) -> None:
    rig = start_rig(slack, sqlite_template, tmp_path)
    try:
        reply, _ = ask(rig, "explain from ml/a to ml/b port 1")
        assert reply == "Flows cannot be explained from Slack in this agent."
    finally:
        rig.stop()
