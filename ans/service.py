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
from dataclasses import dataclass, replace
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
from .freshness import merge_pinned
from .matcher import CapabilityMatcher, profile_from
from .ranking import rank_score, sort_key
from .store import RegistryStore, StoredAgent

Clock = Callable[[], datetime]
log = structlog.get_logger("ans")


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class _LocalAnswer:
    ranked: list[tuple[float, float, AgentEntry]]
    matched: Any  # QueryScores, or None without an intent


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
        return _LocalAnswer(ranked, matched)

    def _local_item(
        self, req: DiscoverRequest, score: float, cms: float, entry: AgentEntry, matched: Any
    ) -> dict[str, Any]:
        p = req.params
        item = {**entry.fields, "capability_match_score": cms, "rank_score": score}
        unavailable = self._unavailable.get(entry.canonical_id)
        if unavailable is not None:  # discovery draft 6.2; available agents are unchanged
            item["available"] = False
            item["availability_reason"] = unavailable
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
        total = len(local.ranked)
        chosen = top
        if gathered is not None:
            # Only the local top `limit` can survive the cut, so only they are built.
            merged = merge(
                top,
                self._registry.__contains__,  # any locally indexed agent wins
                gathered.candidates,
                lambda tier, behavioral, cms: rank_score(weights, tier, behavioral, cms),
            )
            total += len(merged) - len(top)
            chosen = merged[: p.limit]
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
        result[RESULT_SIGNATURE_FIELD] = signature_object(canonicalize(result), self.key)
        return result

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

    # -- index freshness (discovery draft 4.4; driven by ans.refresher) ----------------------
    def indexed_ids(self) -> list[str]:
        """The canonical IDs currently in the index."""
        with self._lock:
            return list(self._registry)

    def refresh_capabilities(self, canonical_id: str, described: dict[str, Any]) -> bool:
        """Replace an indexed agent's capability document with what it just
        answered to DESCRIBE (already validated), re-embedding it; the signed
        manifest (tier, score, zone) is untouched. False when nothing changed
        or the agent left the index meanwhile."""
        stored = self.store.get(canonical_id)
        if stored is None or stored.lifecycle_state != "Active":
            return False
        caps = merge_pinned(described, stored.capabilities)
        if canonicalize(caps) == canonicalize(stored.capabilities):
            return False  # unchanged: not re-embedded
        profile = profile_from(stored.manifest, caps)
        vectors = self.matcher.embed_profile(profile)
        now = rfc3339(self.clock())
        with self._activate_lock, self._lock:
            current = self.store.get(canonical_id)
            if (
                current is None
                or current.lifecycle_state != "Active"
                or canonical_id not in self._registry
                or current.manifest != stored.manifest
                or current.capabilities != stored.capabilities
            ):
                return False  # re-activated, deregistered or removed while we asked
            updated = replace(current, capabilities=caps, updated_at=now)
            self.store.upsert(updated)
            self.matcher.upsert(profile, vectors)
            self._index_entry(AgentEntry.from_stored(updated))
        self.audit.record(
            "capabilities_refreshed",
            method="DESCRIBE",
            canonical_id=canonical_id,
            agent_label=stored.manifest.get("agent_label"),
            changed_fields=sorted(
                k
                for k in caps.keys() | stored.capabilities.keys()
                if caps.get(k) != stored.capabilities.get(k)
            )[:32],
        )
        log.info("capabilities refreshed", canonical_id=canonical_id)
        return True

    def remove_for_freshness(
        self,
        canonical_id: str,
        reason: str,
        failures: int,
        last_error: str,
        before_removal: Callable[[StoredAgent], str] | None = None,
    ) -> bool:
        """Take an agent that stopped answering DESCRIBE out of the index and
        persist it as lifecycle "Removed" (it stays out after a restart; a
        governance re-ACTIVATE brings it back). ``before_removal`` runs first,
        under the lock, with the stored agent — it writes the governance notice
        to the outbox and returns its event id; if it raises, nothing is
        removed. False if the agent was no longer indexed."""
        now = rfc3339(self.clock())
        with self._activate_lock, self._lock:
            stored = self.store.get(canonical_id)
            if (
                stored is None
                or stored.lifecycle_state != "Active"
                or canonical_id not in self._registry
            ):
                return False
            event_id = before_removal(stored) if before_removal is not None else None
            self.store.upsert(replace(stored, lifecycle_state="Removed", updated_at=now))
            self._unindex(canonical_id)
        self.audit.record(
            "freshness_removal",
            method="DESCRIBE",
            canonical_id=canonical_id,
            agent_label=stored.manifest.get("agent_label"),
            org_domain=stored.manifest.get("org_domain"),
            reason=reason,
            failures=failures,
            last_error=last_error,
            event_id=event_id,
        )
        log.warning(
            "agent removed for freshness",
            canonical_id=canonical_id,
            reason=reason,
            failures=failures,
            last_error=last_error,
        )
        return True

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
