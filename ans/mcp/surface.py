"""The MCP registry's REST binding (seed 002 sections 3.2 and 5.2) under
``[mcp] base_path`` (default ``/mcp/v1``):

* ``POST {base}/agents`` -- an Announce message (signed) in, 200 and the
  agent as a Response message (``registry.outcome``: registered, updated,
  unchanged, governed) out;
* ``GET {base}/agents`` -- live announced agents, paged (``limit``,
  ``after``), filtered by ``capability`` and ``version``;
* ``GET {base}/agents/{agent_id}`` -- one live announced agent;
* ``POST {base}/query`` -- a Query message in, ``{"protocol_version",
  "responses": [Response...]}`` out.

A translation only: the same gate as every surface (client-address limit
before the body is read, then authentication -- self-asserted headers, a
bearer token, or the client certificate, per ``[auth] mode`` -- and the
Agent-ID limit), then :class:`~ans.mcp.registry.McpRegistry`. A client that
sends only ``Authorization: Bearer`` has its identity headers taken from the
token's ``sub`` / ``principal`` / ``scope`` claims, which the gate then
verifies as usual. Successful answers carry ``ans_signature`` (ES256 over
the JCS of the rest, as every ANS answer). Nothing raises to the server.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import orjson
import structlog

from ans.protocol import jsonstrict
from ans.protocol.errors import (
    AgtpError,
    AuthenticationFailed,
    BadRequest,
    ErrorCode,
    NotFound,
    ServerError,
)
from ans.protocol.mcp_errors import McpMalformed
from ans.protocol.mcp_messages import MAX_MESSAGE_BYTES, parse_version
from ans.protocol.messages import Identity, parse_identity

from ..asgi_types import ReadBody, Receive, Scope, Send
from ..gate import REFUSED_AFTER_PARSING, Credentials, RequestGate
from ..surfaces.intake import Intake, check_json_type
from ..surfaces.profile_render import signed_document
from .errors import mcp_error
from .registry import ANNOUNCE, GET, LIST, QUERY, McpCaller, McpRegistry, McpReply

log = structlog.get_logger("ans.mcp")

MAX_QUERY_STRING = 2048
MAX_PATH_ID = 64
_IDENTITY_HEADERS = ("agent-id", "principal-id", "authority-scope")


@dataclass(frozen=True, slots=True)
class Asking:
    """A request as the gate sees it: who asks, under which correlation id."""

    identity: Identity
    task_id: str | None


@dataclass(frozen=True, slots=True)
class Route:
    name: str  # "announce" | "list" | "get" | "query"
    method: str  # the gate's / audit's method name
    agent_id: str | None = None


class McpSurface:
    def __init__(
        self,
        registry: McpRegistry,
        gate: RequestGate,
        read_body: ReadBody,
        cpu_clock: Callable[[], float] = time.thread_time,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self.registry = registry
        self.gate = gate
        self.base = registry.settings.base_path
        self.read_body = read_body
        self.cpu_clock = cpu_clock
        self.new_id = new_id

    def owns(self, path: str) -> bool:
        return path == self.base or path.startswith(self.base + "/")

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one HTTP request under the base path; never raises."""
        intake = Intake.begin(scope, self.new_id)
        version: str | None = None
        try:
            headers = intake.read_headers(scope)
            route = self.route(str(scope["method"]).upper(), str(scope["path"]))
            params = self.query_params(scope.get("query_string", b""))
            version = self.asked_version(params, headers)
            anonymous = Credentials(client_address=intake.address)
            self.gate.limit_address(route.method, anonymous, headers)
            body, creds = await intake.body_and_credentials(scope, receive, self.read_body)
        except Exception as exc:
            await self._send(send, self.refusal(exc, version), intake.correlation)
            return
        correlation = intake.correlation
        reply = await self.answer(route, headers, params, body, creds, correlation, version)
        await self._send(send, reply, correlation)

    async def answer(
        self,
        route: Route,
        headers: dict[str, str],
        params: dict[str, str],
        body: bytes,
        creds: Credentials,
        correlation: str,
        version: str | None,
    ) -> McpReply:
        started = self.cpu_clock()
        refused = False
        try:
            asking = Asking(self.identity(headers), correlation)
            asking = self.gate.authenticate_and_limit(route.method, asking, creds)
            caller = McpCaller.of(
                asking.identity, source="rest", protocol_version=version, task_id=correlation
            )
            reg = self.registry
            if route.name == "announce":
                doc = self.json_object(headers, body, "an Announce message")
                reply = await asyncio.to_thread(reg.announce, doc, caller)
            elif route.name == "query":
                doc = self.json_object(headers, body, "a Query message")
                reply = await asyncio.to_thread(reg.query, doc, caller)
            elif route.name == "get":
                assert route.agent_id is not None
                reply = await asyncio.to_thread(reg.get, route.agent_id, caller)
            else:
                reply = await asyncio.to_thread(
                    reg.list,
                    caller,
                    capability=params.get("capability"),
                    version=params.get("version"),
                    after=params.get("after"),
                    limit=self.limit(params),
                )
            refused = reply.status in (401, 403)
            if reply.status == 200:
                key = reg.service.key
                reply = McpReply(200, signed_document(reply.body, key), reply.headers)
            return reply
        except Exception as exc:
            refused = isinstance(exc, AgtpError) and exc.status in REFUSED_AFTER_PARSING
            return self.refusal(exc, version)
        finally:
            self.gate.settle(creds, self.cpu_clock() - started, refused)

    # -- routing and parsing ----------------------------------------------------------
    def route(self, method: str, path: str) -> Route:
        rest = path[len(self.base) :]
        rest = rest[:-1] if rest.endswith("/") else rest  # one trailing slash, not an id's
        if rest == "/agents":
            if method == "POST":
                return Route("announce", ANNOUNCE)
            if method == "GET":
                return Route("list", LIST)
            raise _wrong_method(method, "GET, POST")
        if rest.startswith("/agents/"):
            agent_id = rest[len("/agents/") :]
            if not agent_id or len(agent_id) > MAX_PATH_ID or "/" in agent_id:
                raise NotFound(f"{path[:100]} is not an MCP registry resource")
            if method != "GET":
                raise _wrong_method(method, "GET")
            return Route("get", GET, agent_id)
        if rest == "/query":
            if method != "POST":
                raise _wrong_method(method, "POST")
            return Route("query", QUERY)
        raise NotFound(
            f"{method[:16]} {path[:100]} is not an MCP registry resource; see "
            f"POST/GET {self.base}/agents, GET {self.base}/agents/{{agent_id}}, "
            f"POST {self.base}/query"
        )

    @staticmethod
    def query_params(raw: bytes) -> dict[str, str]:
        if len(raw) > MAX_QUERY_STRING:
            raise McpMalformed(f"the query string is longer than {MAX_QUERY_STRING} bytes")
        try:
            pairs = parse_qsl(raw.decode("ascii"), strict_parsing=False, max_num_fields=16)
        except (UnicodeDecodeError, ValueError):
            raise McpMalformed("the query string is not valid") from None
        out: dict[str, str] = {}
        for name, value in pairs:
            if name not in ("capability", "version", "after", "limit", "protocol_version"):
                raise McpMalformed(f"unknown query parameter {name[:40]!r}")
            if name in out:
                raise McpMalformed(f"query parameter {name!r} is repeated")
            if not value.strip() or len(value) > 256:
                raise McpMalformed(f"query parameter {name!r} must be 1..256 characters")
            out[name] = value.strip()
        return out

    def limit(self, params: Mapping[str, str]) -> int | None:
        raw = params.get("limit")
        if raw is None:
            return None
        top = self.registry.settings.max_page_size
        if not raw.isdigit() or not 1 <= int(raw) <= top:
            raise McpMalformed(f"limit must be an integer from 1 to {top}")
        return int(raw)

    @staticmethod
    def asked_version(params: Mapping[str, str], headers: Mapping[str, str]) -> str | None:
        """A GET's ``protocol_version`` (query parameter or the
        ``MCP-Protocol-Version`` header), checked; None when not given."""
        value = params.get("protocol_version") or headers.get("mcp-protocol-version")
        return None if value is None else parse_version(value.strip()).text

    @staticmethod
    def identity(headers: Mapping[str, str]) -> Identity:
        """The identity headers; without any, the bearer token's claims (the
        gate verifies the token and binds it to them); else 401."""
        if any(headers.get(h) for h in _IDENTITY_HEADERS):
            return parse_identity(headers)
        claims = _unverified_claims(headers.get("authorization"))
        sub, principal, scope = (claims.get(k) for k in ("sub", "principal", "scope"))
        if not all(isinstance(v, str) and v for v in (sub, principal, scope)):
            raise AuthenticationFailed(
                "the MCP registry needs a bearer token (sub, principal, scope claims) "
                "or the Agent-ID, Principal-ID and Authority-Scope headers",
                code=ErrorCode.MISSING_TOKEN,
                headers=(("www-authenticate", 'Bearer realm="ans"'),),
            )
        assert isinstance(sub, str) and isinstance(principal, str) and isinstance(scope, str)
        return parse_identity(
            {"agent-id": sub[:256], "principal-id": principal[:256], "authority-scope": scope}
        )

    @staticmethod
    def json_object(headers: Mapping[str, str], body: bytes, what: str) -> dict[str, Any]:
        check_json_type(headers)
        if not body.strip():
            raise McpMalformed(f"the request body must be {what} (a JSON object)")
        try:
            doc = jsonstrict.loads(body, max_bytes=MAX_MESSAGE_BYTES)
        except AgtpError as exc:
            raise McpMalformed(f"the request body is not {what}: {exc.message}") from None
        if not isinstance(doc, dict):
            raise McpMalformed(f"the request body must be {what} (a JSON object)")
        return doc

    # -- answers ----------------------------------------------------------------------
    def refusal(self, exc: Exception, version: str | None) -> McpReply:
        if not isinstance(exc, AgtpError):
            log.exception("unhandled error on the MCP registry surface")
            exc = ServerError("internal error; see the server log")
        return mcp_error(exc, version)

    @staticmethod
    async def _send(send: Send, reply: McpReply, correlation: str) -> None:
        data = orjson.dumps(reply.body)
        headers = [
            (b"content-type", b"application/json"),
            (b"cache-control", b"no-store"),
            (b"x-correlation-id", correlation.encode("ascii", "replace")),
            (b"content-length", str(len(data)).encode()),
            *((k.encode("latin-1"), v.encode("latin-1", "replace")) for k, v in reply.headers),
        ]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": data})


def _unverified_claims(authorization: str | None) -> dict[str, Any]:
    """The claims of ``Bearer <jws>`` as sent (not verified: only to fill in
    the identity the gate then checks the verified token against)."""
    if authorization is None or not authorization[:7].lower() == "bearer ":
        return {}
    parts = authorization[7:].strip().split(".")
    if len(parts) != 3 or len(parts[1]) > 8192:
        return {}
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = jsonstrict.loads(payload, max_bytes=8192)
    except Exception:
        return {}
    return claims if isinstance(claims, dict) else {}


def _wrong_method(method: str, allowed: str) -> BadRequest:
    return BadRequest(
        f"method {method[:16]} is not allowed here; use {allowed}",
        code=ErrorCode.UNSUPPORTED_METHOD,
        headers=(("allow", allowed),),
    )
