"""The ANS core: DISCOVER, ACTIVATE and DESCRIBE over typed requests.

:class:`AnsService` owns the in-memory registry (rebuilt from the store at
start-up), the capability matcher, the signing key, the trusted governance
keys, the audit log and the clock — all passed in, nothing global. It does
no network I/O; the ASGI app in :mod:`ans.app` calls it.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from ans.federation.federator import Federator, Gathered, Ranked, merge, result_path
from ans.governance.audit import AuditLog, rfc3339
from ans.governance.keys import SigningKey
from ans.governance.manifest import validate_capabilities, verify_manifest
from ans.governance.policy import (
    DISCOVERY_QUERY,
    DISCOVERY_REGISTER,
    ZonePolicy,
    max_tier,
    passes_gates,
    require_scope,
)
from ans.governance.signing import (
    RESULT_SIGNATURE_FIELD,
    KeyLookup,
    sign_document,
    signature_object,
)
from ans.protocol.errors import AgtpError, MissingHeader, NotFound
from ans.protocol.jcs import canonicalize
from ans.protocol.messages import (
    ActivateRequest,
    DescribeRequest,
    DiscoverRequest,
    Limits,
)

from .config import Config
from .matcher import CapabilityMatcher, profile_from
from .ranking import rank_score, sort_key
from .routing import NOT_INDEXED, PreferredState, Routing, choose_alternative, routing_reason
from .store import RegistryStore, StoredAgent

Clock = Callable[[], datetime]
log = structlog.get_logger("ans")


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class _LocalAnswer:
    ranked: list[tuple[float, float, AgentEntry]]
    matched: Any  # QueryScores, or None without an intent
    # preferred_agent given: the decision, and whether ranked[0] is the routing position.
    routing: Routing | None = None
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """One indexed agent: gate attributes plus its precomputed result fields."""

    canonical_id: str
    lifecycle_state: str
    trust_tier: int
    behavioral_trust_score: float
    governance_zone: str
    org_domain: str
    fields: dict[str, Any]
    required_scope: str

    @classmethod
    def from_stored(cls, agent: StoredAgent) -> AgentEntry:
        m, caps = agent.manifest, agent.capabilities
        fields = {
            "manifest_uri": m["manifest_uri"],
            "canonical_id": m["canonical_id"],
            "agent_label": m["agent_label"],
            "org_domain": m["org_domain"],
            "trust_tier": m["trust_tier"],
            # Always the score from the verified manifest, never a self-asserted one.
            "behavioral_trust_score": float(m["behavioral_trust_score"]),
            "supported_methods": list(m["supported_methods"]),
            "governance_zone": m["governance_zone"],
            "job_description": m["job_description"],
        }
        if m["trust_tier"] == 2 and "trust_warning" in m:
            fields["trust_warning"] = m["trust_warning"]
        required = caps.get("required_scope") or " ".join(m["authority_scope_categories"])
        return cls(
            canonical_id=m["canonical_id"],
            lifecycle_state=agent.lifecycle_state,
            trust_tier=int(m["trust_tier"]),
            behavioral_trust_score=float(m["behavioral_trust_score"]),
            governance_zone=m["governance_zone"],
            org_domain=m["org_domain"].lower(),
            fields=fields,
            required_scope=required,
        )


class AnsService:
    def __init__(
        self,
        config: Config,
        store: RegistryStore,
        matcher: CapabilityMatcher,
        signing_key: SigningKey,
        governance_keys: KeyLookup,
        audit: AuditLog,
        clock: Clock = utc_now,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex[:16],
        federator: Federator | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.matcher = matcher
        self.key = signing_key
        self.governance_keys = governance_keys
        self.audit = audit
        self.clock = clock
        self.new_id = new_id
        self.federator = federator
        self.limits = Limits(
            max_body_bytes=config.max_body_bytes,
            default_limit=config.default_limit,
            max_limit=config.max_limit,
        )
        self.zones = ZonePolicy.of(config.restricted_zones)
        self._registry: dict[str, AgentEntry] = {}
        self._gate_counts: Counter[tuple[str, int]] = Counter()
        # Availability signals (discovery draft 6.2): canonical_id -> reason
        # ("suspended", "at_capacity", "not_responding", ...) for indexed
        # agents that are Active but should not be routed to right now.
        self._unavailable: dict[str, str] = {}
        self._lock = threading.RLock()
        self._activate_lock = threading.Lock()
        self.manifest = self._own_manifest()

    # -- start-up -------------------------------------------------------------------
    def load(self) -> int:
        """Rebuild the registry and the capability index from the store."""
        n = 0
        for agent in self.store.iter_active():
            entry = AgentEntry.from_stored(agent)
            self.matcher.upsert(profile_from(agent.manifest, agent.capabilities))
            with self._lock:
                self._index_entry(entry)
            n += 1
        return n

    def __len__(self) -> int:
        return len(self._registry)

    # -- availability ------------------------------------------------------------------
    def mark_availability(self, canonical_id: str, reason: str | None) -> None:
        """Mark an indexed agent unavailable (with a reason) or available (None)."""
        with self._lock:
            if reason is None:
                self._unavailable.pop(canonical_id, None)
            elif canonical_id in self._registry:
                self._unavailable[canonical_id] = reason

    def unavailable_reason(self, canonical_id: str) -> str | None:
        """Why an indexed agent should not be routed to now, or None if it may be."""
        return self._unavailable.get(canonical_id)

    def _index_entry(self, entry: AgentEntry) -> None:
        """Put an entry in the registry (caller holds the lock), keeping the
        per-(zone, tier) counts that bound how many agents could pass the gates."""
        old = self._registry.get(entry.canonical_id)
        if old is not None:
            self._gate_counts[(old.governance_zone, old.trust_tier)] -= 1
        self._registry[entry.canonical_id] = entry
        self._gate_counts[(entry.governance_zone, entry.trust_tier)] += 1

    def _unindex(self, canonical_id: str) -> AgentEntry | None:
        """Take an agent out of the registry, the gate counts, the availability
        marks and the capability index (caller holds the lock). The store row
        is the caller's business."""
        old = self._registry.pop(canonical_id, None)
        if old is None:
            return None
        self._gate_counts[(old.governance_zone, old.trust_tier)] -= 1
        self._unavailable.pop(canonical_id, None)
        self.matcher.remove(canonical_id)
        return old

    def _gate_bound(self, req: DiscoverRequest) -> int:
        """An upper bound on the local agents that can pass the gates (zone, tier,
        restricted zones), without matching anything."""
        p = req.params
        cap = max_tier(p)
        total = 0
        with self._lock:
            for (zone, tier), n in self._gate_counts.items():
                if tier <= cap and p.governance_zone in (None, zone):
                    if self.zones.granted(zone, req.identity.scope):
                        total += n
        return total

    # -- DISCOVER ---------------------------------------------------------------------
    def discover(self, req: DiscoverRequest) -> dict[str, Any]:
        """A local-only answer (no federation), signed."""
        self._admit(req)
        return self._finish(req, self._local(req), None)

    async def discover_async(self, req: DiscoverRequest) -> dict[str, Any]:
        """Local answer first; when fewer than ``limit`` pass and federation is
        configured, ask trusted peers, then merge, re-rank and re-sign."""
        self._admit(req)  # 451 / 453 before anything leaves this server
        fed = self.federator
        if fed is None:
            return self._finish(req, self._local(req), None)
        early = fed.plan(req, self._gate_bound(req))
        if early.peers:
            # Fewer than `limit` local agents can pass the gates at all, so
            # forwarding is certain: the peers work while we match locally.
            pending = asyncio.ensure_future(fed.gather(req, early))
            local = await asyncio.to_thread(self._local, req)
            return self._finish(req, local, await pending)
        local = self._local(req)
        plan = fed.plan(req, len(local.ranked))
        if not plan.peers:
            return self._finish(req, local, None)
        return self._finish(req, local, await fed.gather(req, plan))

    def _admit(self, req: DiscoverRequest) -> None:
        require_scope(
            req.identity, DISCOVERY_QUERY, method="DISCOVER", task_id=req.task_id, audit=self.audit
        )
        self.zones.check_requested(
            req.identity,
            req.params.governance_zone,
            method="DISCOVER",
            task_id=req.task_id,
            audit=self.audit,
        )

    def _local(self, req: DiscoverRequest) -> _LocalAnswer:
        p = req.params
        weights = self.config.ranking
        matched = None
        scores = None  # no intent: every agent is a candidate, ranked on trust alone
        if p.intent is not None:
            matched = self.matcher.query(
                p.intent, p.capability_domains, evidence=p.include_evidence
            )
            scores = matched.above(self.config.min_capability_match)
        ranked: list[tuple[float, float, AgentEntry]] = []
        with self._lock:
            items = (
                ((cid, s) for cid, s in scores.items())
                if scores is not None
                else ((cid, 0.0) for cid in self._registry)
            )
            for cid, cms in items:
                entry = self._registry.get(cid)
                if entry is None or not passes_gates(entry, p, req.identity.scope, self.zones):
                    continue
                score = rank_score(weights, entry.trust_tier, entry.behavioral_trust_score, cms)
                ranked.append((score, cms, entry))
        ranked.sort(key=lambda t: sort_key(t[0], t[2].canonical_id))
        if p.preferred_agent is not None:
            return self._route(req, ranked, matched)
        return _LocalAnswer(ranked, matched)

    def _local_item(
        self, req: DiscoverRequest, score: float, cms: float, entry: AgentEntry, matched: Any
    ) -> dict[str, Any]:
        p = req.params
        item = {**entry.fields, "capability_match_score": cms, "rank_score": score}
        if p.scope_negotiate:
            item["required_scope"] = entry.required_scope
        if p.include_evidence:
            item.update(
                matched.evidence(entry.canonical_id)
                if matched is not None
                else {"score_components": {}, "matched_tags": [], "matched_examples": []}
            )
        return item

    def _finish(
        self, req: DiscoverRequest, local: _LocalAnswer, gathered: Gathered | None
    ) -> dict[str, Any]:
        p = req.params
        weights = self.config.ranking
        top = [
            Ranked(
                score, entry.canonical_id, self._local_item(req, score, cms, entry, local.matched)
            )
            for score, cms, entry in local.ranked[: p.limit]
        ]
        # The routing position (preferred agent or its alternative) stays results[0].
        pinned = top[:1] if local.pinned else []
        if pinned and local.routing is not None:
            first = pinned[0]
            pinned[0] = top[0] = Ranked(
                first.rank_score,
                first.canonical_id,
                {**first.item, **local.routing.item_fields()},
            )
        total = len(local.ranked)
        chosen = top
        if gathered is not None:
            # Only the local top `limit` can survive the cut, so only they are built.
            preferred = p.preferred_agent
            merged = merge(
                top[len(pinned) :],
                # any locally indexed agent wins; the preferred agent appears
                # only at the routing position, never from a peer
                lambda cid: cid in self._registry or cid == preferred,
                gathered.candidates,
                lambda tier, behavioral, cms: rank_score(weights, tier, behavioral, cms),
            )
            total += len(merged) - (len(top) - len(pinned))
            chosen = [*pinned, *merged[: p.limit - len(pinned)]]
        results = []
        for i, r in enumerate(chosen, start=1):
            item = {"rank": i, **r.item}
            item["rank_score"] = r.rank_score
            results.append(item)
        result: dict[str, Any] = {
            "query_id": f"qry-{self.new_id()}",
            "total_matches": total,
            "returned": len(results),
            "results": results,
            "generated_at": rfc3339(self.clock()),
            "query_digest": req.query_digest,
            "ranking": weights.name,
        }
        if gathered is not None:
            result["federation_path"] = result_path(self.key.kid, chosen)
            result["warnings"] = gathered.warnings
        if local.routing is not None:
            result["routing"] = local.routing.summary()
        result[RESULT_SIGNATURE_FIELD] = signature_object(canonicalize(result), self.key)
        return result

    # -- routing alternatives (discovery draft 6.1; rules in ans.routing) ----------------
    def _route(
        self,
        req: DiscoverRequest,
        ranked: list[tuple[float, float, AgentEntry]],
        matched: Any,
    ) -> _LocalAnswer:
        """Put the preferred agent, or its most equivalent alternative, at ranked[0].

        The preferred agent never appears anywhere else. With an intent the
        alternative is the most equivalent *intent match* (``ranked`` holds
        exactly the gate-passing intent matches); without one, the most
        equivalent gate-passing agent. Either way it must be available and at
        least ``min_equivalent_confidence`` equivalent, else there is none."""
        p = req.params
        cid = p.preferred_agent
        assert cid is not None
        scope = req.identity.scope
        stored = self.store.get(cid)
        with self._lock:
            entry = self._registry.get(cid)
            unavailable = dict(self._unavailable)
        zone = (
            entry.governance_zone
            if entry is not None
            else str(stored.manifest.get("governance_zone", ""))
            if stored is not None
            else ""
        )
        state = PreferredState(
            known=entry is not None or stored is not None,
            zone_granted=self.zones.granted(zone, scope),
            indexed=entry is not None,
            unavailable=unavailable.get(cid),
            passes_gates=entry is not None and passes_gates(entry, p, scope, self.zones),
            stored_state=stored.lifecycle_state if stored is not None else None,
        )
        reason = routing_reason(state)
        rest = [t for t in ranked if t[2].canonical_id != cid]
        if reason is None and entry is not None:
            own = next((t for t in ranked if t[2].canonical_id == cid), None)
            if own is None:  # passes the gates but not the intent's capability floor
                cms = matched.score(cid) if matched is not None else 0.0
                score = rank_score(
                    self.config.ranking, entry.trust_tier, entry.behavioral_trust_score, cms
                )
                own = (score, cms, entry)
            return _LocalAnswer([own, *rest], matched, Routing(cid, True), pinned=True)
        reason = reason or NOT_INDEXED
        chosen = None
        if reason != NOT_INDEXED and stored is not None:
            # The preferred agent's own profile, from the store: it may have
            # left the index (suspended, revoked, removed for freshness).
            equivalence = self.matcher.equivalence(
                profile_from(stored.manifest, stored.capabilities)
            )
            chosen = choose_alternative(
                (t for t in rest if t[2].canonical_id not in unavailable),
                lambda t: t[2].canonical_id,
                lambda t: t[0],
                equivalence,
                self.config.min_equivalent_confidence,
            )
        self.audit.record(
            "routing_fallback",
            status=200,
            method="DISCOVER",
            agent_id=req.identity.agent_id,
            principal_id=req.identity.principal_id,
            task_id=req.task_id,
            query_digest=req.query_digest,
            preferred_agent=cid,
            routing_reason=reason,
            # for the operator only: the caller saw not_indexed
            restricted_zone_hidden=state.known and not state.zone_granted,
            alternative=chosen[0][2].canonical_id if chosen else None,
            equivalent_confidence=chosen[1] if chosen else None,
        )
        if chosen is None:
            return _LocalAnswer(rest, matched, Routing(cid, False, reason))
        alt, confidence = chosen
        others = [t for t in rest if t is not alt]
        routing = Routing(cid, False, reason, alt[2].canonical_id, confidence)
        return _LocalAnswer([alt, *others], matched, routing, pinned=True)

    # -- ACTIVATE ---------------------------------------------------------------------
    def activate(self, req: ActivateRequest) -> dict[str, Any]:
        """Verify, persist durably, then index. Nothing is stored on any failure."""
        require_scope(
            req.identity,
            DISCOVERY_REGISTER,
            method="ACTIVATE",
            task_id=req.task_id,
            audit=self.audit,
        )
        try:
            validate_capabilities(req.capabilities)
            verified = verify_manifest(req.manifest, self.governance_keys)
        except AgtpError as exc:
            self.audit.record(
                "activation_refused",
                status=exc.status,
                code=exc.code,
                method="ACTIVATE",
                agent_id=req.identity.agent_id,
                principal_id=req.identity.principal_id,
                task_id=req.task_id,
                canonical_id=str(req.manifest.get("canonical_id"))[:256],
                reason=exc.message,
            )
            raise
        manifest = verified.manifest
        cid = manifest["canonical_id"]
        profile = profile_from(manifest, req.capabilities)
        vectors = self.matcher.embed_profile(profile)
        now = rfc3339(self.clock())
        with self._activate_lock:
            previous = self.store.get(cid)
            stored = StoredAgent(
                canonical_id=cid,
                manifest=manifest,
                capabilities=req.capabilities,
                lifecycle_state="Active",
                signer_kid=verified.signer_kid,
                registered_at=previous.registered_at if previous else now,
                updated_at=now,
            )
            self.store.upsert(stored)  # durable (WAL, synchronous=FULL) before we answer
            entry = AgentEntry.from_stored(stored)
            with self._lock:
                self.matcher.upsert(profile, vectors)
                self._index_entry(entry)
        self.audit.record(
            "activation",
            status=200,
            method="ACTIVATE",
            agent_id=req.identity.agent_id,
            principal_id=req.identity.principal_id,
            task_id=req.task_id,
            canonical_id=cid,
            signer_kid=verified.signer_kid,
            trust_tier=entry.trust_tier,
            governance_zone=entry.governance_zone,
            replaced=previous is not None,
        )
        log.info(
            "agent activated",
            canonical_id=cid,
            label=entry.fields["agent_label"],
            replaced=previous is not None,
        )
        return {
            "canonical_id": cid,
            "lifecycle_state": "Active",
            "indexed": True,
            "registered_at": stored.registered_at,
            "updated_at": now,
        }

    # -- DESCRIBE -------------------------------------------------------------------------
    def describe(self, req: DescribeRequest) -> dict[str, Any]:
        if req.canonical_id is None or req.canonical_id == self.manifest["canonical_id"]:
            return self.manifest
        if req.identity is None:
            raise MissingHeader(
                "DESCRIBE of an indexed agent requires Agent-ID, Principal-ID and Authority-Scope",
                code="missing_agent_id",
            )
        require_scope(
            req.identity, DISCOVERY_QUERY, method="DESCRIBE", task_id=req.task_id, audit=self.audit
        )
        with self._lock:
            entry = self._registry.get(req.canonical_id)
        if entry is None or not self.zones.granted(entry.governance_zone, req.identity.scope):
            raise NotFound(f"no Active agent {req.canonical_id!r} in this ANS")
        stored = self.store.get(req.canonical_id)
        if stored is None or stored.lifecycle_state != "Active":
            raise NotFound(f"no Active agent {req.canonical_id!r} in this ANS")
        return {"manifest": stored.manifest, "capabilities": stored.capabilities}

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self.key.public.jwk()]}

    def _own_manifest(self) -> dict[str, Any]:
        """This ANS's Agent Manifest Document, self-signed, carrying its public key."""
        c = self.config
        jwk = self.key.public.jwk()
        canonical = hashlib.sha256(
            canonicalize({k: jwk[k] for k in ("crv", "kty", "x", "y")})
        ).hexdigest()
        doc: dict[str, Any] = {
            "document_type": "agtp-manifest",
            "schema_version": "1.0",
            "manifest_uri": c.agent_id,
            "canonical_id": canonical,
            "agent_label": c.agent_label,
            "org_domain": c.org_domain,
            "governance_zone": c.governance_zone,
            "trust_tier": 1,
            "package_format": "none",
            "package_integrity_hash": f"sha256:{canonical}",
            "lifecycle_state": "Active",
            "cert_status": "Active",
            "principal_org": c.principal_org,
            "activated_at": rfc3339(self.clock()),
            "behavioral_trust_score": 1.0,
            "authority_scope_categories": ["discovery:query", "discovery:register"],
            "supported_methods": ["DISCOVER", "DESCRIBE", "ACTIVATE"],
            "job_description": "AGTP Agent Name Service: answers DISCOVER with ranked, "
            "ES256-signed sets of Agent Manifest Documents.",
            "version": "0.1.0",
            "public_key": jwk,
            "jwks": {"keys": [jwk]},
            "jwks_uri": "/.well-known/jwks.json",
            "ranking_weights": {
                "name": c.ranking.name,
                "trust_tier_weight": c.ranking.trust_tier,
                "behavioral_trust_weight": c.ranking.behavioral_trust,
                "capability_match_weight": c.ranking.capability_match,
            },
            "capabilities": {
                "supported_methods": ["DISCOVER", "DESCRIBE", "ACTIVATE"],
                "modalities": ["application/agtp+json"],
                "zones_accepted": sorted({c.governance_zone, *c.restricted_zones}),
                "max_limit": c.max_limit,
            },
        }
        signed: dict[str, Any] = sign_document(doc, self.key, "signature")
        return signed
