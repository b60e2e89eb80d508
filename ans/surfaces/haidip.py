"""HAIDIP over ANS (draft-cui): the REST discovery surface.

* ``GET {base}/agents`` — the agents the caller may see, in canonical-id
  order, paged (``top``, ``skip``, opaque ``cursor``), filtered; ``ETag`` /
  ``Last-Modified``, 304 on ``If-None-Match``;
* ``POST {base}/agents/search`` — one core DISCOVER (relevance gate, the
  0.3/0.4/0.3 formula, hard filters), answered as HAIDIP results and signed
  (``ans_signature``, bound to the request by ``query_digest`` and
  ``generated_at``);
* ``GET {base}/agents/{id}`` — the agent's HAIDIP card through the core's
  DESCRIBE (404 / 410 retired / 503 suspended), signed;
* ``POST {base}/agents`` — a HAIDIP or A2A card admitted as a self-asserted
  tier-3 record, only with ``[haidip] card_upload`` (else 404);
* ``GET {base}/openapi.json`` and ``GET /.well-known/agent-card.json``.

Paths ending in ``/invoke`` are not this module's (the invocation gateway
is mounted before it). A translation of messages, never a second policy:
the same gate (address limit, authentication, Agent-ID limit), scope and
zone checks, audit records and signatures as AGTP. ``[haidip]
public_listing`` lets a caller without credentials list/search/get agents
of public zones. Nothing here raises to the ASGI server.
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
from ans.governance.policy import DISCOVERY_QUERY, require_scope
from ans.governance.profile_metadata import metadata_updated_at
from ans.governance.signing import RESULT_SIGNATURE_FIELD, sign_document
from ans.protocol.envelope import has_identity
from ans.protocol.errors import (
    AgtpError,
    ErrorCode,
    NotFound,
    ServerError,
    Unauthorized,
)
from ans.protocol.haidip_card_view import card_of
from ans.protocol.haidip_query import (
    discover_parameters,
    parse_list_query,
    parse_search,
)
from ans.protocol.messages import (
    DescribeRequest,
    DiscoverRequest,
    Identity,
    parse_discover_params,
    parse_identity,
    query_digest,
)
from ans.protocol.scope import parse_authority_scope

from ..asgi_types import ReadBody, Receive, Scope, Send
from ..gate import REFUSED_AFTER_PARSING, Credentials, RequestGate
from ..haidip_config import HaidipSettings
from ..profile_metadata import profile_canonical_id
from ..service import AnsService
from .haidip_errors import haidip_error, wrong_method
from .haidip_listing import ListingOrder
from .haidip_paging import Cursors, digest_of, etag_of, matches
from .haidip_render import (
    base_url,
    epoch_key,
    http_date,
    openapi_document,
    own_card,
    search_result,
    summary,
    with_public_id,
)
from .haidip_upload import admit_card, audit_upload_off
from .intake import Intake, json_object

log = structlog.get_logger("ans.haidip")
Answer = tuple[int, dict[str, Any] | None, tuple[tuple[str, str], ...]]

WELL_KNOWN = "/.well-known/agent-card.json"
INVOKE_SUFFIX = "/invoke"
MAX_AGENT_ID_CHARS = 512
SOURCE = "haidip"
# The gate's method names (its per-Agent-ID limit and the audit records).
DISCOVER, DESCRIBE, REGISTER = "DISCOVER", "DESCRIBE", "REGISTER"
ANONYMOUS = "anonymous"


@dataclass(frozen=True, slots=True)
class Route:
    name: str  # list | search | get | register | openapi | card
    gate_method: str
    agent_id: str | None = None

    @property
    def reads(self) -> bool:
        return self.name in ("list", "search", "get")


@dataclass(frozen=True, slots=True)
class Asking:
    identity: Identity
    task_id: str | None


class HaidipSurface:
    def __init__(
        self,
        service: AnsService,
        gate: RequestGate,
        settings: HaidipSettings,
        read_body: ReadBody,
        cpu_clock: Callable[[], float] = time.thread_time,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        perf_clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.service = service
        self.gate = gate
        self.settings = settings
        self.base = settings.base_path
        self.read_body = read_body
        self.cpu_clock = cpu_clock
        self.perf_clock = perf_clock
        self.new_id = new_id
        self.cursors = Cursors(service.key)
        self.order = ListingOrder()
        self.openapi = openapi_document(settings.base_path)

    def owns(self, path: str) -> bool:
        if path == WELL_KNOWN:
            return True
        if not (path == self.base or path.startswith(self.base + "/")):
            return False
        # POST {base}/agents/{id}/invoke belongs to the invocation gateway
        rest = path[len(self.base) :]
        return not (rest.startswith("/agents/") and rest.endswith(INVOKE_SUFFIX))

    # -- the ASGI side ---------------------------------------------------------------
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one HTTP request this surface owns; never raises."""
        intake = Intake.begin(scope, self.new_id)
        route: Route | None = None
        try:
            headers = intake.read_headers(scope)
            route = self.route(str(scope["method"]).upper(), str(scope["path"]))
            body, creds = await intake.body_and_credentials(scope, receive, self.read_body)
        except Exception as exc:
            refusal = self.refusal(exc, intake.correlation, route)
            await self._send(send, *refusal, intake.correlation)
            return
        correlation = intake.correlation
        answer = await self.answer(route, headers, body, creds, correlation, scope)
        await self._send(send, *answer, correlation)

    async def answer(
        self,
        route: Route,
        headers: dict[str, str],
        body: bytes,
        creds: Credentials,
        correlation: str,
        scope: Scope,
    ) -> Answer:
        """One routed request: the client address pays first (every route),
        then the route, through the gate; never raises."""
        try:
            self.gate.limit_address(route.gate_method, creds, headers, len(body))
        except AgtpError as exc:
            return self.refusal(exc, correlation, route)
        if route.name == "openapi":
            return 200, self.openapi, (("cache-control", "max-age=300"),)
        if route.name == "card":
            card = own_card(self.service.config, base_url(scope, headers))
            # its url follows the Host the caller used: caches must key on it
            return 200, card, (("cache-control", "max-age=300"), ("vary", "host"))
        started = self.cpu_clock()
        refused = False
        try:
            if route.name == "list":
                return await self.list_agents(scope, headers, creds, correlation)
            if route.name == "search":
                return await self.search(headers, body, creds, correlation)
            if route.name == "get":
                assert route.agent_id is not None
                return await self.get(route.agent_id, headers, creds, correlation)
            return await self.register(headers, body, creds, correlation)
        except Exception as exc:
            refused = isinstance(exc, AgtpError) and exc.status in REFUSED_AFTER_PARSING
            return self.refusal(exc, correlation, route)
        finally:
            self.gate.settle(creds, self.cpu_clock() - started, refused)

    def route(self, method: str, path: str) -> Route:
        if path == WELL_KNOWN:
            if method != "GET":
                raise wrong_method(method, "GET")
            return Route("card", DESCRIBE)
        rest = path[len(self.base) :]
        rest = rest[:-1] if rest.endswith("/") else rest  # one trailing slash, not an id's
        if rest == "/openapi.json":
            if method != "GET":
                raise wrong_method(method, "GET")
            return Route("openapi", DESCRIBE)
        if rest == "/agents":
            if method == "GET":
                return Route("list", DISCOVER)
            if method == "POST":
                return Route("register", REGISTER)
            raise wrong_method(method, "GET, POST")
        if rest == "/agents/search":
            if method != "POST":
                raise wrong_method(method, "POST")
            return Route("search", DISCOVER)
        if rest.startswith("/agents/"):
            agent_id = rest[len("/agents/") :]
            if len(agent_id) > MAX_AGENT_ID_CHARS:
                raise NotFound(f"no agent with an id of {len(agent_id)} characters")
            if not agent_id or "/" in agent_id:  # e.g. /agents/%2F: no id holds a slash
                raise NotFound(f"{path[:100]} names no agent")
            if method != "GET":
                raise wrong_method(method, "GET")
            return Route("get", DESCRIBE, agent_id)
        raise NotFound(
            f"{method[:16]} {path[:100]} is not a HAIDIP resource; see GET {self.base}/agents, "
            f"POST {self.base}/agents/search, GET {self.base}/agents/{{id}}, "
            f"GET {self.base}/openapi.json"
        )

    # -- who asks ----------------------------------------------------------------------
    def asking(
        self, route: Route, headers: Mapping[str, str], creds: Credentials, correlation: str
    ) -> Identity:
        """The caller's effective identity through the gate. Without any
        credentials: the anonymous public reader (scope ``discovery:query``,
        restricted zones never granted) when ``public_listing`` is on, else 401."""
        anonymous = (
            not has_identity(headers)
            and creds.authorization is None
            and not creds.client_cert_chain
        )
        if anonymous:
            if self.settings.public_listing and route.reads:
                return Identity(
                    agent_id=ANONYMOUS,
                    principal_id=ANONYMOUS,
                    scope=parse_authority_scope("discovery:query"),
                    scope_header="discovery:query",
                )
            self.service.audit.record(
                "authentication_failed",
                status=401,
                code=ErrorCode.UNAUTHORIZED,
                auth_mode=self.gate.mode,
                method=f"haidip.{route.name}",
                agent_id=None,
                principal_id=None,
                task_id=correlation,
                source=SOURCE,
                reason="no credentials ([haidip] public_listing is off)"
                if route.reads
                else "no credentials",
            )
            raise Unauthorized(
                "credentials are required: Agent-ID, Principal-ID and Authority-Scope "
                "(and a bearer token or client certificate where configured)",
                headers=(("www-authenticate", 'Bearer realm="ans"'),),
            )
        identity = parse_identity(headers)
        asking = self.gate.authenticate_and_limit(
            route.gate_method, Asking(identity, correlation), creds
        )
        return asking.identity

    def feed_position(self) -> int:
        """A change-feed position the index holds at least every change up to,
        read before the listing (so an ETag never names newer data than the
        page it tags): a worker's applied position after catching up, or, in
        one process, the store's position with no writer mid-way between its
        commit and its index update."""
        svc = self.service
        follower = svc.index.follower
        if follower is not None:
            follower.catch_up()
            applied = getattr(follower, "applied", None)
            if isinstance(applied, int):
                return applied
            return svc.store.max_seq()
        with svc.index.write_lock:
            return svc.store.max_seq()

    @staticmethod
    def entitlement(identity: Identity) -> str:
        """The effective scope (token mode: header ∩ token), which decides
        what the caller may see."""
        return " ".join(sorted(str(identity.scope).split())) or ANONYMOUS

    # -- the routes ----------------------------------------------------------------------
    async def list_agents(
        self, scope: Scope, headers: dict[str, str], creds: Credentials, correlation: str
    ) -> Answer:
        svc = self.service
        route = Route("list", DISCOVER)
        q = parse_list_query(bytes(scope.get("query_string", b"")))
        identity = self.asking(route, headers, creds, correlation)
        require_scope(
            identity, DISCOVERY_QUERY, method="haidip.list", task_id=correlation, audit=svc.audit
        )
        tier = self.settings.trust_tier_min
        params = parse_discover_params(
            discover_parameters(q.filters, intent=None, limit=1, tier=tier), svc.limits
        )
        applied = {**q.filters.as_dict(), "trust_tier_min": params.trust_tier_min}
        fdigest = digest_of(applied)
        after = self.cursors.open(q.cursor, fdigest) if q.cursor else None
        seq = await asyncio.to_thread(self.feed_position)
        query = {"filters": applied, "top": q.top, "skip": q.skip, "cursor": q.cursor}
        etag = etag_of(seq, query, self.entitlement(identity))
        if matches(headers.get("if-none-match"), etag):
            return 304, None, (("etag", etag), ("cache-control", "private, no-cache"))
        now = svc.clock()
        with svc.index.lock:
            registry = svc.index.registry
            mask = registry.gate_mask(params, identity.scope, svc.zones, now.timestamp())
            found = self.order.page(registry, mask, seq, after, q.skip, q.top)
        page = found.ids
        fields = await asyncio.to_thread(svc.index.result_fields, page)
        agents = [summary(fields[cid]) for cid in page if cid in fields]
        body: dict[str, Any] = {
            "agents": agents,
            "count": found.count,
            "top": q.top,
            "skip": q.skip,
            "next_cursor": self.cursors.make(page[-1], fdigest) if found.more and page else None,
            "filters": applied,
            "generated_at": rfc3339(now),
        }
        out = sign_document(body, svc.key, RESULT_SIGNATURE_FIELD)
        extra: list[tuple[str, str]] = [("etag", etag), ("cache-control", "private, no-cache")]
        updates = [a["last_update"] for a in agents if isinstance(a.get("last_update"), str)]
        modified = http_date(max(updates, key=epoch_key)) if updates else None
        if modified is not None:
            extra.append(("last-modified", modified))
        return 200, out, tuple(extra)

    async def search(
        self, headers: dict[str, str], body: bytes, creds: Credentials, correlation: str
    ) -> Answer:
        svc = self.service
        started = self.perf_clock()
        route = Route("search", DISCOVER)
        doc = self.json_object(headers, body, "a HAIDIP search request")
        digest = query_digest(doc)  # over the request object exactly as sent
        q = parse_search(doc, svc.limits.max_limit)
        identity = self.asking(route, headers, creds, correlation)
        tier = q.trust_tier_min or self.settings.trust_tier_min
        raw = discover_parameters(q.filters, intent=q.query, limit=q.skip + q.top, tier=tier)
        req = DiscoverRequest(
            identity=identity,
            task_id=correlation,
            params=parse_discover_params(raw, svc.limits),
            query_digest=digest,
            raw_parameters=raw,
        )
        # DISCOVER's own checks: discovery:query (451 -> 403), audited
        result = await svc.discover_async(req)
        items = result["results"][q.skip : q.skip + q.top]
        results = [search_result(item, q.ranked) for item in items]
        if not q.ranked:
            results.sort(key=lambda r: str(r["id"]))
        if q.include_metadata:
            stored = await asyncio.to_thread(
                svc.store.get_many, [r["canonical_id"] for r in results]
            )
            for r in results:
                agent = stored.get(r["canonical_id"])
                if agent is not None:
                    r["card"] = self.card(agent.manifest, agent.capabilities, agent.updated_at)
        out: dict[str, Any] = {
            "results": results,
            "count": result["total_matches"],
            "top": q.top,
            "skip": q.skip,
            "query": q.query,
            "filters": q.filters.as_dict(),
            "ranked": q.ranked,
            "search_time": round((self.perf_clock() - started) * 1000.0, 3),
            "query_id": result["query_id"],
            "query_digest": digest,
            "generated_at": result["generated_at"],
            "ranking": result.get("ranking"),
        }
        if "relevance" in result:
            out["relevance"] = result["relevance"]
        if result.get("warnings"):
            out["warnings"] = result["warnings"]
        return 200, sign_document(out, svc.key, RESULT_SIGNATURE_FIELD), ()

    async def get(
        self, agent_id: str, headers: dict[str, str], creds: Credentials, correlation: str
    ) -> Answer:
        svc = self.service
        identity = self.asking(Route("get", DESCRIBE), headers, creds, correlation)
        # DESCRIBE's rules: discovery:query (451 -> 403, audited), a restricted
        # zone the caller may not see is 404, Suspended 503, retired 410.
        cid = profile_canonical_id(agent_id)
        if cid == svc.manifest["canonical_id"]:
            raise NotFound(f"no agent {agent_id[:80]!r} in this directory")
        described = await asyncio.to_thread(
            svc.describe, DescribeRequest(identity, correlation, cid)
        )
        stored = await asyncio.to_thread(svc.store.get, cid)
        updated = stored.updated_at if stored is not None else ""
        manifest, caps = described["manifest"], described.get("capabilities") or {}
        card = self.card(manifest, caps, updated)
        card["generated_at"] = rfc3339(svc.clock())
        extra: tuple[tuple[str, str], ...] = ()
        modified = http_date(card.get("last_update"))
        if modified is not None:
            extra = (("last-modified", modified),)
        return 200, sign_document(card, svc.key, RESULT_SIGNATURE_FIELD), extra

    async def register(
        self, headers: dict[str, str], body: bytes, creds: Credentials, correlation: str
    ) -> Answer:
        if not self.settings.card_upload:
            audit_upload_off(self.service, headers, correlation)
            raise NotFound(
                f"card upload is not enabled on this ANS: POST {self.base}/agents is served "
                "only with [haidip] card_upload = true"
            )
        card = self.json_object(headers, body, "a HAIDIP or A2A agent card")
        identity = self.asking(Route("register", REGISTER), headers, creds, correlation)
        status, out = await admit_card(self.service, card, identity, correlation)
        return status, out, ()

    # -- helpers -----------------------------------------------------------------------
    @staticmethod
    def card(manifest: dict[str, Any], caps: dict[str, Any], stored_at: str) -> dict[str, Any]:
        """The agent's HAIDIP card under its HAIDIP id."""
        last = metadata_updated_at(manifest, caps, stored_at)
        card = card_of(manifest, caps, last_update=last)
        return with_public_id(card, str(manifest["canonical_id"]))

    def json_object(self, headers: Mapping[str, str], body: bytes, what: str) -> dict[str, Any]:
        return json_object(headers, body, what, self.service.limits.max_body_bytes)

    def refusal(self, exc: Exception, correlation: str, route: Route | None) -> Answer:
        if not isinstance(exc, AgtpError):
            log.exception("unhandled error on the HAIDIP surface", route=route)
            exc = ServerError("internal error; see the server log")
        err = haidip_error(exc, correlation)
        return err.status, err.body, err.headers

    @staticmethod
    async def _send(
        send: Send,
        status: int,
        body: Mapping[str, Any] | None,
        extra: tuple[tuple[str, str], ...],
        correlation: str,
    ) -> None:
        data = orjson.dumps(body) if body is not None else b""
        names = {k for k, _ in extra}
        headers = [
            *([(b"content-type", b"application/json")] if body is not None else []),
            *([] if "cache-control" in names else [(b"cache-control", b"no-store")]),
            (b"x-correlation-id", correlation.encode("ascii", "replace")[:128]),
            *([(b"content-length", str(len(data)).encode())] if status != 304 else []),
            *((k.encode("latin-1"), v.encode("latin-1", "replace")) for k, v in extra),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})
