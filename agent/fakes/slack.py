"""A fake of the Slack Web API over real HTTP, for tests and the demo; and a fake Slack *client* of
the agent's endpoint that sends signed interaction and slash-command requests as a given user.

Who uses it: the chat layer's tests, the benchmark and `zonemedic demo`. It binds port 0 on
127.0.0.1 only. It answers `auth.test`, `chat.postMessage`, `chat.update`, `chat.postEphemeral`,
`users.info`, `usergroups.users.list`, the three steps of the v2 file upload
(`files.getUploadURLExternal`, a POST of the bytes to the URL it returned, which is on this server,
`files.completeUploadExternal`), `conversations.replies` and `apps.connections.open`, whose
`ws://127.0.0.1` URL is a Socket Mode endpoint on this server (hello, envelopes out, acks in,
ping/pong). `hang(methods)` makes methods wait before answering until `release()` (a Slack that
does not answer). Every request is recorded (method,
arguments, Host header, time) in a thread-safe list that tests query. `fail(...)` makes methods
answer 429 (with `Retry-After`) or 500 for a period. Requests it sends to the agent carry real v0
signatures (`v0:{timestamp}:{body}`, HMAC-SHA256 with the signing secret).

What it does not do: enforce Slack's rate limits by itself, check scopes, or talk to the internet.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import http.client
import itertools
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOOPBACK = "127.0.0.1"
SOCKET_PATH = "/socket"
_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_TEXT, _CLOSE, _PING, _PONG = 0x1, 0x8, 0x9, 0xA


class _WebSocket:
    """One accepted Socket Mode connection (RFC 6455 framing, server side: unmasked frames out,
    masked frames in)."""

    def __init__(self, request: BaseHTTPRequestHandler) -> None:
        self.request = request
        self.lock = threading.Lock()
        self.open = True

    def send(self, opcode: int, data: bytes) -> None:
        size = len(data)
        if size < 126:
            head = bytes([0x80 | opcode, size])
        elif size < 65536:
            head = bytes([0x80 | opcode, 126]) + size.to_bytes(2, "big")
        else:
            head = bytes([0x80 | opcode, 127]) + size.to_bytes(8, "big")
        with self.lock:
            self.request.wfile.write(head + data)
            self.request.wfile.flush()

    def receive(self) -> tuple[int, bytes] | None:
        read = self.request.rfile.read
        head = read(2)
        if len(head) < 2:
            return None
        opcode, size = head[0] & 0x0F, head[1] & 0x7F
        if size == 126:
            size = int.from_bytes(read(2), "big")
        elif size == 127:
            size = int.from_bytes(read(8), "big")
        mask = read(4) if head[1] & 0x80 else b""
        data = read(size)
        if mask:
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        return opcode, data


@dataclass(frozen=True)
class Call:
    """One request the fake received."""

    method: str
    args: Mapping[str, Any]
    host: str
    at: float
    status: int


@dataclass
class _Failure:
    methods: frozenset[str] | None  # None: every method
    status: int
    until: float
    retry_after: int


@dataclass
class _Message:
    channel: str
    ts: str
    text: str
    blocks: list[Any]
    thread_ts: str | None
    user: str | None = None  # ephemeral recipient
    files: list[str] = field(default_factory=list)


def sign(secret: str, *, timestamp: int, body: bytes) -> str:
    """Slack's v0 request signature of `body` sent at `timestamp`."""
    base = b"v0:" + str(timestamp).encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class AgentResponse:
    status: int
    body: bytes
    seconds: float


class FakeSlack:
    """The fake Slack Web API server (start/stop, or use as a context manager)."""

    def __init__(
        self,
        *,
        signing_secret: str = "fake-signing-secret",
        bot_token: str = "xoxb-fake-token",
        users: Mapping[str, str] | None = None,
        usergroups: Mapping[str, Iterable[str]] | None = None,
        team_id: str = "T0FAKE",
        bot_user_id: str = "U0BOT",
        app_token: str = "xapp-fake-token",
    ) -> None:
        self.signing_secret = signing_secret
        self.bot_token = bot_token
        self.users = dict(users or {})
        self.usergroups = {k: list(v) for k, v in (usergroups or {}).items()}
        self.team_id = team_id
        self.bot_user_id = bot_user_id
        self.app_token = app_token
        self._lock = threading.Lock()
        self._sockets: list[_WebSocket] = []
        self._acks: dict[str, Any] = {}
        self._calls: list[Call] = []
        self._failures: list[_Failure] = []
        self._hung: frozenset[str] = frozenset()
        self._hang_for = 60.0
        self._released = threading.Event()
        self.hanging = 0  # requests waiting in `hang` right now
        self._messages: dict[tuple[str, str], _Message] = {}
        self._ephemeral: list[_Message] = []
        self._uploads: dict[str, bytes | None] = {}
        self._ts = itertools.count(1)
        self._changed = threading.Condition(self._lock)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> FakeSlack:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                fake._handle(self)

            def do_GET(self) -> None:
                fake._handle(self)

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-slack", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeSlack:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "the fake Slack is not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """What `WebClient(base_url=...)` takes (with the trailing slash)."""
        return f"http://{LOOPBACK}:{self.port}/api/"

    # -- failures on demand ---------------------------------------------------------------------

    def fail(
        self,
        *,
        status: int,
        seconds: float,
        methods: Iterable[str] | None = None,
        retry_after: int = 1,
    ) -> None:
        """Answer `status` (429 with `Retry-After`, or 500) to `methods` (all when None) for a
        period of `seconds` from now."""
        with self._lock:
            self._failures.append(
                _Failure(
                    methods=frozenset(methods) if methods is not None else None,
                    status=status,
                    until=time.monotonic() + seconds,
                    retry_after=retry_after,
                )
            )

    def heal(self) -> None:
        with self._lock:
            self._failures.clear()

    def hang(self, methods: Iterable[str], *, seconds: float = 60.0) -> None:
        """Requests to `methods` wait (at most `seconds`) until `release()` before answering."""
        with self._lock:
            self._released.clear()
            self._hung = frozenset(methods)
            self._hang_for = seconds

    def release(self) -> None:
        """Let hung requests answer, and answer at once from now on."""
        with self._lock:
            self._hung = frozenset()
        self._released.set()

    def _failure_for(self, method: str) -> _Failure | None:
        now = time.monotonic()
        self._failures = [f for f in self._failures if f.until > now]
        for failure in self._failures:
            if failure.methods is None or method in failure.methods:
                return failure
        return None

    # -- what tests read ------------------------------------------------------------------------

    def calls(self, method: str | None = None, *, ok_only: bool = False) -> list[Call]:
        with self._lock:
            return [
                c for c in self._calls
                if (method is None or c.method == method) and (not ok_only or c.status == 200)
            ]

    def wait_for(
        self, predicate: Callable[[FakeSlack], bool], *, timeout: float = 10.0
    ) -> None:
        """Wait until `predicate(self)` holds (re-checked after every request), or raise."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the fake Slack did not reach the expected state")
                self._changed.wait(min(left, 0.2))

    def message(self, channel: str, ts: str) -> _Message | None:
        with self._lock:
            return self._messages.get((channel, ts))

    def messages(self) -> list[_Message]:
        with self._lock:
            return list(self._messages.values())

    def ephemeral(self, user: str | None = None) -> list[_Message]:
        with self._lock:
            return [m for m in self._ephemeral if user is None or m.user == user]

    def uploaded(self, file_id: str) -> bytes | None:
        with self._lock:
            return self._uploads.get(file_id)

    # -- the server -----------------------------------------------------------------------------

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(request.path)
        if url.path == SOCKET_PATH and request.headers.get("Upgrade", "").lower() == "websocket":
            self._serve_socket(request)
            return
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length) if length else b""
        host = request.headers.get("Host", "")
        if url.path.startswith("/upload/"):
            file_id = url.path.rsplit("/", 1)[-1]
            with self._lock:
                known = file_id in self._uploads
                if known:
                    self._uploads[file_id] = raw
                self._record(Call("upload", {"file_id": file_id, "bytes": len(raw)}, host,
                                  time.time(), 200 if known else 404))
            self._reply(request, 200 if known else 404, b"OK" if known else b"unknown upload")
            return
        if not url.path.startswith("/api/"):
            self._reply(request, 404, b"not found")
            return
        method = url.path[len("/api/"):]
        args = self._arguments(request, url.query, raw)
        with self._lock:
            hung = method in self._hung
            if hung:
                self.hanging += 1
                self._changed.notify_all()
        if hung:
            self._released.wait(self._hang_for)
            with self._lock:
                self.hanging -= 1
        with self._lock:
            failure = self._failure_for(method)
            if failure is not None:
                self._record(Call(method, args, host, time.time(), failure.status))
        if failure is not None:
            headers = {"Retry-After": str(failure.retry_after)} if failure.status == 429 else {}
            body = {"ok": False, "error": "ratelimited" if failure.status == 429 else "fatal_error"}
            self._reply(request, failure.status, json.dumps(body).encode(), headers=headers)
            return
        with self._lock:
            token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            wanted = self.app_token if method == "apps.connections.open" else self.bot_token
            if token != wanted:
                result: dict[str, Any] = {"ok": False, "error": "invalid_auth"}
            else:
                result = self._api(method, args)
            self._record(Call(method, args, host, time.time(), 200))
        self._reply(request, 200, json.dumps(result).encode())

    def _record(self, call: Call) -> None:
        self._calls.append(call)
        self._changed.notify_all()

    @staticmethod
    def _arguments(request: BaseHTTPRequestHandler, query: str, raw: bytes) -> dict[str, Any]:
        args: dict[str, Any] = dict(urllib.parse.parse_qsl(query))
        ctype = request.headers.get("Content-Type", "")
        if "json" in ctype and raw:
            loaded = json.loads(raw)
            if isinstance(loaded, dict):
                args.update(loaded)
        elif raw:
            args.update(urllib.parse.parse_qsl(raw.decode("utf-8", "replace")))
        for key in ("blocks", "files", "attachments"):
            if isinstance(args.get(key), str):
                with contextlib.suppress(ValueError):
                    args[key] = json.loads(args[key])
        return args

    @staticmethod
    def _reply(
        request: BaseHTTPRequestHandler,
        status: int,
        body: bytes,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        request.send_response(status)
        request.send_header("Content-Type", "application/json; charset=utf-8")
        request.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            request.send_header(k, v)
        request.end_headers()
        request.wfile.write(body)

    def _next_ts(self) -> str:
        return f"{1_700_000_000 + next(self._ts)}.{next(self._ts):06d}"

    def _api(self, method: str, args: Mapping[str, Any]) -> dict[str, Any]:  # under the lock
        if method == "auth.test":
            return {"ok": True, "url": "https://fake.slack.invalid/", "team": "fake",
                    "user": "zonemedic", "team_id": self.team_id, "user_id": self.bot_user_id,
                    "bot_id": "B0BOT"}
        if method == "apps.connections.open":
            return {"ok": True, "url": f"ws://{LOOPBACK}:{self.port}{SOCKET_PATH}?ticket=fake"}
        if method == "chat.postMessage":
            channel = str(args.get("channel", ""))
            if not channel:
                return {"ok": False, "error": "channel_not_found"}
            ts = self._next_ts()
            thread = args.get("thread_ts")
            self._messages[(channel, ts)] = _Message(
                channel, ts, str(args.get("text", "")), list(args.get("blocks") or []),
                str(thread) if thread else None,
            )
            return {"ok": True, "channel": channel, "ts": ts,
                    "message": {"text": args.get("text", ""), "ts": ts}}
        if method == "chat.update":
            key = (str(args.get("channel", "")), str(args.get("ts", "")))
            found = self._messages.get(key)
            if found is None:
                return {"ok": False, "error": "message_not_found"}
            found.text = str(args.get("text", found.text))
            found.blocks = list(args.get("blocks") or [])
            return {"ok": True, "channel": key[0], "ts": key[1]}
        if method == "chat.postEphemeral":
            user = str(args.get("user", ""))
            self._ephemeral.append(_Message(
                str(args.get("channel", "")), self._next_ts(), str(args.get("text", "")),
                list(args.get("blocks") or []), None, user=user,
            ))
            return {"ok": True, "message_ts": self._next_ts()}
        if method == "users.info":
            user = str(args.get("user", ""))
            if user not in self.users:
                return {"ok": False, "error": "user_not_found"}
            return {"ok": True, "user": {"id": user, "name": self.users[user],
                                         "real_name": self.users[user]}}
        if method == "usergroups.users.list":
            group = str(args.get("usergroup", ""))
            if group not in self.usergroups:
                return {"ok": False, "error": "no_such_subteam"}
            return {"ok": True, "users": list(self.usergroups[group])}
        if method == "files.getUploadURLExternal":
            file_id = f"F{len(self._uploads) + 1:08d}"
            self._uploads[file_id] = None
            return {"ok": True, "file_id": file_id,
                    "upload_url": f"http://{LOOPBACK}:{self.port}/upload/{file_id}"}
        if method == "files.completeUploadExternal":
            files = args.get("files") or []
            ids = [str(f.get("id")) for f in files if isinstance(f, dict)]
            if not ids or any(self._uploads.get(i) is None for i in ids):
                return {"ok": False, "error": "upload_not_found"}
            channel, thread = str(args.get("channel_id", "")), args.get("thread_ts")
            if thread and (channel, str(thread)) in self._messages:
                self._messages[(channel, str(thread))].files.extend(ids)
            return {"ok": True, "files": [{"id": i, "title": f.get("title")}
                                          for i, f in zip(ids, files, strict=True)]}
        if method == "conversations.replies":
            channel, ts = str(args.get("channel", "")), str(args.get("ts", ""))
            parent = self._messages.get((channel, ts))
            if parent is None:
                return {"ok": False, "error": "thread_not_found"}
            replies = sorted(
                (m for m in self._messages.values() if m.channel == channel and m.thread_ts == ts),
                key=lambda m: m.ts,
            )
            return {"ok": True, "messages": [
                {"ts": m.ts, "text": m.text, "blocks": m.blocks, "thread_ts": m.thread_ts}
                for m in [parent, *replies]
            ], "has_more": False}
        return {"ok": False, "error": "unknown_method"}

    # -- Socket Mode ----------------------------------------------------------------------------

    def _serve_socket(self, request: BaseHTTPRequestHandler) -> None:
        key = request.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + _WS_GUID).encode()).digest()).decode()
        request.send_response(101, "Switching Protocols")
        request.send_header("Upgrade", "websocket")
        request.send_header("Connection", "Upgrade")
        request.send_header("Sec-WebSocket-Accept", accept)
        request.end_headers()
        request.wfile.flush()
        ws = _WebSocket(request)
        with self._lock:
            self._sockets.append(ws)
            self._record(Call("socket.connect", {}, request.headers.get("Host", ""), time.time(),
                              101))
        ws.send(_TEXT, json.dumps({"type": "hello", "num_connections": 1,
                                   "connection_info": {"app_id": "A0FAKE"}}).encode())
        try:
            while True:
                frame = ws.receive()
                if frame is None:
                    break
                opcode, data = frame
                if opcode == _PING:
                    ws.send(_PONG, data)
                elif opcode == _CLOSE:
                    ws.send(_CLOSE, data[:2])
                    break
                elif opcode == _TEXT:
                    message = json.loads(data)
                    with self._lock:
                        if isinstance(message, dict) and "envelope_id" in message:
                            self._acks[str(message["envelope_id"])] = message.get("payload")
                        self._changed.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            ws.open = False
            with self._lock:
                self._sockets.remove(ws)
            request.close_connection = True

    @property
    def socket_connected(self) -> bool:
        with self._lock:
            return any(ws.open for ws in self._sockets)

    def socket_send(self, kind: str, payload: Mapping[str, Any]) -> str:
        """Send one Socket Mode envelope (`interactive`, `slash_commands`) to the connected app;
        returns its envelope id (see `acknowledged`)."""
        envelope_id = f"env-{time.monotonic_ns()}"
        with self._lock:
            sockets = [ws for ws in self._sockets if ws.open]
        if not sockets:
            raise RuntimeError("no Socket Mode connection is open")
        envelope = {"envelope_id": envelope_id, "type": kind, "payload": dict(payload),
                    "accepts_response_payload": kind != "interactive", "retry_attempt": 0,
                    "retry_reason": ""}
        sockets[-1].send(_TEXT, json.dumps(envelope).encode())
        return envelope_id

    def acknowledged(self, envelope_id: str) -> bool:
        with self._lock:
            return envelope_id in self._acks

    def action_payload(
        self, *, user: str, action_id: str, value: str, channel: str = "C0FAKE"
    ) -> dict[str, Any]:
        """The `block_actions` payload of a click (the JSON inside `action_body`)."""
        form = urllib.parse.parse_qs(self.action_body(user=user, action_id=action_id,
                                                      value=value, channel=channel).decode())
        payload: dict[str, Any] = json.loads(form["payload"][0])
        return payload

    # -- the agent's side: signed requests as a Slack user -------------------------------------

    def signed_headers(self, body: bytes, *, timestamp: int | None = None) -> dict[str, str]:
        ts = int(time.time()) if timestamp is None else timestamp
        return {
            "X-Slack-Request-Timestamp": str(ts),
            "X-Slack-Signature": sign(self.signing_secret, timestamp=ts, body=body),
            "Content-Type": "application/x-www-form-urlencoded",
        }

    def action_body(
        self, *, user: str, action_id: str, value: str, channel: str = "C0FAKE",
        message_ts: str = "1.000001",
    ) -> bytes:
        """A `block_actions` interaction payload (form-encoded, as Slack sends it)."""
        payload = {
            "type": "block_actions",
            "team": {"id": self.team_id, "domain": "fake"},
            "user": {"id": user, "username": self.users.get(user, user), "team_id": self.team_id},
            "api_app_id": "A0FAKE",
            "token": "legacy-verification-token",
            "trigger_id": f"trigger-{time.monotonic_ns()}",
            "channel": {"id": channel, "name": "ml-infra"},
            "container": {"type": "message", "message_ts": message_ts, "channel_id": channel},
            "message": {"ts": message_ts, "text": ""},
            "response_url": f"http://{LOOPBACK}:{self.port}/api/response_url",
            "actions": [{"type": "button", "action_id": action_id, "block_id": "decision",
                         "value": value, "action_ts": f"{time.time():.6f}"}],
        }
        return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()

    def command_body(
        self, *, user: str, text: str, command: str = "/zonemedic", channel: str = "C0FAKE"
    ) -> bytes:
        """A slash-command request body (form-encoded, as Slack sends it)."""
        return urllib.parse.urlencode({
            "token": "legacy-verification-token",
            "team_id": self.team_id,
            "channel_id": channel,
            "channel_name": "ml-infra",
            "user_id": user,
            "user_name": self.users.get(user, user),
            "command": command,
            "text": text,
            "api_app_id": "A0FAKE",
            "response_url": f"http://{LOOPBACK}:{self.port}/api/response_url",
            "trigger_id": f"trigger-{time.monotonic_ns()}",
        }).encode()

    @staticmethod
    def post(
        url: str, body: bytes, headers: Mapping[str, str], *, timeout: float = 10.0
    ) -> AgentResponse:
        """POST `body` to the agent's endpoint `url` (loopback only) and return its answer."""
        parts = urllib.parse.urlsplit(url)
        if parts.hostname not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError(f"the fake Slack only talks to loopback, not {parts.hostname!r}")
        started = time.perf_counter()
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        try:
            conn.request("POST", parts.path or "/", body=body, headers=dict(headers))
            response = conn.getresponse()
            data = response.read()
            return AgentResponse(response.status, data, time.perf_counter() - started)
        finally:
            conn.close()

    def click(
        self, url: str, *, user: str, action_id: str, value: str, channel: str = "C0FAKE",
        message_ts: str = "1.000001",
    ) -> AgentResponse:
        """Click a button as `user`: a signed `block_actions` request to the agent at `url`."""
        body = self.action_body(user=user, action_id=action_id, value=value, channel=channel,
                                message_ts=message_ts)
        return self.post(url, body, self.signed_headers(body))

    def command(self, url: str, *, user: str, text: str, channel: str = "C0FAKE") -> AgentResponse:
        """Type `/zonemedic {text}` as `user`: a signed slash-command request to the agent."""
        body = self.command_body(user=user, text=text, channel=channel)
        return self.post(url, body, self.signed_headers(body))
