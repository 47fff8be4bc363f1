"""`/zonemedic explain` end to end: the fake Slack sends a signed slash command, the chat layer
asks the explainer (the evaluator over a parsed kubectl dump) and replies ephemerally, rendered for
a person; a bad query is one line saying what is wrong."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from agent.policy.explanation import ExplainQuery, PodIndex, explain
from agent.settings import DiagnosisSettings
from agent.snapshot.collection import Snapshot
from tests.chatops.harness import ChatRig

Ask = Callable[..., tuple[str, str]]


@pytest.fixture
def explaining(chat_rig: Callable[..., ChatRig], split_blocked: Snapshot) -> ChatRig:
    policies = split_blocked.policy_set(DiagnosisSettings(pod_zone_label="zone"))
    index = PodIndex(split_blocked.state)

    def answer(query: ExplainQuery) -> Mapping[str, Any]:
        return explain(index, policies, query, mirror_keys=("zone",)).to_dict()

    return chat_rig(explain=answer)


def test_a_denied_flow_is_explained_to_anyone(explaining: ChatRig, ask: Ask) -> None:
    text, blocks = ask(explaining, "explain from ml/resnet-worker-0 to ml/resnet-master-0 port 23456")
    assert text == "ml/resnet-worker-0 → ml/resnet-master-0 port 23456/TCP: DENIED at ingress"
    assert "denied by default: no allow rule matches (Hubble POLICY_DENIED)" in blocks
    assert "made default deny by: CiliumNetworkPolicy/ml/zone-b-only" in blocks
    assert "zone label: zone=zone-a" in blocks


def test_a_pod_to_be(explaining: ChatRig, ask: Ask) -> None:
    text, blocks = ask(explaining, "explain from ml from-labels zone=zone-b to ml/resnet-master-0 "
                                   "port 23456/tcp")
    assert text.endswith(": allowed")
    assert "allow rule CiliumNetworkPolicy/ml/zone-b-only spec.ingress[0]" in blocks


@pytest.mark.parametrize(("text", "expected"), [
    ("explain from ml/nope to ml/resnet-master-0 port 1", "no pod ml/nope in the cluster"),
    ("explain from ml/resnet-worker-0 to ml/resnet-master-0 port 80/gre",
     "`explain`: port: unknown protocol 'gre' (TCP, UDP, SCTP or ANY)"),
])
def test_bad_queries_say_what_is_wrong(explaining: ChatRig, ask: Ask, text: str, expected: str) -> None:
    reply, _ = ask(explaining, text)
    assert reply == expected


def test_without_an_explainer_it_says_so(rig: ChatRig, ask: Ask) -> None:
    reply, _ = ask(rig, "explain from ml/a to ml/b port 1")
    assert reply == "Flows cannot be explained from Slack in this agent."
