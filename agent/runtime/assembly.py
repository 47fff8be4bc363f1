"""The running agent's pipeline, assembled: what `zonemedic run` and `zonemedic demo` both start.

Who calls it: `agent.commands.run` and the demo (`agent.demo`), each handing
`AgentAssembly.pipeline` to `agent.runtime.app.Agent` as its pipeline factory. For the parts the
composition root built, it registers the leader's background jobs (the remediation executor, which
hands approved incidents to the only cluster writer, and the approval expiry), builds the
detection pipeline over the incident store, and wires the chat layer (Slack: /slack/events on the
agent's HTTP server and the leader's outbox deliverer; disabled, one line saying the agent runs
without chat). `start` and `stop` start and stop what the chat layer holds open (Socket Mode).

What it does not do: read settings, open the store, build clients (the root does), or run
anything itself; the `Agent` starts and stops the parts.
"""

from __future__ import annotations

from agent.approval import expiry
from agent.runtime import chat, remediation_queue
from agent.runtime.pipeline import AgentPipeline
from agent.runtime.root import Parts
from agent.store.repository import IncidentStore


class AgentAssembly:
    """The pipeline factory of a running agent over one incident store."""

    def __init__(self, store: IncidentStore) -> None:
        self.store = store
        self.chats: list[chat.Chat] = []
        self.pipelines: list[AgentPipeline] = []

    def pipeline(self, parts: Parts) -> AgentPipeline:
        """The agent's pipeline for `parts` (an `agent.runtime.app.PipelineFactory`)."""
        store = self.store
        # the leader's background jobs: approved incidents to the remediator, deadlines expired
        remediation_queue.register(parts, store, remediation_queue.live_remediator(parts, store))
        expiry.register(parts, store)
        agent_pipeline = AgentPipeline(parts, store)
        self.chats.append(chat.wire_chat(parts, store=store,
                                         sweep=chat.sweep_command(agent_pipeline.sweep)))
        self.pipelines.append(agent_pipeline)
        return agent_pipeline

    def start(self) -> None:
        """Once the agent started: Socket Mode connects (HTTP mode has nothing to start)."""
        for wired in self.chats:
            wired.start()

    def stop(self) -> None:
        for wired in self.chats:
            wired.stop()
