"""The Slack adapter: a Bolt app built by a factory, its `/slack/events` endpoint, its handlers.

Who calls it: the chat wiring (`agent.runtime.chat`) at start-up; nothing here runs at import (a
module-level Bolt app would call Slack on import).

- HTTP mode: `events_route` is a Starlette route for POST /slack/events. It reads at most
  `MAX_BODY` bytes (413 past it), verifies the signature on the raw body (5-minute window,
  replays refused: `agent.chatops.verification`) and answers 401 before any parsing or work; a
  genuine request is dispatched to Bolt on a worker thread, never on the event loop (the screen
  may ask Slack's `auth.test`, which can hang for the client's timeout).
- Every request Bolt dispatches (HTTP or Socket Mode) is screened first (`ChatHandlers.screen`): a
  payload from another workspace than ours (the team id `auth.test` gave at start-up,
  `agent.chatops.workspace`) or a click on an action id the agent never sends is answered 403 and
  goes no further.
- Every refusal is audited (`agent.chatops.audit`): a log line and a counted reason always, and a
  `note` event on the incident's timeline when the request names an incident that exists. A click
  on an incident that does not exist or that another cluster's agent recorded changes nothing.
- Bolt runs with `process_before_response=True`: each handler's ack function runs inline and
  answers at once (well inside Slack's 3 seconds); the work runs after, as a lazy listener on a
  small thread pool, so a slow store or Slack never delays an acknowledgement.
- A button click trusts only the user id, the action id and the incident id in the value. A
  decision goes through the one decision function (`Decide`, injected), which decides who may
  decide from the approvers in force at click time (not those of the original post): anyone else
  gets an ephemeral refusal, the incident an audit entry (a `note` event) and the refusal is
  logged and counted; nothing else changes. Double clicks, concurrent approvers and replicas give
  exactly one decision, the others are told who decided. A recorded decision queues the message
  update and the thread reply through the outbox (`agent.chatops.delivery.Follower`).
- `/zonemedic incidents|show|stats|sweep|help` replies ephemerally from the store's queries (the
  CLI's); `sweep` is for approvers only. `/zonemedic explain from NS/POD to NS/POD port P` replies
  with the injected `Explain`'s answer (the agent's evaluator over its cache, as
  `GET /api/explain`), rendered by `agent.chatops.replies.explain_reply`; anyone may ask (it is
  read-only). `/zonemedic whatif delete KIND/NS/NAME` replies with the injected `WhatIf`'s blast
  radius (as `POST /api/whatif`), rendered by `agent.chatops.replies.whatif_reply`; anyone may
  ask (nothing is deleted).

What it does not do: decide, deliver queued messages (the deliverer does) or render (render does).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from slack_bolt import Ack, App, BoltRequest, BoltResponse
from slack_bolt.authorization import AuthorizeResult
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agent.chatops.audit import RefusalAudit, RefusalReason
from agent.chatops.blocks import ButtonAction, Rendered
from agent.chatops.directory import ApproverDirectory
from agent.chatops.ports import ChatStore, Clock, Decide, Explain, MaySweep, Sweep, WhatIf
from agent.chatops.replies import (
    detail_reply,
    explain_reply,
    help_reply,
    listing_reply,
    plain_reply,
    stats_reply,
    whatif_reply,
)
from agent.chatops.slash import SlashCommand, SlashError, Verb, parse
from agent.chatops.verification import RequestGuard
from agent.chatops.workspace import Workspace
from agent.errors import InputError, ZonemedicError
from agent.model.incident import Actor
from agent.model.lifecycle import DecisionOutcome, DecisionSource, EventKind
from agent.parsing.bounded_body import BodyTooLargeError, read_bounded

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
MAX_BODY = 1024 * 1024  # an interaction carries its message's blocks: far below this
COMMAND = "/zonemedic"

OUTCOMES: dict[str, DecisionOutcome] = {
    ButtonAction.APPROVE.value: DecisionOutcome.APPROVE,
    ButtonAction.REJECT.value: DecisionOutcome.REJECT,
    ButtonAction.SNOOZE.value: DecisionOutcome.SNOOZE,
}
SENT_ACTIONS = frozenset(action.value for action in ButtonAction)


@dataclass
class ChatHandlers:
    """What the handlers work with (everything injected by the wiring)."""

    store: ChatStore
    directory: ApproverDirectory  # display names
    may_sweep: MaySweep  # who may sweep (the approval rule; decisions go through `decide`)
    clock: Clock
    cluster: str | None
    follow: Callable[[int], object]  # queue the message update and thread replies of an incident
    decide: Decide | None = None  # None: decisions are not wired yet; clicks say so
    sweep: Sweep | None = None
    explain: Explain | None = None  # None: this agent does not explain flows
    whatif: WhatIf | None = None  # None: this agent does not answer what-ifs
    workspace: Workspace | None = None  # None: no team check (tests of the handlers alone)
    audit: RefusalAudit = field(default_factory=RefusalAudit)

    # -- the screen every request passes -------------------------------------------------------

    def screen(self, body: Mapping[str, Any]) -> tuple[RefusalReason, str] | None:
        """None when the request may go on; else the reason and the detail of its refusal."""
        team = _team(body)
        if self.workspace is not None:
            problem = self.workspace.check(team)
            if problem is not None:
                return RefusalReason.OTHER_TEAM, problem
        if body.get("type") == "block_actions":
            for action in body.get("actions") or [{}]:
                action_id = str(action.get("action_id") or "")
                if action_id not in SENT_ACTIONS:
                    return RefusalReason.UNKNOWN_ACTION, f"action id {action_id!r} is never sent"
        return None

    def audit_screened(self, body: Mapping[str, Any], reason: RefusalReason, detail: str) -> None:
        """Audit a screened-out request: the log line and count, and a `note` on the incident
        its button names when that incident exists."""
        user = str((body.get("user") or {}).get("id") or body.get("user_id") or "") or None
        actions = body.get("actions") or [{}]
        value = str(actions[0].get("value") or "") if actions else ""
        incident_id = int(value) if value.isascii() and value.isdigit() else None
        self.audit.refused(reason, detail=detail, user=user, team=_team(body),
                           incident_id=incident_id)
        if incident_id is not None:
            self._note(incident_id, user=user, reason=reason, detail=detail)

    def _note(self, incident_id: int, *, user: str | None, reason: RefusalReason,
              detail: str, refused: str | None = None) -> None:
        try:
            self.store.add_event(
                incident_id, EventKind.NOTE, now=self.clock(), actor=user,
                detail={"refused": refused or reason.value, "user": user, "source": "slack",
                        "reason": detail, "audit": reason.value},
            )
        except InputError:
            pass  # no such incident: the log line and the counter are the audit
        except ZonemedicError as exc:
            log.warning("cannot record a refused request", extra={"error": str(exc)})

    # -- clicks --------------------------------------------------------------------------------

    def click(self, body: Mapping[str, Any], client: WebClient) -> None:
        user = str((body.get("user") or {}).get("id") or "")
        actions = body.get("actions") or [{}]
        action_id = str(actions[0].get("action_id") or "")
        value = str(actions[0].get("value") or "")
        channel = _channel(body)
        outcome = OUTCOMES.get(action_id)
        if not user or outcome is None:
            return
        if not (value.isascii() and value.isdigit()) or len(value) > 18 or int(value) < 1:
            self.audit.refused(RefusalReason.NO_INCIDENT, detail=f"button value {value[:40]!r}",
                               user=user, team=_team(body))
            self._tell(client, channel, user, plain_reply("This button names no incident."))
            return
        incident_id = int(value)
        now = self.clock()
        try:
            detail = self.store.get_incident(incident_id)
        except InputError:
            self.audit.refused(RefusalReason.NO_INCIDENT, detail="no such incident", user=user,
                               team=_team(body), incident_id=incident_id)
            self._tell(client, channel, user, plain_reply(f"There is no incident #{incident_id}."))
            return
        except ZonemedicError as exc:
            self._tell(client, channel, user, plain_reply(f"Nothing recorded: {exc}. Try again."))
            return
        if self.cluster is not None and detail.incident.cluster != self.cluster:
            problem = (f"incident #{incident_id} belongs to cluster {detail.incident.cluster}, "
                       f"not {self.cluster}")
            self.audit.refused(RefusalReason.OTHER_CLUSTER, detail=problem, user=user,
                               team=_team(body), incident_id=incident_id)
            self._note(incident_id, user=user, reason=RefusalReason.OTHER_CLUSTER,
                       detail=problem, refused=outcome.value)
            self._tell(client, channel, user, plain_reply(f"Not recorded: {problem}."))
            return
        if self.decide is None:
            self._tell(client, channel, user, plain_reply(
                "Decisions from Slack are not wired in this agent yet; nothing was recorded."))
            return
        actor = Actor(user, self.directory.name(user), DecisionSource.SLACK)
        try:
            reply = self.decide(incident_id, outcome, actor=actor, now=now)
        except ZonemedicError as exc:
            self._tell(client, channel, user, plain_reply(f"Nothing recorded: {exc}. Try again."))
            return
        if reply.refused:  # the decision function left the note on the timeline
            self.audit.refused(RefusalReason.NOT_APPROVER, detail=reply.message, user=user,
                               team=_team(body), incident_id=incident_id)
        if reply.recorded:
            self.follow(incident_id)
        self._tell(client, channel, user, plain_reply(reply.message))

    # -- slash command -------------------------------------------------------------------------

    def command(self, body: Mapping[str, Any], client: WebClient) -> None:
        user = str(body.get("user_id") or "")
        channel = str(body.get("channel_id") or "")
        now = self.clock()
        try:
            parsed = parse(str(body.get("text") or ""), now=now, cluster=self.cluster)
            reply = self._run(parsed, user=user)
        except SlashError as exc:
            reply = plain_reply(f"{exc}")
        except ZonemedicError as exc:
            reply = plain_reply(f"Cannot answer right now: {exc}")
        self._tell(client, channel, user, reply)

    def _run(self, parsed: SlashCommand, *, user: str) -> Rendered:
        verb = parsed.verb
        if verb is Verb.HELP:
            return help_reply()
        if verb is Verb.INCIDENTS:
            return listing_reply(self.store.list_incidents(parsed.query), filters=parsed.filters)
        if verb is Verb.SHOW and parsed.incident_id is not None:
            try:
                detail = self.store.get_incident(parsed.incident_id)
            except InputError:
                return plain_reply(f"There is no incident #{parsed.incident_id}.")
            return detail_reply(detail)
        if verb is Verb.STATS and parsed.since is not None:
            return stats_reply(self.store.stats(since=parsed.since, now=self.clock()),
                               period=parsed.period)
        if verb is Verb.EXPLAIN and parsed.explain is not None:
            if self.explain is None:
                return plain_reply("Flows cannot be explained from Slack in this agent.")
            try:
                return explain_reply(self.explain(parsed.explain))
            except InputError as exc:
                return plain_reply(f"{exc}")
        if verb is Verb.WHATIF and parsed.deletes:
            if self.whatif is None:
                return plain_reply("What-ifs cannot be asked from Slack in this agent.")
            try:
                return whatif_reply(self.whatif(parsed.deletes), deletes=parsed.deletes)
            except InputError as exc:
                return plain_reply(f"{exc}")
        if verb is not Verb.SWEEP:
            return help_reply()
        # sweep: approvers only (`slack.approvers`), by the one rule
        if not self.may_sweep(Actor(user, None, DecisionSource.SLACK)):
            return plain_reply("`sweep` is for approvers only.")
        if self.sweep is None:
            return plain_reply("Sweeps cannot be started from Slack in this agent.")
        return plain_reply(f"Sweep done: {self.sweep()}")

    # -- replies -------------------------------------------------------------------------------

    @staticmethod
    def _tell(client: WebClient, channel: str, user: str, reply: Rendered) -> None:
        """An ephemeral answer to one person (lost if Slack is down: it records nothing)."""
        if not channel or not user:
            return
        try:
            client.chat_postEphemeral(channel=channel, user=user, text=reply.text,
                                      blocks=reply.blocks)
        except (SlackApiError, SlackClientError, OSError) as exc:
            log.warning("cannot send an ephemeral reply", extra={"error": str(exc)})


def _team(body: Mapping[str, Any]) -> str | None:
    """The workspace a payload says it comes from (interactions: `team.id`; commands: `team_id`)."""
    team = body.get("team")
    if isinstance(team, Mapping) and team.get("id"):
        return str(team["id"])
    if body.get("team_id"):
        return str(body["team_id"])
    user = body.get("user")
    if isinstance(user, Mapping) and user.get("team_id"):
        return str(user["team_id"])
    return None


def _channel(body: Mapping[str, Any]) -> str:
    channel = body.get("channel") or {}
    container = body.get("container") or {}
    return str(channel.get("id") or container.get("channel_id") or "")


def _ack(ack: Ack) -> None:
    ack()


def build_app(
    *,
    client: WebClient,
    signing_secret: str | None,
    handlers: ChatHandlers,
    executor: Executor,
) -> App:
    """The Bolt app (call at start-up, never at import). `signing_secret` None: Socket Mode."""
    token = client.token

    def authorize(enterprise_id: str | None, team_id: str | None,
                  user_id: str | None) -> AuthorizeResult:
        # one workspace, one bot token: no `auth.test` call on a request's path
        return AuthorizeResult(enterprise_id=enterprise_id, team_id=team_id, user_id=user_id,
                               bot_token=token)

    app = App(
        client=client,
        authorize=authorize,
        signing_secret=signing_secret,
        request_verification_enabled=signing_secret is not None,
        process_before_response=True,
        listener_executor=executor,
        logger=logging.getLogger("agent.chatops.bolt"),
    )

    def click(body: dict[str, Any], client: WebClient) -> None:
        handlers.click(body, client)

    def command(body: dict[str, Any], client: WebClient) -> None:
        handlers.command(body, client)

    def screen(body: dict[str, Any], next: Callable[[], None]) -> BoltResponse | None:
        refused = handlers.screen(body)
        if refused is None:
            next()
            return None
        reason, detail = refused
        executor.submit(handlers.audit_screened, body, reason, detail)  # off the ack's path
        return BoltResponse(status=403, body=json.dumps({"error": detail}),
                            headers={"content-type": "application/json"})

    app.use(screen)
    for action in ButtonAction:
        app.action(action.value)(ack=_ack, lazy=[click])
    app.command(COMMAND)(ack=_ack, lazy=[command])
    return app


def events_route(app: App, guard: RequestGuard, audit: RefusalAudit | None = None) -> Route:
    """POST /slack/events: 401 for a forged, stale or replayed request, before any work (audited:
    a log line and a count; the unverified body is not parsed)."""

    async def endpoint(request: Request) -> Response:
        try:
            body = await read_bounded(request.headers.get("content-length"), request.stream(),
                                      limit=MAX_BODY)
        except BodyTooLargeError as exc:
            return JSONResponse({"error": str(exc)}, status_code=413)
        refusal = guard.check(body, request.headers)
        if refusal is not None:
            if audit is not None:
                audit.refused(RefusalReason.SIGNATURE, detail=refusal.value)
            return JSONResponse({"error": refusal.value}, status_code=401)
        bolt_request = BoltRequest(
            body=body.decode("utf-8", "replace"),
            query=str(request.url.query),
            headers={k: v for k, v in request.headers.items()},
        )
        # off the event loop: the screen may ask Slack's auth.test (the team id not known yet),
        # which blocks for the client's timeout when Slack hangs; acks stay inline, the work
        # goes on to the lazy-listener pool
        response = await run_in_threadpool(app.dispatch, bolt_request)
        return Response(
            status_code=response.status,
            content=response.body,
            headers=response.first_headers_without_set_cookie(),
        )

    return Route(EVENTS_PATH, endpoint, methods=["POST"])
