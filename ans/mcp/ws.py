"""The MCP registry's WebSocket, ``{base}/ws`` (seed 002 section 5.3): the
ASGI ``websocket`` scope of :class:`~ans.app.AnsApp` when ``[mcp]`` is on.

A translation of frames, never a second policy: the handshake passes the
same gate as the REST surface (the client address's rate limit, then
authentication from the upgrade request's headers: bearer token, client
certificate, or the open mode's identity headers), and every ANNOUNCE or
QUERY frame is charged to the client address like a request and answered by
the same registry object as ``POST {base}/agents`` / ``POST {base}/query``
(:class:`WsBackend`). Frames are :mod:`.ws_frames`; subscriptions are
:mod:`.feed`'s.

The handshake is refused with an HTTP answer carrying the seed's error
object (``{"error": {"code": "Err...", "message"}}``): 404 for another path,
400 without the ``agent-discovery`` subprotocol, 401 ``ErrAuth``, 429.

Closing codes (all audited with the reason):

====  =========================================================
1000  the client closed, or the server is stopping (1001)
1008  policy violation: ``max_strikes`` malformed or rate-limited frames
1011  keepalive ping timeout (:mod:`.ws_heartbeat`)
1013  a subscription's queue was full: the subscriber is too slow
====  =========================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
import structlog

from ans.governance.audit import AuditLog
from ans.protocol.binding import header_map
from ans.protocol.errors import (
    AgtpError,
    BadRequest,
    ErrorCode,
    InvalidBody,
    NotFound,
    ServerError,
    Unavailable,
)
from ans.protocol.mcp_messages import MAX_MESSAGE_BYTES
from ans.protocol.messages import encode_error

from ..asgi_types import Receive, Scope, Send
from ..gate import Credentials, RequestGate
from . import ws_frames
from .feed import Event, FeedHub, Subscriber, event_body
from .ws_frames import Control, Frame

log = structlog.get_logger("ans.mcp.ws")

SUBPROTOCOL = "agent-discovery"
MAX_FRAME = MAX_MESSAGE_BYTES + 1  # bytes of one WebSocket message: type byte + message
DEFAULT_VERSION = "v1.0"
POLICY_VIOLATION, GOING_AWAY, TRY_AGAIN_LATER = 1008, 1001, 1013
MAX_STRIKES = 8  # bad frames (malformed, refused for their rate) before 1008
MAX_SUBSCRIPTIONS = 8  # per connection
CLOSE_WRITE_TIMEOUT = 5.0  # s the close frame may wait for a client that does not read
GATE_METHOD = "MCP-WS"  # the rate limiter's and audit records' name for the upgrade
STRIKES = frozenset({400, 413, 422, 429})  # answers that count towards the 1008 close
REFUSED = frozenset({401, 403})  # refusals the client address pays extra for (as on REST)


@dataclass(frozen=True, slots=True)
class Reply:
    """A registry answer: HTTP-like status and the seed's body."""

    status: int
    body: dict[str, Any]


class WsBackend(Protocol):
    """The registry as the WebSocket needs it (the same objects as REST)."""

    def authenticate(
        self, headers: dict[str, str], creds: Credentials, method: str = GATE_METHOD
    ) -> Any:
        """The caller of a handshake, and again of every frame (``method``:
        its rate limit per Agent-ID; a token that expired meanwhile is
        refused): AgtpError 401 / 429 otherwise, audited."""
        ...

    async def announce(self, message: dict[str, Any], caller: Any) -> Reply: ...
    async def query(self, message: dict[str, Any], caller: Any) -> Reply: ...

    def error(self, exc: AgtpError, version: str | None) -> Reply:
        """The seed's error answer (``ErrMalformedPayload`` ...) for ``exc``."""
        ...

    def version_of(self, message: dict[str, Any]) -> str:
        """The version to answer ``message`` in (the client's, when it is
        supported)."""
        ...


class WsSurface:
    def __init__(
        self,
        backend: WsBackend,
        hub: FeedHub,
        gate: RequestGate,
        audit: AuditLog,
        base_path: str,
        max_frame_bytes: int,
        *,
        max_strikes: int = MAX_STRIKES,
        max_subscriptions: int = MAX_SUBSCRIPTIONS,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.backend = backend
        self.hub = hub
        self.gate = gate
        self.audit = audit
        self.path = base_path.rstrip("/") + "/ws"
        self.max_frame_bytes = max_frame_bytes
        self.max_strikes = max_strikes
        self.max_subscriptions = max_subscriptions
        self.cpu_clock = cpu_clock
        self.sessions: set[Session] = set()  # open now
        self.stopping = False

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One WebSocket connection; never raises to the ASGI server."""
        client = scope.get("client")
        address = str(client[0]) if client else None
        try:
            first = await receive()
            if first.get("type") != "websocket.connect":
                return
            headers = header_map(scope.get("headers") or [])
            creds = Credentials.from_request(
                headers, scope.get("extensions"), client_address=address
            )
            caller = self.admit(scope, headers, creds)
        except Exception as exc:
            await self.refuse(scope, send, exc)
            return
        await send({"type": "websocket.accept", "subprotocol": SUBPROTOCOL})
        session = Session(self, send, creds, headers, caller, address)
        self.sessions.add(session)
        if self.stopping:
            session.stop(GOING_AWAY, "server shutting down")
        try:
            await session.run(receive)
        finally:
            self.sessions.discard(session)
            session.end()

    def going_away(self) -> None:
        """The server is stopping: close every session with 1001 (their
        connections would otherwise hold the drain for its whole grace)."""
        self.stopping = True
        for session in list(self.sessions):
            session.stop(GOING_AWAY, "server shutting down")

    def admit(self, scope: Scope, headers: dict[str, str], creds: Credentials) -> Any:
        """The handshake's checks, in order: path (404), subprotocol (400),
        the client address's limit (429), authentication (401)."""
        path = str(scope.get("path", ""))
        if path.rstrip("/") != self.path:
            raise NotFound(f"no WebSocket at {path[:100]}; the MCP registry's is {self.path}")
        offered = [str(p) for p in scope.get("subprotocols") or ()]
        if SUBPROTOCOL not in offered:
            raise BadRequest(
                f"the WebSocket subprotocol must be {SUBPROTOCOL!r} "
                f"(offered: {', '.join(p[:40] for p in offered[:8]) or 'none'})"
            )
        self.gate.limit_address(GATE_METHOD, creds, headers)
        return self.backend.authenticate(headers, creds)

    async def refuse(self, scope: Scope, send: Send, exc: Exception) -> None:
        """An HTTP answer instead of the upgrade (hypercorn's websocket.http.response
        extension), or a bare 403 without it."""
        err = self.typed(exc)
        reply = self.backend.error(err, None)
        if err.status != 404:  # a refused upgrade is audited (never its headers' values)
            client = scope.get("client")
            self.audit.record(
                "mcp_ws_refused",
                status=reply.status,
                code=err.code,
                reason=err.message[:300],
                method=GATE_METHOD,
                client_address=str(client[0]) if client else None,
            )
        extensions = scope.get("extensions") or {}
        if "websocket.http.response" not in extensions:
            await send({"type": "websocket.close", "code": POLICY_VIOLATION})
            return
        body = orjson.dumps(reply.body)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *(
                (k.lower().encode("latin-1"), v.encode("latin-1", "replace"))
                for k, v in err.headers
            ),
        ]
        start = {"type": "websocket.http.response.start", "status": reply.status}
        await send({**start, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})

    @staticmethod
    def typed(exc: Exception) -> AgtpError:
        if isinstance(exc, AgtpError):
            return exc
        log.exception("unhandled error on the MCP WebSocket")
        return ServerError("internal error; see the server log")


class Session:
    """One accepted connection: its frames, its subscriptions, its close."""

    def __init__(
        self,
        surface: WsSurface,
        send: Send,
        creds: Credentials,
        headers: dict[str, str],
        caller: Any,
        address: str | None,
    ) -> None:
        self.surface = surface
        self._send = send
        self.creds = creds
        self.headers = headers
        self.caller = caller
        self.address = address
        self.strikes = 0
        self.subs: dict[str, tuple[Subscriber, asyncio.Task[None], str]] = {}
        self.closing: asyncio.Future[tuple[int, str]] = asyncio.get_running_loop().create_future()
        self.lock = asyncio.Lock()

    # -- the loop ----------------------------------------------------------------
    async def run(self, receive: Receive) -> None:
        code, reason = 1000, "client closed"
        while True:
            receiving: asyncio.Future[Any] = asyncio.ensure_future(receive())
            waiting: set[asyncio.Future[Any]] = {receiving, self.closing}
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if self.closing in done:
                receiving.cancel()
                code, reason = self.closing.result()
                await self.close(code, reason)
                break
            message = receiving.result()
            if message["type"] == "websocket.disconnect":
                code, reason = int(message.get("code", 1005)), "client closed"
                break
            if message["type"] == "websocket.receive":
                await self.frame(message.get("bytes"), message.get("text"))
        self.record_close(code, reason)

    def stop(self, code: int, reason: str) -> None:
        """Close the connection soon (from any task on the loop)."""
        if not self.closing.done():
            self.closing.set_result((code, reason))

    async def close(self, code: int, reason: str) -> None:
        for _, task, _ in list(self.subs.values()):
            task.cancel()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_WRITE_TIMEOUT):
                await self._send({"type": "websocket.close", "code": code, "reason": reason})

    def end(self) -> None:
        """Forget every subscription (the connection is gone)."""
        for sub, task, _ in list(self.subs.values()):
            task.cancel()
            self.surface.hub.unsubscribe(sub)
        self.subs.clear()

    def record_close(self, code: int, reason: str) -> None:
        if code in (1000, 1001, 1005, 1006):
            return
        self.surface.audit.record("mcp_ws_closed", status=code, reason=reason, **self.who())

    def who(self) -> dict[str, Any]:
        return {
            "method": GATE_METHOD,
            "client_address": self.address,
            "agent_id": (self.headers.get("agent-id") or "")[:256] or None,
            "principal_id": (self.headers.get("principal-id") or "")[:256] or None,
        }

    async def send(self, body: dict[str, Any]) -> None:
        async with self.lock:
            await self._send({"type": "websocket.send", "bytes": ws_frames.encode(body)})

    # -- one frame -----------------------------------------------------------------
    async def frame(self, data: bytes | None, text: str | None) -> None:
        surface = self.surface
        control = Control(ws_frames.request_id_hint(data))
        version: str | None = None
        started = surface.cpu_clock()
        reply: Reply | None = None
        try:
            surface.gate.limit_address(
                "MCP-" + _kind_name(data), self.creds, self.headers, len(data or text or "")
            )
            frame = ws_frames.parse_frame(data, text, surface.max_frame_bytes)
            control = frame.control
            version = surface.backend.version_of(frame.message)
            try:  # as every REST request: the credentials again, the Agent-ID's limit
                self.caller = surface.backend.authenticate(
                    self.headers, self.creds, "MCP-" + frame.name
                )
            except AgtpError as exc:
                if exc.status == 401:  # e.g. the token expired: the session ends
                    self.stop(POLICY_VIOLATION, "the credentials are no longer valid")
                raise
            reply = await self.answer(frame, version)
        except Exception as exc:  # the registry answers its own refusals; these are ours
            reply = surface.backend.error(WsSurface.typed(exc), version)
        finally:
            refused = reply is not None and reply.status in REFUSED
            surface.gate.settle(self.creds, surface.cpu_clock() - started, refused)
        if reply.status in STRIKES:  # malformed (ours or the registry's) or over the limit
            self.strikes += 1
        body = {**reply.body, "status": reply.status}
        if control.request_id is not None:
            body["request_id"] = control.request_id
        await self.send(body)
        if self.strikes >= surface.max_strikes:
            self.stop(POLICY_VIOLATION, f"{self.strikes} malformed or refused frames")

    async def answer(self, frame: Frame, version: str) -> Reply:
        backend = self.surface.backend
        if frame.kind == ws_frames.ANNOUNCE:
            return await backend.announce(frame.message, self.caller)
        if frame.control.unsubscribe is not None:
            return self.unsubscribe(frame.control.unsubscribe, version)
        if not frame.control.subscribe:
            return await backend.query(frame.message, self.caller)
        return await self.subscribe(frame, version)

    async def subscribe(self, frame: Frame, version: str) -> Reply:
        """Subscribe first (no change between the answer and the first event
        is missed), then answer the query; a refused query subscribes nothing."""
        if len(self.subs) >= self.surface.max_subscriptions:
            raise BadRequest(
                f"a connection holds at most {self.surface.max_subscriptions} subscriptions"
            )
        query = frame.message.get("query")
        capability = query.get("capability") if isinstance(query, dict) else None
        agent_id = query.get("agent_id") if isinstance(query, dict) else None
        hub = self.surface.hub
        try:
            sub = await hub.subscribe(
                None if capability in (None, "", "*") else str(capability),
                str(agent_id) if isinstance(agent_id, str) else None,
                on_drop=self.dropped,
            )
        except RuntimeError as exc:  # this process's subscriptions are at their bound
            raise Unavailable(str(exc), headers=(("retry-after", "30"),)) from None
        try:
            reply = await self.surface.backend.query(frame.message, self.caller)
        except BaseException:
            hub.unsubscribe(sub)
            raise
        if reply.status != 200:
            hub.unsubscribe(sub)
            return reply
        task = asyncio.create_task(self.pump(sub, version), name=f"ans-mcp-ws-{sub.id}")
        self.subs[sub.id] = (sub, task, version)
        self.surface.audit.record(
            "mcp_ws_subscribed",
            status=200,
            subscription=sub.id,
            capability=sub.capability,
            watched_agent_id=sub.agent_id,
            **self.who(),
        )
        body = dict(reply.body)
        body["subscription"] = {"id": sub.id, "events": ["new", "updated", "removed"]}
        return Reply(reply.status, body)

    def unsubscribe(self, sub_id: str, version: str) -> Reply:
        found = self.subs.pop(sub_id, None)
        if found is None:
            raise InvalidBody(f"no subscription {sub_id} on this connection")
        sub, task, _ = found
        task.cancel()
        self.surface.hub.unsubscribe(sub)
        return Reply(200, {"protocol_version": version, "unsubscribed": sub_id})

    async def pump(self, sub: Subscriber, version: str) -> None:
        """Send ``sub``'s events as they come (a client that does not read
        holds this task in ``send``; its queue then fills and the hub drops it)."""
        while True:
            event: Event = await sub.queue.get()
            await self.send(event_body(event, sub, version))
            sub.delivered += 1

    def dropped(self, sub: Subscriber) -> None:
        """The hub dropped ``sub`` (its queue was full): close the connection."""
        self.surface.audit.record(
            "mcp_subscriber_dropped",
            status=TRY_AGAIN_LATER,
            subscription=sub.id,
            queued=sub.queue.qsize(),
            delivered=sub.delivered,
            **self.who(),
        )
        self.stop(TRY_AGAIN_LATER, f"subscription {sub.id}: too slow, {sub.queue.qsize()} queued")


def _kind_name(data: bytes | None) -> str:
    if data:
        return ws_frames.NAMES.get(data[0], "FRAME")
    return "FRAME"


async def refuse_upgrade(scope: Scope, receive: Receive, send: Send) -> None:
    """Refuse a WebSocket upgrade this server does not serve: 404 with the
    AGTP error body (a bare close, i.e. 403, when the server lacks the
    ASGI ``websocket.http.response`` extension)."""
    first = await receive()
    if first.get("type") != "websocket.connect":
        return
    if "websocket.http.response" not in (scope.get("extensions") or {}):
        await send({"type": "websocket.close", "code": POLICY_VIOLATION})
        return
    path = str(scope.get("path", ""))[:100]
    body = encode_error(404, None, ErrorCode.NOT_FOUND, f"no WebSocket is served at {path}")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "websocket.http.response.start", "status": 404, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})
