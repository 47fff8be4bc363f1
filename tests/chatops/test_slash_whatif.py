"""`/zonemedic whatif delete KIND/NS/NAME` end to end: the fake Slack sends a signed slash command,
the chat layer asks the agent's what-if (`LiveWhatIf` over a parsed kubectl dump) and replies
ephemerally, rendered for a person; a bad or absent object is one line saying what is wrong."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.commands.diagnose import load_snapshot
from agent.fakes.slack import FakeSlack
from agent.runtime.whatif import LiveWhatIf
from agent.settings import DiagnosisSettings
from agent.topology.facts import cluster_facts
from tests.chatops.harness import CHANNEL, ChatRig, start_rig

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def asking(slack: FakeSlack, sqlite_template: Path, tmp_path: Path) -> Iterator[ChatRig]:
    settings = DiagnosisSettings(pod_zone_label="zone")
    snapshot = load_snapshot([REPO / "examples" / "split-blocked.yaml"])
    view = (snapshot.state, snapshot.policy_set(settings),
            cluster_facts(snapshot.state.nodes, snapshot.state.pods), 1)  # fmt: skip
    whatif = LiveWhatIf(lambda: view, settings=settings, ready=lambda: True)
    rig = start_rig(slack, sqlite_template, tmp_path, whatif=whatif.delete)
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


def test_deleting_the_zone_policy_is_shown_to_anyone(asking: ChatRig) -> None:
    text, blocks = ask(asking, "whatif delete CiliumNetworkPolicy/ml/zone-b-only")
    # the workers' side (zone-a-only) still blocks the job: no verdict changes, its flows do
    assert text == ("What if CiliumNetworkPolicy/ml/zone-b-only were deleted: 0 job verdict(s), "
                    "6 required flow(s) and 5 declared-port flow(s) change")
    assert "2 job(s), 15 required pod-pair flow(s) and 16 declared-port flow(s) of 2 touched " \
           "pod(s) checked" in blocks
    assert ("ml/resnet-worker-0 -&gt; ml/resnet-master-0 port 23456/TCP (required by "
            "PyTorchJob/ml/resnet): denied at ingress (CiliumNetworkPolicy/ml/zone-b-only) -&gt; "
            "allowed") in blocks
    assert "Nothing was deleted: this is a what-if." in blocks


@pytest.mark.parametrize(("text", "expected"), [
    ("whatif delete NetworkPolicy/ml/nope", "delete: no NetworkPolicy/ml/nope in the cluster"),
    ("whatif delete Deployment/ml/x", "delete: cannot delete a 'Deployment' (kinds: "
     "NetworkPolicy, CiliumNetworkPolicy, CiliumClusterwideNetworkPolicy, Pod)"),
    ("whatif apply x.yaml", "`whatif`: expected `whatif delete KIND/NS/NAME` (e.g. `whatif "
     "delete CiliumNetworkPolicy/ml/zone-b-only`)"),
])
def test_bad_changes_say_what_is_wrong(asking: ChatRig, text: str, expected: str) -> None:
    reply, _ = ask(asking, text)
    assert reply == expected


def test_without_a_whatif_it_says_so(slack: FakeSlack, sqlite_template: Path,
                                     tmp_path: Path) -> None:  # fmt: skip
    rig = start_rig(slack, sqlite_template, tmp_path)
    try:
        reply, _ = ask(rig, "whatif delete NetworkPolicy/ml/x")
        assert reply == "What-ifs cannot be asked from Slack in this agent."
    finally:
        rig.stop()
