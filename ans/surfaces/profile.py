"""The efficient-discovery profile's JSON binding (draft-xu, level D2):

* ``POST {base}/discover`` — a profile Discovery Request object in, a signed
  Discovery Response out (``request_id``, ``candidates``, ``applied_filters``,
  ``unsupported_filters``, ``warnings``, ``generated_at``, ``ans_signature``);
* ``GET {base}/agents/{id}`` — one agent as a profile candidate object, signed;
* ``PUT {base}/agents/{id}`` — self-registration of a profile metadata object
  as a self-asserted tier-3 record, only when ``[profile] self_registration``
  is on (else 404 ``not_found``).

A translation of messages, never a second policy: the same gate as AGTP
(client-address limit before parsing, then authentication and the Agent-ID
limit, :class:`~ans.gate.RequestGate`), the core's scope and zone checks and
audit records, the core's discovery and registrar. Failures use the
profile's error model (:mod:`.profile_errors`); a discover refusal is signed
as an AGTP DISCOVER refusal is. Nothing here raises to the ASGI server.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from ans.governance.audit import rfc3339
from ans.governance.policy import requester_fields
from ans.protocol.errors import (
    AgtpError,
    BadRequest,
    ErrorCode,
    NotFound,
    ServerError,
)
from ans.protocol.messages import (
    DescribeRequest,
    DiscoverRequest,
    Identity,
    answering,
    parse_discover_params,
    parse_identity,
    query_digest,
)

from ..asgi_types import ReadBody, Receive, Scope, Send
from ..config import ProfileSettings
from ..core.profile_view import profile_response
from ..gate import REFUSED_AFTER_PARSING, Credentials, RequestGate
from ..profile_metadata import profile_canonical_id
from ..service import AnsService
from .intake import Intake, json_object
from .profile_errors import profile_error
from .profile_render import agent_object, require_query, signed_document, signed_error

log = structlog.get_logger("ans.profile")

MAX_AGENT_ID_CHARS = 512
# The gate's method names for the three routes: its per-Agent-ID limit and
# the audit records name them (a profile discover counts as a DISCOVER).
DISCOVER, GET, REGISTER = "DISCOVER", "DESCRIBE", "REGISTER"
# The registrar's name for this surface (audit records' method and source).
SOURCE = "profile"


@dataclass(frozen=True, slots=True)
class Asking:
    """A GET or PUT as the gate sees it: who asks, under which correlation id."""

    identity: Identity
    task_id: str | None


@dataclass(frozen=True, slots=True)
class Route:
    name: str  # "discover" | "get" | "put"
    gate_method: str
    agent_id: str | None = None

    @property
    def signed(self) -> bool:
        return self.name == "discover"


class ProfileSurface:
    def __init__(
        self,
        service: AnsService,
        gate: RequestGate,
        settings: ProfileSettings,
        read_body: ReadBody,
        cpu_clock: Callable[[], float] = time.thread_time,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self.service = service
        self.gate = gate
        self.settings = settings
        self.base = settings.base_path
        self.read_body = read_body
        self.cpu_clock = cpu_clock
        self.new_id = new_id

    def owns(self, path: str) -> bool:
        return path == self.base or path.startswith(self.base + "/")

    # -- the ASGI side ---------------------------------------------------------------
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one HTTP request under the base path; never raises."""
        intake = Intake.begin(scope, self.new_id)
        route: Route | None = None
        try:
            headers = intake.read_headers(scope)
            route = self.route(str(scope["method"]).upper(), str(scope["path"]))
            body, creds = await intake.body_and_credentials(scope, receive, self.read_body)
        except Exception as exc:
            status, out, extra = self.refusal(exc, intake.correlation, route)
            if route is not None and route.signed:
                anonymous = Credentials(client_address=intake.address)
                self.gate.settle(anonymous, 0.0, False, signed=True)
            await self._send(send, status, out, extra, intake.correlation)
            return
        correlation = intake.correlation
        status, out, extra = await self.answer(route, headers, body, creds, correlation, scope)
        await self._send(send, status, out, extra, correlation)

    async def answer(
        self,
        route: Route,
        headers: dict[str, str],
        body: bytes,
        creds: Credentials,
        correlation: str,
        scope: Scope,
    ) -> tuple[int, dict[str, Any], tuple[tuple[str, str], ...]]:
        """One routed request, through the gate, to (status, body, headers)."""
        try:
            self.gate.limit_address(
                route.gate_method, creds, headers, len(body), signed=route.signed
            )
        except AgtpError as exc:
            return self.refusal(exc, correlation, route)
        started = self.cpu_clock()
        refused = failed = False
        try:
            if route.name == "discover":
                return 200, await self.discover(headers, body, creds, correlation), ()
            if route.name == "get":
                assert route.agent_id is not None
                return 200, await self.get(route.agent_id, headers, creds, correlation), ()
            assert route.agent_id is not None
            return await self.put(route.agent_id, headers, body, creds, correlation)
        except Exception as exc:
            failed = True
            refused = isinstance(exc, AgtpError) and exc.status in REFUSED_AFTER_PARSING
            return self.refusal(exc, correlation, route)
        finally:
            cpu = self.cpu_clock() - started
            self.gate.settle(creds, cpu, refused, signed=route.signed and failed)

    def route(self, method: str, path: str) -> Route:
        rest = path[len(self.base) :]
        if rest in ("/discover", "/discover/"):
            if method != "POST":
                raise _wrong_method(method, "POST")
            return Route("discover", DISCOVER)
        if rest.startswith("/agents/") and len(rest) > len("/agents/"):
            agent_id = rest[len("/agents/") :]
            if len(agent_id) > MAX_AGENT_ID_CHARS:
                raise NotFound(f"no agent with an id of {len(agent_id)} characters")
            if method == "GET":
                return Route("get", GET, agent_id)
            if method == "PUT":
                return Route("put", REGISTER, agent_id)
            raise _wrong_method(method, "GET, PUT")
        raise NotFound(
            f"{method[:16]} {path[:100]} is not a profile resource; see "
            f"POST {self.base}/discover, GET and PUT {self.base}/agents/{{id}}"
        )

    # -- the three routes ------------------------------------------------------------
    async def discover(
        self, headers: dict[str, str], body: bytes, creds: Credentials, correlation: str
    ) -> dict[str, Any]:
        svc = self.service
        identity = parse_identity(headers)
        doc = self.json_object(headers, body, "a profile Discovery Request")
        digest = query_digest(doc)  # over the request object exactly as sent
        with answering(correlation, digest):
            require_query(doc)
            params = parse_discover_params(doc, svc.limits)
        req = DiscoverRequest(
            identity=identity,
            task_id=correlation,
            params=params,
            query_digest=digest,
            raw_parameters=doc,
        )
        with answering(correlation, digest):
            req = self.gate.authenticate_and_limit(DISCOVER, req, creds)
            result = await svc.discover_async(req)
        return profile_response(result, svc.key)

    async def get(
        self, agent_id: str, headers: dict[str, str], creds: Credentials, correlation: str
    ) -> dict[str, Any]:
        svc = self.service
        asking = Asking(parse_identity(headers), correlation)
        asking = self.gate.authenticate_and_limit(GET, asking, creds)
        # DESCRIBE's rules: discovery:query (451 -> 403, audited), a restricted
        # zone the caller may not see is 404, Suspended / retired 410.
        cid = profile_canonical_id(agent_id)
        described = svc.describe(DescribeRequest(asking.identity, correlation, cid))
        return signed_document(agent_object(described, rfc3339(svc.clock())), svc.key)

    async def put(
        self,
        agent_id: str,
        headers: dict[str, str],
        body: bytes,
        creds: Credentials,
        correlation: str,
    ) -> tuple[int, dict[str, Any], tuple[tuple[str, str], ...]]:
        svc = self.service
        if not self.settings.self_registration:
            self._audit_refused_put(headers, agent_id, correlation)
            raise NotFound(
                f"self-registration is not enabled on this ANS: PUT {self.base}/agents/{{id}} "
                "is served only with [profile] self_registration = true"
            )
        identity = parse_identity(headers)
        doc = self.json_object(headers, body, "a profile Agent Metadata object")
        asking = self.gate.authenticate_and_limit(REGISTER, Asking(identity, correlation), creds)
        if "id" not in doc:
            doc["id"] = agent_id
        elif doc["id"] != agent_id:
            raise BadRequest(
                "the metadata object's id differs from the id in the path",
                code=ErrorCode.INVALID_CANONICAL_ID,
            )
        # discovery:register (451 -> 403), conflicts (409), staleness, all
        # audited by the registrar; a tier-3, governed: false record.
        result = await asyncio.to_thread(
            svc.admit_self_asserted,
            doc,
            source=SOURCE,
            identity=asking.identity,
            task_id=correlation,
        )
        return 200, signed_document(result, svc.key), ()

    # -- helpers -----------------------------------------------------------------------
    def json_object(self, headers: Mapping[str, str], body: bytes, what: str) -> dict[str, Any]:
        return json_object(headers, body, what, self.service.limits.max_body_bytes)

    def refusal(
        self, exc: Exception, correlation: str, route: Route | None
    ) -> tuple[int, dict[str, Any], tuple[tuple[str, str], ...]]:
        """The profile error answer for ``exc`` (signed on discover). An
        unexpected exception is logged with its traceback and answered 503."""
        if not isinstance(exc, AgtpError):
            log.exception("unhandled error on the profile binding", route=route)
            exc = ServerError("internal error; see the server log")
        err = profile_error(exc, correlation)
        body = err.body
        if route is not None and route.signed:
            now = rfc3339(self.service.clock())
            body = signed_error(body, err.status, now, self.service.key, exc)
        return err.status, body, err.headers

    def _audit_refused_put(
        self, headers: Mapping[str, str], agent_id: str, correlation: str
    ) -> None:
        """A PUT while self-registration is off: audited as a refused
        registration, naming the identity headers as sent (bounded)."""
        try:
            who = requester_fields(parse_identity(headers), SOURCE, correlation)
        except AgtpError:
            who = {"method": SOURCE, "task_id": correlation}
        self.service.audit.record(
            "self_asserted_refused",
            status=404,
            code=ErrorCode.NOT_FOUND,
            **who,
            source=SOURCE,
            profile_id=agent_id[:256],
            reason="self-registration is not enabled ([profile] self_registration)",
        )

    @staticmethod
    async def _send(
        send: Send,
        status: int,
        body: Mapping[str, Any],
        extra: tuple[tuple[str, str], ...],
        correlation: str,
    ) -> None:
        data = orjson.dumps(body)
        headers = [
            (b"content-type", b"application/json"),
            (b"cache-control", b"no-store"),
            (b"x-correlation-id", correlation.encode("ascii", "replace")),
            (b"content-length", str(len(data)).encode()),
            *((k.encode("latin-1"), v.encode("latin-1", "replace")) for k, v in extra),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})


def _wrong_method(method: str, allowed: str) -> BadRequest:
    err = BadRequest(
        f"method {method[:16]} is not allowed here; use {allowed}",
        code=ErrorCode.UNSUPPORTED_METHOD,
        headers=(("allow", allowed),),
    )
    return err
