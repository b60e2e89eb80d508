"""The HAIDIP invocation gateway (seed 003 section 5.2, issue 27 item 5):
``POST {base}/agents/{id}/invoke`` forwards the caller's JSON body to the
agent's HTTP(S) endpoint and streams the agent's answer back.

A translation, never a second policy. In order:

1. the client address limit (:meth:`RequestGate.limit_address`), then
   authentication and the per-Agent-ID limit (:meth:`RequestGate.authenticate_and_limit`;
   identity headers, a bearer token, a client certificate or an API key — a
   caller with an API key need not send identity headers);
2. the per-caller invocation limit (429 + Retry-After);
3. the core's DESCRIBE rules with the ``agents:invoke`` scope instead of
   ``discovery:query`` (403 ``forbidden``, audited): an agent in a zone the
   caller may not see is 404 as an unknown one, Suspended 503, retired 410;
4. the target: the agent's first http(s) binding, then the per-target
   limit (429), the Content-Type (415) and a declared Content-Length (413),
   the address policy (:mod:`.haidip_invoke_upstream`);
5. only then the body: strict JSON, at most ``max_body_bytes`` (413 as soon
   as more arrives);
6. the call (httpx, HTTP/2 or HTTP/1.1): 502 ``upstream_unreachable``, 504
   ``upstream_timeout``; the answer is relayed chunk by chunk (``text/event-stream``
   included) up to ``max_response_bytes``; past that, or when the agent stops
   sending for longer than its read timeout, the relayed answer ends there
   and the audit record says ``truncated`` / ``upstream_timeout``.

Every invocation is audited (``invocation``: caller, target, endpoint
origin, status, bytes each way, duration, outcome — never a body) and every
refusal too (``invocation_refused``). Errors use the HAIDIP surface's error object
(:mod:`.haidip_errors`: ``AgentError`` 502, ``AgentTimeout`` 504, ... with
the core's code as ``detail``). Nothing here raises to the ASGI server.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import structlog

from ans.governance.policy import AGENTS_INVOKE
from ans.governance.ratelimit import RateLimiter
from ans.protocol import jsonstrict
from ans.protocol.binding import header_map
from ans.protocol.envelope import has_identity
from ans.protocol.errors import (
    AgtpError,
    BodyTooLarge,
    ErrorCode,
    InvalidBody,
    NotFound,
    RateLimited,
    RequestTimeout,
    ServerError,
    UnsupportedMethod,
)
from ans.protocol.messages import DescribeRequest, Identity, parse_identity

from ..asgi_types import Receive, Scope, Send
from ..config import ConfigError
from ..gate import REFUSED_AFTER_PARSING, Credentials, RequestGate
from ..invoke_config import InvokeConfigError, InvokeSettings
from ..profile_metadata import profile_canonical_id
from ..service import AnsService
from .haidip_errors import haidip_error
from .haidip_invoke_upstream import (
    Resolver,
    Target,
    check_address,
    downstream_headers,
    make_client,
    select_target,
    system_resolve,
    timeout_error,
    too_large,
    unreachable,
    upstream_headers,
)
from .intake import check_json_type
from .profile import Asking

log = structlog.get_logger("ans.haidip.invoke")

INVOKE = "INVOKE"  # the gate's and the audit records' method name
MAX_AGENT_ID_CHARS = 512
REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
AUDITED_CHARS = 256
# A refused HTTP/1.1 request's unread body up to this size is read and dropped
# (within DRAIN_SECONDS) so its connection stays usable; a larger one closes it.
DRAIN_LIMIT = 64 * 1024
DRAIN_SECONDS = 1.0


class ClientGone(Exception):
    """The caller disconnected before its body arrived."""


@dataclass(slots=True)
class _Exchange:
    """What one request has consumed so far (a refusal drains the rest)."""

    body_read: bool = False


class InvokeSurface:
    """``POST {base}/agents/{id}/invoke``; also a background task of the app
    (its :meth:`stop` closes the upstream connections)."""

    def __init__(
        self,
        service: AnsService,
        gate: RequestGate,
        settings: InvokeSettings,
        *,
        base_path: str,
        body_timeout: float,
        client: httpx.AsyncClient | None = None,
        cpu_clock: Callable[[], float] = time.thread_time,
        monotonic: Callable[[], float] = time.monotonic,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        environ: Mapping[str, str] | None = None,
        resolve: Resolver = system_resolve,
    ) -> None:
        self.service = service
        self.gate = gate
        self.settings = settings
        self.prefix = base_path + "/agents/"
        self.body_timeout = body_timeout
        self.cpu_clock = cpu_clock
        self.monotonic = monotonic
        self.new_id = new_id
        self.resolve = resolve
        limits = service.config.rate_limit
        self.callers = RateLimiter(settings.caller_limit(limits), monotonic)
        self.targets = RateLimiter(settings.agent_limit(limits), monotonic, key_field="target")
        try:
            self.secret = settings.gateway_secret(environ)
            self.client = client or make_client(settings, resolve)
        except InvokeConfigError as exc:
            raise ConfigError(str(exc)) from None
        except OSError as exc:  # ssl.SSLError is an OSError
            raise ConfigError(f"[haidip.invoke] client certificate or CA bundle: {exc}") from None

    def owns(self, path: str) -> bool:
        return path.startswith(self.prefix) and path.endswith("/invoke")

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        await self.client.aclose()
        for limit, limiter in (("invoke_caller", self.callers), ("invoke_target", self.targets)):
            for note in limiter.flush():
                self.service.audit.record(
                    note.event, status=429, code=ErrorCode.RATE_LIMITED, limit=limit, **note.fields
                )

    # -- the ASGI side ---------------------------------------------------------------
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request; never raises."""
        client = scope.get("client")
        address = str(client[0]) if client else None
        request_id = f"inv-{self.new_id()}"
        who: dict[str, Any] = {"agent_id": None, "principal_id": None}
        target_id: str | None = None
        creds = Credentials(client_address=address)
        started = self.cpu_clock()
        refused = False
        exchange = _Exchange()
        try:
            headers = header_map(scope["headers"])
            sent_id = headers.get(self.settings.request_id_header.lower(), "").strip()
            if REQUEST_ID_RE.fullmatch(sent_id):
                request_id = sent_id
            who = _claimed(headers)
            target_id = self.agent_id_of(str(scope["path"]))
            if str(scope["method"]).upper() != "POST":
                raise UnsupportedMethod(
                    f"method {str(scope['method'])[:16]} is not allowed here; use POST",
                    headers=(("allow", "POST"),),
                )
            creds = Credentials.from_request(
                headers, scope.get("extensions"), client_address=address
            )
            declared = _content_length(headers)
            self.gate.limit_address(INVOKE, creds, headers, min(declared or 0, 1 << 20))
            try:
                identity = self.authenticate(headers, creds, request_id)
            except AgtpError as exc:
                refused = exc.status in REFUSED_AFTER_PARSING
                raise
            who = {"agent_id": identity.agent_id, "principal_id": identity.principal_id}
            await self.invoke(
                identity, target_id, headers, declared, request_id, (receive, exchange), send, who
            )
        except Exception as exc:
            if isinstance(exc, AgtpError) and exc.status in (451, 453):
                refused = True
            close = await self._drain(scope, receive, exchange)
            await self.refuse(exc, send, request_id, who, target_id, close=close)
        finally:
            self.gate.settle(creds, self.cpu_clock() - started, refused)

    def agent_id_of(self, path: str) -> str:
        """The agent id between the prefix and ``/invoke`` (the ASGI path is
        already percent-decoded: an id may hold ``/``)."""
        agent_id = path[len(self.prefix) : -len("/invoke")]
        if not agent_id or len(agent_id) > MAX_AGENT_ID_CHARS:
            raise NotFound(f"no agent at {path[:120]}")
        return agent_id

    def authenticate(
        self, headers: Mapping[str, str], creds: Credentials, request_id: str
    ) -> Identity:
        """The caller's effective identity (gate: authentication, Agent-ID limit)."""
        if creds.api_key is not None and not has_identity(headers):
            identity = self.gate.identity_from_key(INVOKE, creds, request_id)
        else:
            identity = parse_identity(headers)
        asking = self.gate.authenticate_and_limit(INVOKE, Asking(identity, request_id), creds)
        return asking.identity

    async def invoke(
        self,
        identity: Identity,
        target_id: str,
        headers: Mapping[str, str],
        declared: int | None,
        request_id: str,
        reading: tuple[Receive, _Exchange],
        send: Send,
        who: dict[str, Any],
    ) -> None:
        s = self.settings
        receive, exchange = reading
        self._limit(self.callers, identity.agent_id, "invoke_caller", who, request_id, target_id)
        described = self._describe(identity, request_id, target_id)
        manifest, caps = described["manifest"], described.get("capabilities") or {}
        cid = str(manifest.get("canonical_id", target_id))
        target = select_target(manifest, caps, s)
        timeouts = s.timeouts(cid, target_id, str(manifest.get("manifest_uri", "")))
        self._limit(self.targets, cid, "invoke_target", who, request_id, cid)
        _check_json_type(headers)
        if declared is not None and declared > s.max_body_bytes:
            raise BodyTooLarge(f"the body is {declared} bytes; the limit is {s.max_body_bytes}")
        await check_address(target, s, timeouts.connect, self.resolve)
        body = await self._read_body(receive, s.max_body_bytes)
        exchange.body_read = True
        if not body.strip():
            raise InvalidBody("the invocation body must be JSON (the agent's input)")
        jsonstrict.loads(body, max_bytes=s.max_body_bytes)  # 400 unless strict JSON
        request = self.client.build_request(
            "POST",
            target.url,
            headers=upstream_headers(headers, s, request_id, self.secret),
            content=body,
            timeout=httpx.Timeout(
                connect=timeouts.connect,
                read=timeouts.read,
                write=timeouts.read,
                pool=timeouts.connect,
            ),
        )
        began = self.monotonic()
        try:
            response = await self.client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise timeout_error(exc, target) from None
        except (httpx.HTTPError, OSError) as exc:
            raise unreachable(exc, target) from None
        relay = (target, cid, request_id, len(body), began)
        await self._relay(response, relay, receive, send, who)

    async def _relay(
        self,
        response: httpx.Response,
        relay: tuple[Target, str, str, int, float],
        receive: Receive,
        send: Send,
        who: dict[str, Any],
    ) -> None:
        """Relay the agent's answer chunk by chunk, bounded; stop when the
        caller goes away (an endless event stream must not outlive it); audit it."""
        target, request_id = relay[0], relay[2]
        limit = self.settings.max_response_bytes
        outcome = "complete"
        size = 0
        audited = False
        gone = asyncio.ensure_future(receive())  # the body is read: only a disconnect comes
        try:
            length = response.headers.get("content-length", "")
            if length.isdigit() and int(length) > limit:
                outcome = "refused_too_large"
                raise too_large(target, limit)
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": downstream_headers(
                        response, request_id, self.settings.request_id_header
                    ),
                }
            )
            try:
                async for chunk in response.aiter_raw():
                    if gone.done():
                        outcome = "client_gone"
                        return
                    if size + len(chunk) > limit:
                        outcome = "truncated"
                        break
                    size += len(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except httpx.TimeoutException:
                outcome = "upstream_timeout"
            except httpx.HTTPError:
                outcome = "upstream_broken"
            await response.aclose()
            # audited before the answer ends: a caller holding the whole answer
            # finds its record in the log
            audited = self._audit_invocation(response, relay, who, size, outcome)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            gone.cancel()
            await response.aclose()
            if not audited:
                self._audit_invocation(response, relay, who, size, outcome)

    def _audit_invocation(
        self,
        response: httpx.Response,
        relay: tuple[Target, str, str, int, float],
        who: dict[str, Any],
        size: int,
        outcome: str,
    ) -> bool:
        """One ``invocation`` record: who, what, how it went; never a body."""
        target, cid, request_id, bytes_in, began = relay
        self.service.audit.record(
            "invocation",
            method=INVOKE,
            **who,
            task_id=request_id,
            target=cid,
            endpoint=target.origin,
            http_version=response.http_version,
            status=response.status_code,
            bytes_in=bytes_in,
            bytes_out=size,
            duration_ms=round((self.monotonic() - began) * 1000.0, 1),
            outcome=outcome,
        )
        return True

    # -- helpers -----------------------------------------------------------------------
    def _describe(self, identity: Identity, request_id: str, target_id: str) -> dict[str, Any]:
        """The core's DESCRIBE with ``agents:invoke``: ``target_id`` is a
        canonical id or a name, else a profile id (as GET {profile}/agents/{id})."""

        def describe(cid: str) -> dict[str, Any]:
            req = DescribeRequest(identity, request_id, cid)
            return self.service.describe(req, required=AGENTS_INVOKE, method=INVOKE, signed=False)

        try:
            return describe(target_id)
        except NotFound:
            mapped = profile_canonical_id(target_id)
            if mapped == target_id:
                raise
            return describe(mapped)

    def _limit(
        self,
        limiter: RateLimiter,
        key: str,
        name: str,
        who: dict[str, Any],
        request_id: str,
        target: str,
    ) -> None:
        decision = limiter.check(key, INVOKE)
        for note in decision.notes:
            fields: dict[str, Any] = {"status": 429, "code": ErrorCode.RATE_LIMITED, "limit": name}
            if note.fields.get("summary"):
                fields.update(note.fields)
            else:
                fields.update(
                    method=INVOKE, **who, task_id=request_id, target=target[:AUDITED_CHARS]
                )
                fields.update(note.fields)
            self.service.audit.record(note.event, **fields)
        if not decision.allowed:
            whose = "caller" if name == "invoke_caller" else "agent"
            raise RateLimited(
                f"too many invocations of this {whose}; retry after {decision.retry_after}s",
                headers=(("retry-after", str(decision.retry_after)),),
            )

    async def _read_body(self, receive: Receive, limit: int) -> bytes:
        """The request body, at most ``limit`` bytes (413 as soon as it is
        more), within the body timeout (408)."""
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.body_timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise ClientGone()
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise BodyTooLarge(f"the body exceeds the limit of {limit} bytes")
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            raise RequestTimeout(
                f"the request body did not arrive within {self.body_timeout:g} s"
            ) from None

    async def _drain(self, scope: Scope, receive: Receive, exchange: _Exchange) -> bool:
        """Before an HTTP/1.x refusal, read and drop an unread body of at
        most DRAIN_LIMIT bytes; True when the connection must close instead."""
        if exchange.body_read or not str(scope.get("http_version", "")).startswith("1"):
            return False
        for name, value in scope.get("headers", ())[:64]:
            if name.lower() == b"content-length" and value.strip().isdigit():
                if int(value) > DRAIN_LIMIT:
                    return True  # not worth reading: the connection closes
        size = 0
        try:
            async with asyncio.timeout(DRAIN_SECONDS):
                while size <= DRAIN_LIMIT:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return True
                    size += len(message.get("body", b""))
                    if not message.get("more_body", False):
                        return size > DRAIN_LIMIT
        except TimeoutError:
            return True
        return True

    async def refuse(
        self,
        exc: Exception,
        send: Send,
        request_id: str,
        who: dict[str, Any],
        target_id: str | None,
        *,
        close: bool = False,
    ) -> None:
        """Answer (when the answer has not started) and audit one refusal;
        ``close``: tell an HTTP/1.x client the connection ends here."""
        if isinstance(exc, ClientGone):
            err_status, code = 499, "client_gone"
            error = None
        else:
            failure = exc if isinstance(exc, AgtpError) else None
            if failure is None:
                log.exception("unhandled error in the invocation gateway")
                failure = ServerError("internal error; see the server log")
            error = haidip_error(failure, request_id)
            # audited with the core's code (upstream_timeout, not_invocable, ...)
            err_status, code = error.status, str(failure.code)
        self.service.audit.record(
            "invocation_refused",
            method=INVOKE,
            **who,
            task_id=request_id,
            target=target_id[:AUDITED_CHARS] if target_id else None,
            status=err_status,
            code=code,
            reason=str(getattr(exc, "message", "client disconnected"))[:AUDITED_CHARS],
        )
        if error is None:
            return
        data = orjson.dumps(error.body)
        out = [
            (b"content-type", b"application/json"),
            (b"cache-control", b"no-store"),
            (self.settings.request_id_header.lower().encode(), request_id.encode()),
            (b"content-length", str(len(data)).encode()),
            *((k.encode("latin-1"), v.encode("latin-1", "replace")) for k, v in error.headers),
        ]
        if close:
            out.append((b"connection", b"close"))
        try:
            await send({"type": "http.response.start", "status": error.status, "headers": out})
            await send({"type": "http.response.body", "body": data})
        except Exception:  # the answer had started (or the client left): nothing more to say
            log.info("invocation refusal not sent", request_id=request_id, code=code)


def _claimed(headers: Mapping[str, str]) -> dict[str, Any]:
    """Who the request says it is (before authentication), bounded, for the audit log."""
    return {
        "agent_id": (headers.get("agent-id") or "").strip()[:AUDITED_CHARS] or None,
        "principal_id": (headers.get("principal-id") or "").strip()[:AUDITED_CHARS] or None,
    }


def _content_length(headers: Mapping[str, str]) -> int | None:
    value = headers.get("content-length", "").strip()
    return int(value) if value.isdigit() and len(value) < 20 else None


def _check_json_type(headers: Mapping[str, str]) -> None:
    check_json_type(headers, "the gateway forwards application/json")
