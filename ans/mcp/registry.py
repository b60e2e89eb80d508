"""The MCP-orchestrator registry (seed 002): one object every MCP transport
calls -- the REST surface (``ans.mcp.surface``), the WebSocket and mDNS
(``ans.mcp.ws*``, ``ans.mcp.mdns*``) -- so all of them apply the same rules.

* :meth:`McpRegistry.announce` -- an Announce message: schema and version
  (``ans.protocol.mcp_messages``), ``discovery:register`` (alias
  ``discover:write``), the ``[mcp] allow_list``, the signature with the
  announced key and the key pinned in the trust store (rotation, grace), then
  the agent as a self-asserted tier-3 record through the registrar
  (:meth:`~ans.core.registrar.Registrar.admit_self_asserted`). Identical
  announcements are coalesced: only the heartbeat time moves.
* :meth:`McpRegistry.query` -- a Query message: the live announced agents that
  list the capability, then those the core's DISCOVER (same relevance gate,
  tier 3 admitted) matches for it as free text.
* :meth:`McpRegistry.get` / :meth:`McpRegistry.list` -- one agent / a page.

Every method is synchronous (store and embedder calls): call it from a
thread (``asyncio.to_thread``) on an event loop. Every method answers an
:class:`McpReply` -- the status and JSON body the REST route answers, errors
as the registry's ``Err*`` object (``ans.mcp.errors``) -- and never raises.
Refusals and drops are audited (``mcp_announcement_dropped``: counted by the
``ans_audit_events_total`` metric), never with the message body.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from ans.governance.mcp_signature import LoadedKey, load_agent_key, require_signature
from ans.governance.policy import (
    DISCOVERY_QUERY,
    DISCOVERY_REGISTER,
    requester_fields,
    require_scope,
)
from ans.protocol.errors import (
    AgtpError,
    Conflict,
    NotFound,
    ServerError,
    SignatureInvalid,
    Unavailable,
)
from ans.protocol.mcp_errors import McpDuplicateId, McpForbidden
from ans.protocol.mcp_messages import (
    CURRENT_VERSION,
    Announce,
    parse_agent_id,
    parse_announce,
    parse_query,
    signed_bytes,
    version_hint,
)
from ans.protocol.messages import Identity
from ans.protocol.scope import AuthorityScope, parse_token

from ..profile_metadata import check_metadata
from ..service import AnsService
from ..store_records import StoredAgent
from ..surfaces.rest_errors import RestAnswer
from .config import McpSettings
from .errors import mcp_error
from .query import match_query
from .records import (
    SOURCE,
    agent_id_of,
    canonical_id_of,
    has_capability,
    registry_view,
    response_object,
    self_asserted_metadata,
)
from .trust_store import McpTrust, McpTrustStore, trust_store_for

log = structlog.get_logger("ans.mcp")

# The seed's scopes, accepted as aliases of the core's on this surface.
DISCOVER_READ = parse_token("discover:read")
DISCOVER_WRITE = parse_token("discover:write")
ALIASES = ((DISCOVER_WRITE, DISCOVERY_REGISTER), (DISCOVER_READ, DISCOVERY_QUERY))
ANNOUNCE, QUERY, GET, LIST = "MCP_ANNOUNCE", "MCP_QUERY", "MCP_GET", "MCP_LIST"
PAGE = 500  # trust-store rows read at a time


def with_aliases(identity: Identity) -> Identity:
    """``identity`` whose scope also holds the core scope of each seed alias it holds."""
    extra = tuple(
        core
        for alias, core in ALIASES
        if identity.scope.covers(alias) and not identity.scope.covers(core)
    )
    if not extra:
        return identity
    return dataclasses.replace(identity, scope=AuthorityScope(identity.scope.tokens + extra))


@dataclass(frozen=True, slots=True)
class McpCaller:
    """Who calls the registry, already authenticated by its transport (the
    gate): the effective identity (seed aliases applied), the transport
    (``rest``, ``ws``, ``mdns``), the protocol version the client asked in
    when known before parsing, and the correlation id for audit records."""

    identity: Identity
    source: str = "rest"
    protocol_version: str | None = None
    task_id: str | None = None

    @classmethod
    def of(cls, identity: Identity, **kwargs: Any) -> McpCaller:
        return cls(with_aliases(identity), **kwargs)

    @classmethod
    def local(cls, source: str, task_id: str | None = None) -> McpCaller:
        """A caller inside this ANS (mDNS browsing): may announce and query."""
        scope = AuthorityScope((DISCOVERY_REGISTER, DISCOVERY_QUERY))
        who = Identity(f"ans:{source}", f"ans:{source}", scope, scope_header=str(scope))
        return cls(who, source, None, task_id)

    @property
    def scopes(self) -> frozenset[str]:
        return frozenset(str(t) for t in self.identity.scope.tokens)


@dataclass(frozen=True, slots=True)
class Live:
    """A live announced agent: its trust-store row, its (Active) registry
    record, the agent object as announced."""

    trust: McpTrust
    stored: StoredAgent
    agent: dict[str, Any]


McpReply = RestAnswer  # what a registry call answers: HTTP status, JSON body, extra headers


def announcement_digest(agent_bytes: bytes) -> str:
    return hashlib.sha256(agent_bytes).hexdigest()


class McpRegistry:
    def __init__(
        self,
        service: AnsService,
        settings: McpSettings,
        trust: McpTrustStore | None = None,
    ) -> None:
        self.service = service
        self.settings = settings
        self.trust = trust if trust is not None else trust_store_for(service.store)
        # Per process, for tests and logs; the metric is the audit counter.
        self.dropped = 0

    # -- clock ----------------------------------------------------------------------
    def now(self) -> float:
        return float(self.service.clock().timestamp())

    def cutoff(self, now: float | None = None) -> float:
        return (self.now() if now is None else now) - self.settings.ttl_seconds

    # -- the seam -------------------------------------------------------------------
    def announce(self, message: Mapping[str, Any], caller: McpCaller) -> McpReply:
        version = version_hint(message) or caller.protocol_version
        return self._answer(lambda: self._announce(message, caller), version, caller, ANNOUNCE)

    def query(self, message: Mapping[str, Any], caller: McpCaller) -> McpReply:
        version = version_hint(message) or caller.protocol_version
        return self._answer(lambda: self._query(message, caller), version, caller, QUERY)

    def get(self, agent_id: str, caller: McpCaller) -> McpReply:
        version = caller.protocol_version
        return self._answer(lambda: self._get(agent_id, caller), version, caller, GET)

    def list(
        self,
        caller: McpCaller,
        *,
        capability: str | None = None,
        version: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> McpReply:
        return self._answer(
            lambda: self._list(caller, capability, version, after, limit),
            caller.protocol_version,
            caller,
            LIST,
        )

    def _answer(
        self,
        fn: Callable[[], McpReply],
        version: str | None,
        caller: McpCaller,
        method: str,
    ) -> McpReply:
        try:
            return fn()
        except AgtpError as exc:
            return mcp_error(exc, version)
        except Exception:
            log.exception("unhandled error in the MCP registry", method=method)
            return mcp_error(ServerError("internal error; see the server log"), version)

    # -- announce -------------------------------------------------------------------
    def _announce(self, message: Mapping[str, Any], caller: McpCaller) -> McpReply:
        try:
            ann = parse_announce(message)
            require_scope(
                caller.identity,
                DISCOVERY_REGISTER,
                method=ANNOUNCE,
                task_id=caller.task_id,
                audit=self.service.audit,
            )
            if not self.settings.allows(ann.agent.agent_id):
                raise McpForbidden(
                    f"agent_id {ann.agent.agent_id} is not in this registry's allow-list"
                )
            # The record it would become must be admissible before its key is pinned.
            check_metadata(self_asserted_metadata(ann.agent, ann.version.text))
            loaded = load_agent_key(ann.agent.public_key)
            agent_bytes = signed_bytes(ann.agent.raw)
            require_signature(loaded, agent_bytes, ann.signature, "signature")
            return self._accept(ann, loaded, agent_bytes, caller)
        except AgtpError as exc:
            self._dropped(message, caller, exc)
            raise

    def _dropped(self, message: Mapping[str, Any], caller: McpCaller, exc: AgtpError) -> None:
        self.dropped += 1
        agent = message.get("agent") if isinstance(message, Mapping) else None
        agent_id = agent.get("agent_id") if isinstance(agent, Mapping) else None
        self.service.audit.record(
            "mcp_announcement_dropped",
            status=exc.status,
            code=exc.code,
            **requester_fields(caller.identity, ANNOUNCE, caller.task_id),
            transport=caller.source,
            mcp_agent_id=str(agent_id)[:64] if agent_id is not None else None,
            reason=exc.message[:300],
        )

    def _accept(
        self, ann: Announce, loaded: LoadedKey, agent_bytes: bytes, caller: McpCaller
    ) -> McpReply:
        agent_id = ann.agent.agent_id
        now = self.now()
        digest = announcement_digest(agent_bytes)
        pinned = self.trust.get(agent_id)
        if pinned is None:
            if self.trust.count_live(self.cutoff(now)) >= self.settings.max_agents:
                raise Unavailable(
                    f"the registry holds its maximum of {self.settings.max_agents} live agents",
                    headers=(("retry-after", str(int(self.settings.ttl_seconds))),),
                )
            fresh = McpTrust(
                agent_id, ann.agent.public_key, loaded.key_id, agent_bytes, digest, now, now
            )
            pinned = self.trust.pin(fresh)
            if pinned.key_id == loaded.key_id and pinned.digest == digest:
                self._audit_key("mcp_key_pinned", caller, agent_id, loaded.key_id)
                return self._admit(ann, pinned, caller, now, first=True)
        record = self._check_key(ann, loaded, agent_bytes, pinned, now, caller)
        stored = self.service.store.get(canonical_id_of(agent_id))
        if (
            digest == pinned.digest
            and record.key_id == pinned.key_id
            and pinned.removed_at is None
            and stored is not None
            and stored.lifecycle_state == "Active"
        ):
            # Coalesced: the same announcement again is a heartbeat only.
            if self.trust.touch(agent_id, now):
                return self._accepted(
                    ann,
                    "unchanged",
                    stored,
                    dataclasses.replace(pinned, last_seen=max(pinned.last_seen, now)),
                )
        record = dataclasses.replace(
            record, announcement=agent_bytes, digest=digest, last_seen=now, removed_at=None
        )
        if not self.trust.replace(record, pinned.key_id):
            raise Conflict(
                f"agent_id {agent_id} changed keys while this announcement was applied; retry"
            )
        return self._admit(ann, record, caller, now, first=False)

    def _check_key(
        self,
        ann: Announce,
        loaded: LoadedKey,
        agent_bytes: bytes,
        pinned: McpTrust,
        now: float,
        caller: McpCaller,
    ) -> McpTrust:
        """The trust-store row this announcement leaves (key fields only
        changed on a rotation); raises when its key may not speak for the id."""
        if loaded.key_id == pinned.key_id:
            return pinned
        if not pinned.key_id:  # unpinned by an operator (ans mcp forget): pin this key
            self._audit_key("mcp_key_pinned", caller, ann.agent.agent_id, loaded.key_id)
            return dataclasses.replace(pinned, key_pem=ann.agent.public_key, key_id=loaded.key_id)
        if loaded.key_id == pinned.previous_key_id and (pinned.previous_until or 0) > now:
            return pinned  # the rotated-out key, within its grace period
        if ann.rotation_signature is not None:
            old = load_agent_key(pinned.key_pem)
            require_signature(old, agent_bytes, ann.rotation_signature, "rotation_signature")
            self._audit_key(
                "mcp_key_rotated",
                caller,
                ann.agent.agent_id,
                loaded.key_id,
                previous_key_id=pinned.key_id,
            )
            return dataclasses.replace(
                pinned,
                key_pem=ann.agent.public_key,
                key_id=loaded.key_id,
                previous_key_pem=pinned.key_pem,
                previous_key_id=pinned.key_id,
                previous_until=now + self.settings.key_grace_seconds,
            )
        if loaded.key_id == pinned.previous_key_id:
            raise SignatureInvalid(
                f"agent_id {ann.agent.agent_id}: this key was rotated out and its grace "
                "period has ended"
            )
        raise McpDuplicateId(
            f"agent_id {ann.agent.agent_id} is registered with another key; rotate with "
            "rotation_signature (signed by the registered key) or ask an operator"
        )

    def _admit(
        self, ann: Announce, record: McpTrust, caller: McpCaller, now: float, *, first: bool
    ) -> McpReply:
        svc = self.service
        cid = canonical_id_of(ann.agent.agent_id)
        stored = svc.store.get(cid)
        if stored is not None and stored.signer_kid != "self-asserted":
            # A governed record: announcing never replaces or upgrades it; the
            # heartbeat (trust row, already written) keeps it listed here.
            return self._accepted(ann, "governed", stored, record)
        svc.admit_self_asserted(
            self_asserted_metadata(ann.agent, ann.version.text),
            source=SOURCE,
            identity=caller.identity,
            task_id=caller.task_id,
            zone=self.settings.zone,
            owner=f"mcp:{ann.agent.agent_id}",
        )
        return self._accepted(ann, "registered" if first else "updated", svc.store.get(cid), record)

    def _accepted(self, ann: Announce, outcome: str, stored: Any, record: McpTrust) -> McpReply:
        body = response_object(
            ann.version.text,
            ann.agent.raw,
            True,
            registry_view(record, stored, self.settings.ttl_seconds),
            outcome=outcome,
        )
        return McpReply(200, body)

    def _audit_key(
        self, event: str, caller: McpCaller, agent_id: str, key_id: str, **fields: Any
    ) -> None:
        self.service.audit.record(
            event,
            **requester_fields(caller.identity, ANNOUNCE, caller.task_id),
            transport=caller.source,
            mcp_agent_id=agent_id,
            key_id=key_id,
            **fields,
        )

    # -- reads ----------------------------------------------------------------------
    def _require_read(self, caller: McpCaller, method: str) -> None:
        require_scope(
            caller.identity,
            DISCOVERY_QUERY,
            method=method,
            task_id=caller.task_id,
            audit=self.service.audit,
        )

    def view(self, live: Live, version: str, matched: bool, **extra: Any) -> dict[str, Any]:
        """One Response message for a live announced agent."""
        registry = registry_view(live.trust, live.stored, self.settings.ttl_seconds)
        return response_object(version, live.agent, matched, registry, **extra)

    def _live(self, recs: builtins.list[McpTrust], cutoff: float) -> builtins.list[Live]:
        """The live ones among ``recs`` (one store read for all): not past the
        TTL (a stale agent is never answered, swept or not) and their record
        Active (admitted, not suspended or retired by governance)."""
        fresh = [r for r in recs if r.live(cutoff)]
        stored = self.service.store.get_many(canonical_id_of(r.agent_id) for r in fresh)
        out = []
        for r in fresh:
            s = stored.get(canonical_id_of(r.agent_id))
            if s is not None and s.lifecycle_state == "Active":
                out.append(Live(r, s, orjson.loads(r.announcement)))
        return out

    def live(self, agent_id: str) -> Live | None:
        rec = self.trust.get(agent_id)
        found = self._live([rec], self.cutoff()) if rec is not None else []
        return found[0] if found else None

    def _get(self, agent_id: str, caller: McpCaller) -> McpReply:
        self._require_read(caller, GET)
        key = parse_agent_id(agent_id, "agent_id")
        live = self.live(key)
        if live is None:
            raise NotFound(f"no live announced agent {key}")
        version = caller.protocol_version or CURRENT_VERSION
        return McpReply(200, self.view(live, version, True))

    def iter_live(self, after: str = "") -> Iterator[Live]:
        """Live announced agents in agent_id order (pages of the store)."""
        cutoff = self.cutoff()
        while True:
            page = self.trust.page(after, PAGE, cutoff)
            yield from self._live(page, cutoff)
            if len(page) < PAGE:
                return
            after = page[-1].agent_id

    def _list(
        self,
        caller: McpCaller,
        capability: str | None,
        version: str | None,
        after: str | None,
        limit: int | None,
    ) -> McpReply:
        self._require_read(caller, LIST)
        size = self.settings.page_size if limit is None else limit
        start = "" if after is None else parse_agent_id(after, "after")
        out: list[dict[str, Any]] = []
        proto = caller.protocol_version or CURRENT_VERSION
        last: str | None = None
        more = False
        for live in self.iter_live(start):
            if capability is not None and not has_capability(live.agent, capability, version):
                continue
            if len(out) == size:
                more = True
                break
            out.append(self.view(live, proto, True))
            last = live.trust.agent_id
        body = {"protocol_version": proto, "agents": out, "next": last if more else None}
        return McpReply(200, body)

    def _query(self, message: Mapping[str, Any], caller: McpCaller) -> McpReply:
        q = parse_query(message)
        self._require_read(caller, QUERY)
        responses = match_query(self, q, caller)
        return McpReply(200, {"protocol_version": q.version.text, "responses": responses})

    def change_event(self, canonical_id: str, version: str) -> dict[str, Any] | None:
        """What a change-feed entry means to MCP subscribers (the WebSocket
        side streams the store's feed): None for a record that is not an
        announced agent; else ``{"change": "upsert", **Response}`` while the
        agent is live, or ``{"change": "removed", "protocol_version",
        "agent": {"agent_id"}, "matched": false}``."""
        agent_id = agent_id_of(canonical_id)
        if agent_id is None or self.trust.get(agent_id) is None:
            return None
        live = self.live(agent_id)
        if live is not None:
            return {"change": "upsert", **self.view(live, version, True)}
        return {
            "change": "removed",
            "protocol_version": version,
            "agent": {"agent_id": agent_id},
            "matched": False,
        }

    # -- removal --------------------------------------------------------------------
    def expire(self, rec: McpTrust, now: float) -> bool:
        """Remove one agent past its TTL, once across every replica (the
        trust-store claim), audited, with a change-feed entry."""
        if not self.trust.mark_removed(rec.agent_id, rec.last_seen, now):
            return False
        fields = {
            "mcp_agent_id": rec.agent_id,
            "last_seen": rec.last_seen,
            "ttl_seconds": self.settings.ttl_seconds,
        }
        removed = self.service.registrar.remove_self_asserted(
            canonical_id_of(rec.agent_id), source=SOURCE, event="mcp_agent_expired", **fields
        )
        if not removed:  # governed (kept) or never admitted: still audited
            self.service.audit.record(
                "mcp_agent_expired", canonical_id=canonical_id_of(rec.agent_id), **fields
            )
        return True

    def sweep(self, limit: int = 500) -> int:
        """Remove every agent whose last announcement is older than the TTL."""
        now = self.now()
        return sum(self.expire(rec, now) for rec in self.trust.stale(self.cutoff(now), limit))
