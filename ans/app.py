"""The ASGI application served by hypercorn (HTTP/2, h2c, HTTP/1.1).

Routes an AGTP method (``DISCOVER``, ``DESCRIBE``, ``ACTIVATE``,
``LIFECYCLE``; as ``:method DISCOVER`` on any path, or ``POST /agtp``
with ``AGTP-Method``) to :class:`AnsService`, plus ``GET
/.well-known/jwks.json`` and ``GET /healthz``; requests under a REST
surface's base path (the profile's JSON binding, HAIDIP, the MCP registry;
:mod:`ans.surfaces.mount`) and the MCP registry's WebSocket go to that
surface. Background tasks (the freshness scheduler, the surfaces' own)
start and stop with the ASGI lifespan. Every failure becomes a typed AGTP
error body; unexpected exceptions become a 500 with no traceback on the
wire (the traceback goes to the operational log).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from ans.governance.audit import rfc3339
from ans.protocol.binding import (
    HTTP_METHODS,
    POST_ENDPOINT,
    agtp_method,
    header_map,
    refused_headers_task_id,
    response_headers,
)
from ans.protocol.dialect import NEWER_CONTENT_TYPE, Dialect, recognise
from ans.protocol.errors import (
    AgtpError,
    BodyTooLarge,
    NotFound,
    RequestTimeout,
    ServerError,
    UnsupportedMethod,
)
from ans.protocol.messages import (
    PARSERS,
    SUPPORTED_METHODS,
    ActivateRequest,
    AgtpRequest,
    DescribeRequest,
    DiscoverRequest,
    LifecycleRequest,
    answering,
    encode_error,
    task_id_hint,
)
from ans.protocol.newer import name_parameter
from ans.protocol.status import AGTP_SPECIFIC

from .asgi_types import Receive, Scope, Send
from .gate import REFUSED_AFTER_PARSING, Credentials, RequestGate
from .mcp.ws import refuse_upgrade
from .metrics import CONTENT_TYPE_LATEST, Metrics, surface_of
from .newer_surface import NewerSurface
from .refusals import SIGNED_METHODS, refusal_object, sign_refusal
from .request_log import NOTE, RequestLog, RequestLogSettings, note
from .service import AnsService
from .surfaces.mount import Background, mount

log = structlog.get_logger("ans.app")
# Over-size bodies up to this many bytes are read and discarded before the 400.
DRAIN_LIMIT = 8 * 1024 * 1024
# A request body must arrive within this many seconds of its headers (HTTP/2
# and HTTP/1.1; the native listener has its own REQUEST_TIMEOUT).
BODY_TIMEOUT = 10.0
JSON_HEADERS = [(b"content-type", b"application/json"), (b"cache-control", b"max-age=300")]


@dataclass(frozen=True, slots=True)
class Answer:
    """What goes back for one AGTP request: status, task id, body, extra
    headers. ``own_headers``: ``extra`` is the whole header set (a newer-dialect
    answer), so the framing adds none of the -02 headers."""

    status: int
    task_id: str | None
    body: bytes
    extra: tuple[tuple[str, str], ...] = ()
    own_headers: bool = False


class AnsApp:
    def __init__(
        self,
        service: AnsService,
        gate: RequestGate | None = None,
        background: Sequence[Background] = (),
        body_timeout: float = BODY_TIMEOUT,
        cpu_clock: Callable[[], float] = time.thread_time,
        requests: RequestLog | None = None,
    ) -> None:
        self.service = service
        # The request log and the metrics of every answered request (both framings).
        self.requests = requests or RequestLog(RequestLogSettings(), Metrics())
        self.metrics = self.requests.metrics
        self.background = tuple(background)
        self.body_timeout = body_timeout
        # CPU seconds of the serving thread: what a request cost its address
        self.cpu_clock = cpu_clock
        # Open mode with the configured rate limits unless a gate is given
        # (wiring.build_gate makes the token/mTLS one).
        self.gate = gate or RequestGate(
            service.config, service.audit, service.manifest["canonical_id"], clock=service.clock
        )
        self.server_agent_id = service.config.agent_id
        self._jwks_body = orjson.dumps(service.jwks())
        self.newer = NewerSurface(service, self.gate)
        # The REST and WebSocket surfaces beside AGTP, over the same service and gate.
        mounted = mount(service, self.gate, self._read_body, cpu_clock, body_timeout)
        self.surfaces = mounted.rest
        self.mcp = mounted.mcp
        self.mcp_ws = mounted.mcp_ws
        self.background = (*self.background, *mounted.background)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        client = scope.get("client")  # (host, port), or None (e.g. a unix socket)
        address = str(client[0]) if client else None
        facts: dict[str, Any] = {}
        token = NOTE.set(facts)
        started = time.perf_counter()
        sent: list[int] = []

        async def send_noting_status(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                sent.append(int(message["status"]))
            await send(message)

        try:
            await self._http_request(scope, receive, send_noting_status, address)
        finally:
            NOTE.reset(token)
            method = facts.get("method") or str(scope.get("method", ""))[:32]
            surface = surface_of(str(scope.get("path", "")), "method" in facts)
            status = sent[0] if sent else 499  # the client went away before an answer
            seconds = time.perf_counter() - started
            self.requests.observe(surface, method, status, seconds, address, facts)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The MCP registry's WebSocket when ``[mcp]`` is on; any other upgrade
        is answered 404 (never hypercorn's 500 for an app that said nothing)."""
        if self.mcp_ws is not None:
            await self.mcp_ws.handle(scope, receive, send)
        else:
            await refuse_upgrade(scope, receive, send)

    async def _http_request(
        self, scope: Scope, receive: Receive, send: Send, address: str | None
    ) -> None:
        if scope["method"] in HTTP_METHODS:  # `:method DISCOVER` stays AGTP on any path
            for surface in self.surfaces:
                if surface.owns(scope["path"]):
                    # HEAD is GET without the body (RFC 9110 9.3.2): the surfaces
                    # route a GET, and hypercorn sends no body for a HEAD
                    routed = {**scope, "method": "GET"} if scope["method"] == "HEAD" else scope
                    await surface.handle(routed, receive, send)
                    return
        task_id: str | None = None
        method: str | None = None
        try:
            try:
                headers = header_map(scope["headers"])
            except AgtpError:
                task_id = refused_headers_task_id(scope["headers"])
                raise
            task_id = task_id_hint(headers)
            method = agtp_method(scope["method"], scope["path"], headers)
            if method is not None:
                note(method=method, task_id=task_id)
            if method is None:
                await self._http(scope, send)
                return
            body = await self._read_body(receive, headers)
            creds = Credentials.from_request(
                headers, scope.get("extensions"), client_address=address
            )
        except Exception as exc:
            # A DISCOVER refused before it could be parsed (headers, body size
            # or time) is signed too, and its address pays for the signature.
            if method is None and scope.get("method") in SIGNED_METHODS:
                method = scope["method"]
            answer = self.refusal(exc, task_id, method or scope.get("method"), scope.get("path"))
            if method in SIGNED_METHODS:
                self.gate.settle(Credentials(client_address=address), 0.0, False, signed=True)
        else:
            answer = await self.answer(method, headers, body, creds, h2_path=scope.get("path"))
        if answer.own_headers:
            await self._raw(send, answer.status, _h2_headers(answer.extra), answer.body)
        else:
            await self._send(send, answer.status, answer.task_id, answer.body, answer.extra)

    async def answer(
        self,
        method: str,
        headers: dict[str, str],
        body: bytes,
        creds: Credentials,
        target: str | None = None,
        *,
        h2_path: str | None = None,
    ) -> Answer:
        """One AGTP request, whatever its framing (HTTP/2 here, native AGTP in
        :mod:`ans.native_server`, whose request line may carry a ``target``),
        to its answer in the request's dialect; never raises. On HTTP/2 every
        request has a path, so it is no dialect marker (``h2_path``); once the
        request is recognised as newer, it is its target (``POST /agtp``: none)."""
        dialect = recognise(headers, target)
        if dialect is Dialect.NEWER:
            if target is None and h2_path is not None and h2_path.rstrip("/") != POST_ENDPOINT:
                target = h2_path
            return await self._answer_newer(method, headers, body, creds, target)
        task_id = task_id_hint(headers)
        signed = method in SIGNED_METHODS
        try:
            # The client address pays for every request before its body is
            # parsed, so malformed or costly bodies cannot be sent faster than
            # its limit; a 429 here has paid for its signature already.
            self.gate.limit_address(method, creds, headers, len(body), signed=signed)
        except AgtpError as exc:
            return self.refusal(exc, task_id, method, None)
        started = self.cpu_clock()  # this thread's CPU: parsing and a local match run here
        refused = failed = False
        try:
            status, payload = await self._agtp(method, headers, body, creds)
            return Answer(status, task_id_of(payload, task_id), orjson.dumps(payload))
        except Exception as exc:
            failed = True
            refused = isinstance(exc, AgtpError) and exc.status in REFUSED_AFTER_PARSING
            # Once the envelope has parsed, the error carries the request's
            # Task-ID (the body's, when no header sent one): echo it.
            known = exc.task_id if isinstance(exc, AgtpError) else None
            return self.refusal(exc, known or task_id, method, None)
        finally:
            # The signing above ran inside this window: its CPU is counted too.
            cpu = self.cpu_clock() - started
            self.gate.settle(creds, cpu, refused, signed=signed and failed)

    async def _answer_newer(
        self,
        method: str,
        headers: dict[str, str],
        body: bytes,
        creds: Credentials,
        target: str | None,
    ) -> Answer:
        """:meth:`answer` for the newer dialect: the same address limit,
        settling and gate; :class:`NewerSurface` parses and writes the answer."""
        task_id = task_id_hint(headers)
        signed = method in SIGNED_METHODS
        newer = self.newer
        extra: tuple[tuple[str, str], ...] = ()
        ctype = NEWER_CONTENT_TYPE
        try:
            self.gate.limit_address(method, creds, headers, len(body), signed=signed)
        except AgtpError as exc:
            status, out = newer.error(self.typed(exc, method, target), task_id, method)
            return self._newer_answer(
                status, task_id, out, ctype, exc.headers, method, target, headers, body
            )
        started = self.cpu_clock()
        refused = failed = False
        try:
            status, out, ctype, known = await newer.agtp(method, headers, body, creds, target)
            task_id = known if known is not None else task_id
        except Exception as exc:
            failed = True
            refused = isinstance(exc, AgtpError) and exc.status in REFUSED_AFTER_PARSING
            err = self.typed(exc, method, target)
            task_id = err.task_id or task_id
            status, out = newer.error(err, task_id, method)
            extra = err.headers
        finally:
            cpu = self.cpu_clock() - started
            self.gate.settle(creds, cpu, refused, signed=signed and failed)
        return self._newer_answer(status, task_id, out, ctype, extra, method, target, headers, body)

    def _newer_answer(
        self,
        status: int,
        task_id: str | None,
        out: bytes,
        ctype: str,
        extra: tuple[tuple[str, str], ...],
        method: str,
        target: str | None,
        headers: dict[str, str],
        body: bytes,
    ) -> Answer:
        request = (method, target, headers, body)
        all_headers = self.newer.headers(status, task_id, out, ctype, request, extra)
        return Answer(status, task_id, out, all_headers, own_headers=True)

    @staticmethod
    def typed(exc: Exception, method: Any, path: Any) -> AgtpError:
        """``exc`` as an AgtpError; anything unexpected is a 500 with no
        traceback on the wire (it goes to the operational log). Call it from
        the ``except`` block that caught ``exc``."""
        if isinstance(exc, AgtpError):
            if exc.status in AGTP_SPECIFIC:
                log.info("governance signal", status=exc.status, code=exc.code)
            note(code=str(exc.code))
            return exc
        log.exception("unhandled error", path=path, method=method)
        err = ServerError("internal error; see the server log")
        note(code=str(err.code))
        return err

    @staticmethod
    def failure(exc: Exception, task_id: str | None, method: Any, path: Any) -> Answer:
        """The typed AGTP error answer for ``exc``, unsigned (methods other
        than DISCOVER; native framing errors, where no request was read).
        Call it from the ``except`` block that caught ``exc``."""
        err = AnsApp.typed(exc, method, path)
        body = encode_error(err.status, task_id, err.code, err.message)
        return Answer(err.status, task_id, body, err.headers)

    def refusal(self, exc: Exception, task_id: str | None, method: Any, path: Any) -> Answer:
        """:meth:`failure`, with the error object signed when ``method`` is
        DISCOVER (every DISCOVER answer is signed: docs/wire-contract.md, "Signed refusals").
        Call it from the ``except`` block that caught ``exc``."""
        if method not in SIGNED_METHODS:
            return self.failure(exc, task_id, method, path)
        err = self.typed(exc, method, path)
        error = self.signed_error(err, task_id)
        body = orjson.dumps({"status": err.status, "task_id": task_id, "error": error})
        return Answer(err.status, task_id, body, err.headers)

    def signed_error(self, err: AgtpError, task_id: str | None) -> dict[str, Any]:
        """The refusal's error object, signed with the ANS key."""
        error = refusal_object(err, task_id, rfc3339(self.service.clock()))
        return sign_refusal(error, self.service.key)

    async def _agtp(
        self, method: str, headers: dict[str, str], body: bytes, creds: Credentials
    ) -> tuple[int, dict[str, Any]]:
        """(after the rate limit per client address, in :meth:`answer`)
        parse (400/422) -> authenticate (401) -> rate limit per Agent-ID
        (429) -> the method, whose scope (451) and zone (453) checks see the
        effective identity."""
        parse = PARSERS.get(method)
        if parse is None:
            raise UnsupportedMethod(
                f"method {method[:32]!r} is not served here; "
                f"supported: {', '.join(SUPPORTED_METHODS)}"
            )
        req: AgtpRequest = parse(headers, body, self.service.limits)
        with answering(req.task_id, getattr(req, "query_digest", None)):
            req = self.gate.authenticate_and_limit(method, req, creds)
            identity = getattr(req, "identity", None)  # the ANS's own DESCRIBE needs none
            note(agent_id=getattr(identity, "agent_id", None), task_id=req.task_id)
            return await self._dispatch(req)

    async def _dispatch(self, req: AgtpRequest) -> tuple[int, dict[str, Any]]:
        svc = self.service
        if isinstance(req, DiscoverRequest):
            ref = name_parameter(req.raw_parameters)  # name resolution (discovery-01 4)
            if ref is not None:
                result = svc.resolve_name(req, ref)
            else:
                result = await svc.discover_async(req)
            note(results=result.get("returned"), intent=req.params.intent)
        elif isinstance(req, DescribeRequest):
            result = svc.describe(req)
        elif isinstance(req, ActivateRequest):
            result = await asyncio.to_thread(svc.activate, req)
        elif isinstance(req, LifecycleRequest):
            result = await asyncio.to_thread(svc.lifecycle, req)
        else:  # pragma: no cover - every parser above has a branch here
            raise UnsupportedMethod(f"no handler for {type(req).__name__}")
        return 200, {"status": 200, "task_id": req.task_id, "result": result}

    async def _http(self, scope: Scope, send: Send) -> None:
        path = scope["path"]
        if scope["method"] in ("GET", "HEAD"):
            if path == "/.well-known/jwks.json":
                await self._raw(send, 200, JSON_HEADERS, self._jwks_body)
                return
            if path == "/healthz":
                body = orjson.dumps(self.service.health())
                await self._raw(send, 200, [(b"content-type", b"application/json")], body)
                return
            if path == "/readyz":
                ready = await asyncio.to_thread(self.service.readiness)
                status = 200 if ready["status"] == "ready" else 503
                await self._raw(
                    send, status, [(b"content-type", b"application/json")], orjson.dumps(ready)
                )
                return
            if path == "/metrics" and self.service.config.metrics_enabled:
                body = await asyncio.to_thread(self.metrics.exposition)
                await self._raw(send, 200, [(b"content-type", CONTENT_TYPE_LATEST.encode())], body)
                return
        raise NotFound(
            f"{scope['method']} {path[:100]} is not an ANS resource; send an AGTP method"
        )

    async def _read_body(self, receive: Receive, headers: dict[str, str]) -> bytes:
        """Read at most the configured body size, within ``body_timeout``
        (else 408 ``request_timeout``: a body dripped in must not hold the
        request open). An over-size body is drained (discarded, up to
        DRAIN_LIMIT) before the 400 so the HTTP/2 connection stays usable;
        past DRAIN_LIMIT the client is simply answered."""
        try:
            async with asyncio.timeout(self.body_timeout):
                return await self._read_body_now(receive, headers)
        except TimeoutError:
            raise RequestTimeout(
                f"the request body did not arrive within {self.body_timeout:g} s"
            ) from None

    async def _read_body_now(self, receive: Receive, headers: dict[str, str]) -> bytes:
        limit = self.service.limits.max_body_bytes
        declared = headers.get("content-length")
        too_large = declared is not None and declared.strip().isdigit() and int(declared) > limit
        if too_large and int(declared or 0) > DRAIN_LIMIT:
            raise BodyTooLarge(f"body is {int(declared or 0)} bytes; the limit is {limit}")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                too_large = True
                chunks.clear()
            elif not too_large:
                chunks.append(chunk)
            if not message.get("more_body", False) or size > DRAIN_LIMIT:
                break
        if too_large:
            raise BodyTooLarge(f"body exceeds the limit of {limit} bytes")
        return b"".join(chunks)

    async def _send(
        self,
        send: Send,
        status: int,
        task_id: str | None,
        body: bytes,
        extra: tuple[tuple[str, str], ...] = (),
    ) -> None:
        headers = response_headers(status, task_id, self.server_agent_id)
        headers.extend((k.encode("latin-1"), v.encode("latin-1", "replace")) for k, v in extra)
        await self._raw(send, status, headers, body)

    @staticmethod
    async def _raw(
        send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                for task in self.background:
                    await task.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for task in reversed(self.background):
                    try:
                        await task.stop()
                    except Exception:
                        log.exception("background task did not stop cleanly")
                self.gate.flush()
                if self.service.federator is not None:
                    await self.service.federator.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _h2_headers(headers: tuple[tuple[str, str], ...]) -> list[tuple[bytes, bytes]]:
    """Header pairs for HTTP/2: lowercase names (h2 refuses others)."""
    return [(n.lower().encode("latin-1"), v.encode("latin-1", "replace")) for n, v in headers]


def task_id_of(payload: dict[str, Any], fallback: str | None) -> str | None:
    tid = payload.get("task_id")
    return tid if isinstance(tid, str) else fallback
