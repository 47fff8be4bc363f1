"""The chat layer running for real in a test: a migrated SQLite store, the fake Slack, the chat
layer built by the runtime's `build_chat`, and its /slack/events route served over HTTP."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from starlette.applications import Starlette

from agent.approval.approvers import Authority
from agent.chatops.audit import RefusalReason
from agent.chatops.delivery import DeliveryReport, SeriesSource
from agent.chatops.ports import Explain, WhatIf
from agent.chatops.slack import EVENTS_PATH
from agent.fakes.slack import FakeSlack
from agent.model.incident import FindingRecord
from agent.model.lifecycle import IncidentStatus, MessageKind
from agent.model.verdict import Verdict
from agent.playbook.model import Playbook
from agent.runtime.chat import Chat, build_chat
from agent.runtime.server import HttpServer
from agent.settings import (
    DatabaseSettings,
    EnvironmentSecrets,
    Settings,
    SlackApprovers,
    SlackMode,
    SlackSettings,
)
from agent.store.engine import make_engine
from agent.store.repository import IncidentStore, OutboxPolicy
from tests.support.waiting import wait

CHANNEL = "C0FAKE"
FAST_OUTBOX = OutboxPolicy(base=timedelta(milliseconds=50), cap=timedelta(milliseconds=400),
                           max_attempts=1000)
FAST_LEASE = timedelta(milliseconds=500)


def now() -> datetime:
    return datetime.now(UTC)


def diagnosis(name: str = "resnet", *, remediable: bool = True) -> dict[str, Any]:
    return {
        "job": {"kind": "PyTorchJob", "namespace": "ml", "name": name, "uid": f"uid-{name}"},
        "verdict": "zone_split_blocked",
        "zones": {"zone-a": 3, "zone-b": 1},
        "coordinator": {"pod": f"{name}-master-0", "zone": "zone-b"},
        "denied_flows": [{"from_pod": f"{name}-worker-0", "to_pod": f"{name}-master-0",
                          "port": 23456, "protocol": "TCP", "hop": "ingress",
                          "reason": "default_deny",
                          "policies": ["CiliumNetworkPolicy/ml/zone-b-only"]}],
        "denied_flows_total": 1,
        "remediable": remediable,
        "target_zone": "zone-a",
        "reasons": [] if remediable else ["zone-a has no room for 4 GPUs"],
        "impact": {"gpus_total": 4, "gpus_outside_target": 1, "gpu_share_outside_target": 0.25,
                   "pods_outside_target": 1},
    }


@dataclass
class ChatRig:
    slack: FakeSlack
    store: IncidentStore
    chat: Chat
    server: HttpServer | None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url + EVENTS_PATH

    def open_incident(self, name: str = "resnet", *, awaiting: bool = True,
                      remediable: bool = True, cluster: str = "default",
                      approvers: list[str] | None = None) -> int:
        """An incident with the proposal of playbook zone-split queued; `approvers`: what that
        proposal records as the playbook's approvers (as the pipeline queues it)."""
        doc = diagnosis(name, remediable=remediable)
        outcome = self.store.record_finding(FindingRecord.from_finding(
            doc, cluster=cluster, detected_at=now(), gpus=4))
        incident = outcome.incident.id
        if awaiting:
            result = self.store.transition(incident, IncidentStatus.OPEN,
                                           IncidentStatus.AWAITING_APPROVAL, actor="zonemedic",
                                           now=now())
            assert result.applied
        payload: dict[str, Any] = {"action": "propose_colocation", "playbook": "zone-split",
                                   "incident_id": incident, "finding": doc}
        if approvers is not None:
            payload["approval"] = {"approvers": approvers, "expiry_seconds": 14400.0,
                                   "auto": False, "deadline": None}
        self.store.enqueue_message(
            MessageKind.POST,
            payload=payload,
            now=now(), incident_id=incident, channel=CHANNEL,
            dedupe_key=f"propose_colocation:zone-split:{incident}",
        )
        return incident

    def deliver(self) -> DeliveryReport:
        assert self.chat.deliverer is not None
        return self.chat.deliverer.run()

    def deliver_until(self, done: Callable[[], bool], *, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError("delivery did not reach the expected state")
            self.deliver()
            time.sleep(0.02)

    def wait(self, done: Callable[[], bool], *, timeout: float = 30.0) -> None:
        wait(done, timeout=timeout, what="the expected state", interval=0.01)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.chat.stop()
        self.store.close()


def start_rig(
    slack: FakeSlack,
    template: Path,
    tmp_path: Path,
    *,
    users: list[str] | None = None,
    usergroups: list[str] | None = None,
    series: SeriesSource | None = None,
    serve: bool = True,
    sweep: Callable[[], str] | None = None,
    explain: Explain | None = None,
    whatif: WhatIf | None = None,
    mode: SlackMode = SlackMode.HTTP,
    shared_db: Path | None = None,
    on_refused: Callable[[RefusalReason], None] | None = None,
    playbooks: list[Playbook] | None = None,
) -> ChatRig:
    """A running chat layer; `shared_db`: another replica's database file (not copied);
    `playbooks`: the playbooks the agent has loaded (whose approvers are in force)."""
    db = shared_db if shared_db is not None else tmp_path / "chat.db"
    if shared_db is None:
        shutil.copy(template, db)
    store = IncidentStore(make_engine(f"sqlite:///{db}", DatabaseSettings()), outbox=FAST_OUTBOX)
    settings = Settings(
        slack=SlackSettings(
            enabled=True, mode=mode, api_url=slack.base_url, channel=CHANNEL,
            approvers=SlackApprovers(users=["U1", "U2"] if users is None else users,
                                     usergroups=["S1"] if usergroups is None else usergroups),
        ),
        secrets=EnvironmentSecrets(slack_bot_token=slack.bot_token,
                                   slack_signing_secret=slack.signing_secret,
                                   slack_app_token=slack.app_token),
    )
    chat = build_chat(settings, store=store, clock=now, series=series, sweep=sweep, explain=explain,
                      whatif=whatif, claim_lease=FAST_LEASE, on_refused=on_refused,
                      authority=Authority.of(settings, playbooks or []))
    if chat.deliverer is not None and chat.deliverer.follower is not None:
        chat.deliverer.follower.every = 0.0  # follow on every round: tests need no 5 s cadence
    server = None
    if serve and mode is SlackMode.HTTP:
        server = HttpServer(Starlette(routes=chat.routes), host="127.0.0.1", port=0).start()
    return ChatRig(slack=slack, store=store, chat=chat, server=server)


__all__ = ["CHANNEL", "ChatRig", "Verdict", "diagnosis", "start_rig"]
