"""`/zonemedic whatif delete KIND/NS/NAME` end to end: the fake Slack sends a signed slash command,
the chat layer asks the agent's what-if (`LiveWhatIf` over a parsed kubectl dump) and replies
ephemerally, rendered for a person; a bad or absent object is one line saying what is wrong."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agent.runtime.whatif import LiveWhatIf
from agent.settings import DiagnosisSettings
from agent.snapshot.collection import Snapshot
from agent.topology.facts import cluster_facts
from tests.chatops.harness import ChatRig

Ask = Callable[..., tuple[str, str]]


@pytest.fixture
def asking(chat_rig: Callable[..., ChatRig], split_blocked: Snapshot) -> ChatRig:
    settings = DiagnosisSettings(pod_zone_label="zone")
    view = (split_blocked.state, split_blocked.policy_set(settings),
            cluster_facts(split_blocked.state.nodes, split_blocked.state.pods), 1)  # fmt: skip
    whatif = LiveWhatIf(lambda: view, settings=settings, ready=lambda: True)
    return chat_rig(whatif=whatif.delete)


def test_deleting_the_zone_policy_is_shown_to_anyone(asking: ChatRig, ask: Ask) -> None:
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
def test_bad_changes_say_what_is_wrong(asking: ChatRig, ask: Ask, text: str, expected: str) -> None:
    reply, _ = ask(asking, text)
    assert reply == expected


def test_without_a_whatif_it_says_so(rig: ChatRig, ask: Ask) -> None:
    reply, _ = ask(rig, "whatif delete NetworkPolicy/ml/x")
    assert reply == "What-ifs cannot be asked from Slack in this agent."
