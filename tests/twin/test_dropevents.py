"""The twin's Cilium drop event emitter: PacketDrop Events as Cilium writes them (pod, message,
reasons, one per interval), selectable server-side by `reason` and `source` as kube-apiserver
selects them, through the twin's HTTP API with the official client."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from kubernetes import client, config

from agent.twin import kubeconfig
from agent.twin.clock import TwinClock
from agent.twin.cluster import TwinCluster
from agent.twin.dataplane import DropHop, DropReason, FlowResult
from agent.twin.dropevents import DropEventEmitter, drop_message
from agent.twin.resources import lookup
from agent.twin.store import Store
from tests.support import objects
from tests.twin.twin_fixtures import fast, wait

EVENTS = lookup("events")
NAMESPACES = lookup("namespaces")
INGRESS = re.compile(
    r"^Incoming packet dropped \(policy_denied\) from ml/(llm-finetune-(?:master|worker)-\d) "
    r"\(\d+\.\d+\.\d+\.\d+\) TCP/\d+\.$"
)


def pod_at(name: str, ip: str, uid: str = "") -> dict[str, Any]:
    """A pod in `ml` with IP `ip`."""
    return objects.pod(name, uid=uid or None, phase=None, status={"podIP": ip})


def test_messages_name_the_peer_as_cilium_does() -> None:
    src, dst = pod_at("w-0", "10.0.1.4", "u-src"), pod_at("m-0", "10.0.2.9", "u-dst")
    ingress = FlowResult(False, DropReason.POLICY_DENIED, (), DropHop.INGRESS)
    egress = FlowResult(False, DropReason.POLICY_DENY, (), DropHop.EGRESS)
    named, message = drop_message(src, dst, port=23456, protocol="TCP", result=ingress)
    assert named is dst
    assert message == "Incoming packet dropped (policy_denied) from ml/w-0 (10.0.1.4) TCP/23456."
    named, message = drop_message(src, dst, port=23456, protocol="tcp", result=egress)
    assert named is src
    assert message == "Outgoing packet dropped (policy_deny) to ml/m-0 (10.0.2.9) TCP/23456."


def test_reasons_and_interval() -> None:
    seconds = [0.0]
    store = Store()
    store.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    emitter = DropEventEmitter(store, clock=TwinClock(monotonic=lambda: seconds[0]), interval=60)
    src, dst = pod_at("w-0", "10.0.1.4", "u-src"), pod_at("m-0", "10.0.2.9")
    denied = FlowResult(False, DropReason.POLICY_DENIED, (), DropHop.EGRESS)
    assert emitter.emit(src, dst, port=80, result=denied)
    seconds[0] = 30.0
    assert not emitter.emit(src, dst, port=80, result=denied)  # within the interval
    # Cilium's default reasons leave an explicit deny rule's drops out
    assert not emitter.emit(src, dst, port=80,
                            result=FlowResult(False, DropReason.POLICY_DENY, (), DropHop.EGRESS))
    assert not emitter.emit(src, dst, port=80, result=FlowResult(True))
    seconds[0] = 61.0
    assert emitter.emit(src, dst, port=80, result=denied)
    (event,) = store.list(EVENTS, namespace="ml")[0]
    assert (event["reason"], event["type"], event["source"]) == (
        "PacketDrop", "Warning", {"component": "cilium"})
    assert event["count"] == 2  # the repeat after the interval counts on the same Event
    assert event["involvedObject"]["name"] == "w-0" and event["involvedObject"]["uid"] == "u-src"
    assert event["message"] == "Outgoing packet dropped (policy_denied) to ml/m-0 (10.0.2.9) TCP/80."


def test_blocked_seed_emits_packet_drops_selectable_by_reason_and_source(tmp_path: Path) -> None:
    scenario = fast("seed-blocked")
    scenario = replace(scenario, model=replace(scenario.model, drop_event_interval=3600.0))
    with TwinCluster(scenario) as cluster:
        api = cluster.serve_api()
        path = kubeconfig.write(tmp_path / "kubeconfig", api.url)
        api_client = config.new_client_from_config(config_file=str(path))
        core = client.CoreV1Api(api_client)

        def drops() -> list[Any]:
            found = core.list_namespaced_event("ml", field_selector="reason=PacketDrop,source=cilium")
            return list(found.items)

        master = "llm-finetune-master-0"
        wait(cluster, lambda: any(e.involved_object.name == master for e in drops()), timeout=20)
        events = drops()
        for event in events:  # the policies admit ingress by zone: dropped at the receiver
            assert event.involved_object.kind == "Pod"
            assert event.type == "Warning" and event.source.component == "cilium"
            found = INGRESS.match(event.message)
            assert found, event.message
            sender, receiver = found.group(1), event.involved_object.name
            assert receiver.startswith("llm-finetune-") and sender != receiver
            assert master in (sender, receiver)  # the master is in the other zone
        assert all(e.count == 1 for e in events)  # one per interval
        others = core.list_namespaced_event("ml", field_selector="source=kubelet").items
        assert others and not any(e.reason == "PacketDrop" for e in others)
        assert not core.list_namespaced_event(
            "ml", field_selector="reason=PacketDrop,source=kubelet").items
        api_client.close()

