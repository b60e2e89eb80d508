"""The ANS core: DISCOVER, ACTIVATE and DESCRIBE over typed requests.

:class:`AnsService` owns the in-memory registry (rebuilt from the store at
start-up), the capability matcher, the signing key, the trusted governance
keys, the audit log and the clock — all passed in, nothing global. It does
no network I/O; the ASGI app in :mod:`ans.app` calls it.

The registry is compact (:mod:`ans.registry`): gate columns only. Result
fields are read from the store for the results actually returned (a small
LRU keeps the hot ones). Start-up (:meth:`AnsService.load`) uses a persisted
capability-index snapshot when one is usable and applies the store's changes
since it (``change_seq``); otherwise it rebuilds the index in batches.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from ans.federation.federator import Dispatched, Federator, Gathered, merge, result_path
from ans.federation.federator import Ranked as FedRanked
from ans.governance.audit import AuditLog, rfc3339
from ans.governance.keys import SigningKey
from ans.governance.lifecycle import (
    ACTIVE,
    RETIRED,
    SUSPENDED,
    check_manifest_freshness,
    check_manifest_time,
    check_transition,
    verify_event,
)
from ans.governance.manifest import validate_capabilities, verify_manifest
from ans.governance.policy import (
    DISCOVERY_QUERY,
    DISCOVERY_REGISTER,
    ZonePolicy,
    max_tier,
    passes_gates,
    requester_fields,
    require_scope,
)
from ans.governance.signing import (
    RESULT_SIGNATURE_FIELD,
    KeyLookup,
    sign_document,
    signature_object,
)
from ans.protocol.errors import (
    AgtpError,
    Conflict,
    Gone,
    MissingHeader,
    NotFound,
    SignatureInvalid,
    Unavailable,
    UnknownSigningKey,
)
from ans.protocol.jcs import canonicalize
from ans.protocol.messages import (
    ActivateRequest,
    DescribeRequest,
    DiscoverRequest,
    LifecycleRequest,
    Limits,
)

from .audited import publish, require_writable
from .config import Config
from .freshness import merge_pinned
from .matcher import CapabilityMatcher, profile_from
from .ranking import rank_score
from .registry import AgentEntry, Registry, result_fields
from .routing import NOT_INDEXED, PreferredState, Routing, choose_alternative, routing_reason
from .store import EventRecord, RegistryStore, StoredAgent, Tombstone

Clock = Callable[[], datetime]
log = structlog.get_logger("ans")
# Result fields of recently returned agents (manifest -> item fields), so a
# hot DISCOVER does not read the store; invalidated on every re-index.
FIELDS_CACHE = 4096
# How long an early federated DISCOVER waits for its peer requests to go out
# (a first connection or key fetch) before matching locally anyway.
DISPATCH_WAIT = 0.02
# Agents embedded and indexed per batch at start-up and by ans import.
INDEX_BATCH = 1024


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class _LocalAnswer:
    # At least the best `limit` gate-passing local agents, in order (all of
    # them on the routing path); `total` counts every one.
    ranked: list[tuple[float, float, AgentEntry]]
    matched: Any  # QueryScores, or None without an intent
    total: int
    # preferred_agent given: the decision, and whether ranked[0] is the routing position.
    routing: Routing | None = None
    pinned: bool = False


def _cms_of(r: FedRanked) -> float:
    value = r.item.get("capability_match_score", 0.0)
    return float(value) if isinstance(value, (int, float)) else 0.0


def _batches(items: Iterable[Any], size: int) -> Iterable[list[Any]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


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
        self.relevance = config.relevance  # what counts as a match (ans.relevance)
        self.zones = ZonePolicy.of(
            config.restricted_zones,
            config.public_zones,
            config.unlisted_zones == "restricted",
        )
        self._registry = Registry(config.ranking)
        self._fields: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._fields_gen = 0
        # Where the capability index came from at start-up, and the
        # change_seq it reflects (a snapshot is written only past it).
        self.index_loaded_from = "empty"
        self.load_stats: dict[str, Any] = {}
        self._snapshot_seq: int | None = None
        # Availability signals (discovery draft 6.2): canonical_id -> reason
        # ("suspended", "at_capacity", "not_responding", ...) for indexed
        # agents that are Active but should not be routed to right now.
        self._unavailable: dict[str, str] = {}
        # Agents that must never be served, not even from a peer: Suspended
        # ones and tombstoned (Revoked/Deprecated) canonical ids -> state.
        self._withdrawn: dict[str, str] = {}
        self._lock = threading.RLock()
        self._activate_lock = threading.Lock()
        self.manifest = self._own_manifest()

    # -- start-up -------------------------------------------------------------------
    def load(self, snapshot: Mapping[str, Any] | None = None) -> int:
        """Rebuild the registry from the store, and the capability index from
        ``snapshot`` (the meta of a snapshot already loaded into the matcher)
        plus the store's changes since, or from scratch when None.

        An Active agent whose manifest was signed by a governance key that is
        no longer trusted is not indexed (it stays in the store, and comes
        back if the key is trusted again)."""
        t0 = time.perf_counter()
        self._withdrawn = self.store.withdrawn()
        skipped = 0
        for rows in _batches(self.store.iter_index_rows(), 65536):
            trusted = []
            for row in rows:
                if self.governance_keys.get(row.signer_kid) is None:
                    self._deindexed(row.canonical_id, row.signer_kid)
                    skipped += 1
                else:
                    trusted.append(row)
            with self._lock:
                self._registry.put_many(trusted)
        t1 = time.perf_counter()
        registry = self._registry
        delta = dropped = embedded = 0
        if snapshot is not None:
            seq = int(snapshot["change_seq"])
            for agents in _batches(self.store.changed_since(seq), INDEX_BATCH):
                delta += len(agents)
                fresh = [a for a in agents if a.canonical_id in registry]
                for a in agents:
                    if a.canonical_id not in registry:
                        self.matcher.remove(a.canonical_id)
                self._embed_and_upsert(fresh)
                embedded += len(fresh)
            t2 = time.perf_counter()
            indexed = set(self.matcher.ids())
            for cid in indexed - registry.keys():
                self.matcher.remove(cid)
                dropped += 1
            missing = [cid for cid in registry if cid not in indexed]
            for chunk in _batches(missing, INDEX_BATCH):
                found = self.store.get_many(chunk)
                self._embed_and_upsert([found[c] for c in chunk if c in found])
                embedded += len(chunk)
            self.index_loaded_from = "snapshot"
            self._snapshot_seq = seq if delta == 0 and dropped == 0 and not missing else None
        else:
            t2 = t1
            for agents in _batches(
                (a for a in self.store.iter_active() if a.canonical_id in registry), INDEX_BATCH
            ):
                self._embed_and_upsert(agents)
                embedded += len(agents)
            self.index_loaded_from = "rebuild"
        t3 = time.perf_counter()
        self.load_stats = {
            "index_loaded_from": self.index_loaded_from,
            "agents": len(registry),
            "not_indexed_untrusted_key": skipped,
            "delta_rows": delta,
            "dropped": dropped,
            "embedded": embedded,
            "registry_s": round(t1 - t0, 3),
            "delta_s": round(t2 - t1, 3),
            "index_s": round(t3 - t2, 3),
            "total_s": round(t3 - t0, 3),
        }
        log.info("cold start", **self.load_stats)
        return len(registry)

    def _deindexed(self, canonical_id: str, signer_kid: str) -> None:
        self.audit.record(
            "deindexed",
            reason="signing_key_removed",
            canonical_id=canonical_id,
            signer_kid=signer_kid,
        )
        log.warning(
            "agent not indexed: its governance key is no longer trusted",
            canonical_id=canonical_id,
            signer_kid=signer_kid,
        )

    def _embed_and_upsert(self, agents: Sequence[StoredAgent]) -> None:
        """Embed a batch of stored agents (outside any lock) and put them in the
        capability index."""
        if not agents:
            return
        profiles = [profile_from(a.manifest, a.capabilities) for a in agents]
        vectors = self.matcher.embed_profiles(profiles)
        with self._lock:
            self.matcher.upsert_many(list(zip(profiles, vectors, strict=True)))

    def save_snapshot(self, directory: Path, *, force: bool = False) -> bool:
        """Persist the capability index (``CapabilityIndex.save``) with the
        store's change_seq, under the activate lock so both agree. Skipped when
        nothing changed since the snapshot we started from (unless ``force``)."""
        with self._activate_lock:
            seq = self.store.max_seq()
            if not force and seq == self._snapshot_seq:
                return False
            t0 = time.perf_counter()
            with self._lock:
                meta = {
                    "change_seq": seq,
                    "count": len(self.matcher),
                    "signer_kids": self._registry.signer_kids(),
                    "written_at": rfc3339(self.clock()),
                }
                self.matcher.save(directory, meta)
            self._snapshot_seq = seq
        log.info(
            "index snapshot written",
            directory=str(directory),
            change_seq=seq,
            count=meta["count"],
            seconds=round(time.perf_counter() - t0, 3),
        )
        return True

    def health(self) -> dict[str, Any]:
        """The /healthz body: agent count, where the index came from and, with
        peers, how many are being skipped (counts only: peer URLs stay private)."""
        body: dict[str, Any] = {
            "status": "ok",
            "agents": len(self._registry),
            "index_loaded_from": self.index_loaded_from,
            "indexed": len(self.matcher),
        }
        if self.federator is not None:
            states = self.federator.health.snapshot().values()
            body["federation"] = {
                "peers": len(self.federator.peers),
                "skipped": sum(1 for st in states if st["state"] == "skipped"),
            }
        return body

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
        """Put an entry in the registry (caller holds the lock); the registry
        keeps the per-(zone, tier) counts that bound how many agents could
        pass the gates."""
        self._registry.put(entry)
        self._forget_fields(entry.canonical_id)

    def _forget_fields(self, canonical_id: str) -> None:
        self._fields.pop(canonical_id, None)
        self._fields_gen += 1

    def _result_fields(self, canonical_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Result item fields of these agents, from the cache or the store
        (an agent no longer stored is left out)."""
        out: dict[str, dict[str, Any]] = {}
        missing = []
        with self._lock:
            gen = self._fields_gen
            for cid in canonical_ids:
                hit = self._fields.get(cid)
                if hit is None:
                    missing.append(cid)
                else:
                    self._fields.move_to_end(cid)
                    out[cid] = hit
        if missing:
            stored = self.store.get_many(missing)
            fresh = {cid: result_fields(a.manifest) for cid, a in stored.items()}
            out.update(fresh)
            with self._lock:
                if gen == self._fields_gen:  # nothing re-indexed while we read
                    self._fields.update(fresh)
                    while len(self._fields) > FIELDS_CACHE:
                        self._fields.popitem(last=False)
        return out

    def _unindex(self, canonical_id: str) -> AgentEntry | None:
        """Take an agent out of the registry, the gate counts, the availability
        marks and the capability index (caller holds the lock). The store row
        is the caller's business."""
        old = self._registry.get(canonical_id)
        if old is None:
            return None
        self._registry.remove(canonical_id)
        self._forget_fields(canonical_id)
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
            for (zone, tier), n in self._registry.gate_counts.items():
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
            # The requests go out first; then the local match runs right here
            # (the answers wait in the socket buffers). A worker thread would
            # race the event loop for the GIL and delay the sending.
            dispatched = Dispatched()
            fanout = fed.start(req, early, dispatched)
            try:
                await asyncio.sleep(0)  # one loop iteration: each peer task sends
                if not dispatched.done:  # a first connection or key fetch under way
                    await dispatched.wait(DISPATCH_WAIT)
                local = self._local(req)
            except BaseException:  # cancelled, or the local match refused the query
                fed.cancel(fanout)
                raise
            return self._finish(req, local, await fed.collect(fanout))
        local = self._local(req)
        plan = fed.plan(req, local.total)
        if not plan.peers and not plan.skipped:
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
        matched = None
        if p.intent is not None:
            matched = self.matcher.query(
                p.intent, p.capability_domains, evidence=p.include_evidence
            )
            ids, unrounded = matched.matches(self.relevance)
        # Routing needs every gate-passing candidate; otherwise the best `limit`.
        limit = None if p.preferred_agent is not None else p.limit
        with self._lock:
            registry = self._registry
            mask = registry.gate_mask(p, req.identity.scope, self.zones)
            if p.intent is None:  # every agent is a candidate, ranked on trust alone
                slots = np.nonzero(mask)[0]
                cms = None
            else:
                slots = registry.slots_of(ids)
                cms = unrounded  # rank() rounds the ones it returns, as above() would
                keep = slots >= 0
                keep[keep] = mask[slots[keep]]
                slots, cms = slots[keep], cms[keep]
            top = registry.rank(slots, cms, limit)
            ranked = [
                (r.rank_score, r.capability_match_score, registry[r.canonical_id]) for r in top
            ]
        if p.preferred_agent is not None:
            return self._route(req, ranked, matched)
        return _LocalAnswer(ranked, matched, len(slots))

    def _local_item(
        self,
        req: DiscoverRequest,
        score: float,
        cms: float,
        entry: AgentEntry,
        fields: dict[str, Any],
        matched: Any,
    ) -> dict[str, Any]:
        p = req.params
        item = {**fields, "capability_match_score": cms, "rank_score": score}
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
        best = local.ranked[: p.limit]
        fields = self._result_fields([entry.canonical_id for _, _, entry in best])
        top = [
            FedRanked(
                score,
                entry.canonical_id,
                self._local_item(req, score, cms, entry, fields[entry.canonical_id], local.matched),
            )
            for score, cms, entry in best
            if entry.canonical_id in fields  # deleted meanwhile: skipped
        ]
        # The routing position (preferred agent or its alternative) stays results[0].
        first_kept = bool(best) and bool(top) and top[0].canonical_id == best[0][2].canonical_id
        pinned = top[:1] if local.pinned and first_kept else []
        if pinned and local.routing is not None:
            first = pinned[0]
            pinned[0] = top[0] = FedRanked(
                first.rank_score,
                first.canonical_id,
                {**first.item, **local.routing.item_fields()},
            )
        total = local.total
        chosen = top
        if gathered is not None:
            # Only the local top `limit` can survive the cut, so only they are built.
            preferred = p.preferred_agent
            merged = merge(
                top[len(pinned) :],
                # Any locally indexed agent wins; a locally Suspended or
                # tombstoned one is never taken from a peer either; the
                # preferred agent appears only at the routing position.
                lambda cid: cid in self._registry or cid in self._withdrawn or cid == preferred,
                gathered.candidates,
                lambda tier, behavioral, cms: rank_score(weights, tier, behavioral, cms),
            )
            if p.intent is not None:  # the merged set passes the relevance gate once more
                merged = [r for r in merged if self.relevance.admits(_cms_of(r))]
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
        if p.intent is not None:  # what counted as a match, so a caller sees why one is absent
            result["relevance"] = self.relevance.describe()
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
                cms = matched.score(cid, self.relevance) if matched is not None else 0.0
                score = rank_score(
                    self.config.ranking, entry.trust_tier, entry.behavioral_trust_score, cms
                )
                own = (score, cms, entry)
            final = [own, *rest]
            return _LocalAnswer(final, matched, len(final), Routing(cid, True), pinned=True)
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
            **requester_fields(req.identity, "DISCOVER", req.task_id),
            query_digest=req.query_digest,
            preferred_agent=cid,
            routing_reason=reason,
            # for the operator only: the caller saw not_indexed
            restricted_zone_hidden=state.known and not state.zone_granted,
            alternative=chosen[0][2].canonical_id if chosen else None,
            equivalent_confidence=chosen[1] if chosen else None,
        )
        if chosen is None:
            return _LocalAnswer(rest, matched, len(rest), Routing(cid, False, reason))
        alt, confidence = chosen
        others = [t for t in rest if t is not alt]
        routing = Routing(cid, False, reason, alt[2].canonical_id, confidence)
        return _LocalAnswer([alt, *others], matched, len(rest), routing, pinned=True)

    # -- ACTIVATE ---------------------------------------------------------------------
    def activate(self, req: ActivateRequest) -> dict[str, Any]:
        """Verify, persist durably, then index. Nothing is stored on any failure.

        Re-ACTIVATE with the stored manifest is idempotent; an older one is
        409 ``stale_metadata``; a tombstoned id is 410 ``agent_retired``; a
        Suspended agent comes back only through REINSTATE (409)."""
        require_scope(
            req.identity,
            DISCOVERY_REGISTER,
            method="ACTIVATE",
            task_id=req.task_id,
            audit=self.audit,
        )
        try:
            return self._activate(req)
        except AgtpError as exc:
            self.audit.record(
                "activation_refused",
                status=exc.status,
                code=exc.code,
                **requester_fields(req.identity, "ACTIVATE", req.task_id),
                canonical_id=str(req.manifest.get("canonical_id"))[:256],
                reason=exc.message,
            )
            raise

    def _admissible(
        self, cid: str, manifest: dict[str, Any], caps: dict[str, Any]
    ) -> tuple[StoredAgent | None, bool]:
        """The stored record and whether this ACTIVATE changes nothing; raises
        when the registration may not be (re)activated."""
        tomb = self.store.tombstone(cid)
        if tomb is not None:
            raise Gone(
                f"agent {cid[:80]} is {tomb.state} (event {tomb.event_id}); "
                "its canonical id is retired and cannot be activated again",
                code="agent_retired",
            )
        previous = self.store.get(cid)
        if previous is None:
            return None, False
        if previous.lifecycle_state == SUSPENDED:
            raise Conflict(
                f"agent {cid[:80]} is Suspended; the governance platform must REINSTATE it",
                code="agent_suspended",
            )
        same = check_manifest_freshness(manifest, previous.manifest)
        unchanged = (
            same
            and previous.capabilities == caps
            and previous.lifecycle_state == ACTIVE
            and cid in self._registry
        )
        return previous, unchanged

    def _activate(self, req: ActivateRequest) -> dict[str, Any]:
        validate_capabilities(req.capabilities)
        try:
            verified = verify_manifest(req.manifest, self.governance_keys)
        except UnknownSigningKey as exc:
            self._explain_removed_key(req.manifest, exc)
            raise
        manifest = verified.manifest
        check_manifest_time(manifest, self.clock(), self._max_skew())
        cid = manifest["canonical_id"]
        # Checked once outside the lock so that a refused or unchanged
        # registration is never embedded, and again under it (state may move).
        _, unchanged = self._admissible(cid, manifest, req.capabilities)
        profile = profile_from(manifest, req.capabilities)
        vectors = None if unchanged else self.matcher.embed_profile(profile)
        now = rfc3339(self.clock())
        with self._activate_lock:  # serialises ACTIVATE and lifecycle events
            previous, unchanged = self._admissible(cid, manifest, req.capabilities)
            audit = self.audit.entry(
                "activation",
                status=200,
                **requester_fields(req.identity, "ACTIVATE", req.task_id),
                canonical_id=cid,
                signer_kid=verified.signer_kid,
                trust_tier=int(manifest["trust_tier"]),
                governance_zone=manifest["governance_zone"],
                replaced=previous is not None and not unchanged,
                unchanged=unchanged,
            )
            if unchanged:
                assert previous is not None
                stored = previous
            else:
                require_writable(self.audit)  # 503, nothing applied
                stored = StoredAgent(
                    canonical_id=cid,
                    manifest=manifest,
                    capabilities=req.capabilities,
                    lifecycle_state=ACTIVE,
                    signer_kid=verified.signer_kid,
                    registered_at=previous.registered_at if previous else now,
                    updated_at=now,
                )
                # The agent and its audit record, durable (WAL, synchronous=FULL)
                # in one transaction before we answer; then the record to the log.
                ref = self.store.upsert(stored, audit)
                publish(self.store, self.audit, ref, audit)
                if vectors is None:
                    vectors = self.matcher.embed_profile(profile)
                entry = AgentEntry.from_stored(stored)
                with self._lock:
                    self.matcher.upsert(profile, vectors)
                    self._index_entry(entry)
        if unchanged:  # no state change: the record alone (never raises)
            self.audit.append(audit)
        log.info(
            "agent activated",
            canonical_id=cid,
            label=manifest["agent_label"],
            replaced=previous is not None,
            unchanged=unchanged,
        )
        return {
            "canonical_id": cid,
            "lifecycle_state": ACTIVE,
            "indexed": True,
            "unchanged": unchanged,
            "registered_at": stored.registered_at,
            "updated_at": stored.updated_at,
        }

    # -- bulk ACTIVATE (ans import) -----------------------------------------------------
    def activate_many(
        self,
        verified: Sequence[tuple[dict[str, Any], dict[str, Any], str]],
        requester: Mapping[str, Any] | None = None,
    ) -> tuple[list[str], int, list[tuple[int, AgtpError]]]:
        """ACTIVATE a batch of already verified (manifest, capabilities,
        signer_kid), as if one after another: the same admissibility rules
        (tombstoned 410, Suspended 409, stale 409, unchanged), a later line for
        the same canonical id checked against the earlier one. Then one store
        transaction, one batched embedding, one index update.

        The batch's audit record (``bulk_import_batch``, with the
        ``requester_fields`` of who imports, if given) is committed with it;
        the store or audit log unwritable raises 503 ``storage_unavailable``
        with nothing applied.

        Returns (stored canonical ids in order, unchanged count,
        [(position in ``verified``, refusal)])."""
        at = self.clock()
        now = rfc3339(at)
        refused: list[tuple[int, AgtpError]] = []
        unchanged = 0
        with self._activate_lock:
            previous = self.store.get_many(m["canonical_id"] for m, _, _ in verified)
            pending: dict[str, StoredAgent] = {}
            for i, (manifest, caps, kid) in enumerate(verified):
                cid = manifest["canonical_id"]
                try:
                    check_manifest_time(manifest, at, self._max_skew())
                    prev = pending.get(cid) or previous.get(cid)
                    withdrawn = self._withdrawn.get(cid)
                    if withdrawn is not None and withdrawn != SUSPENDED:
                        self._admissible(cid, manifest, caps)  # raises 410 agent_retired
                    if prev is not None and prev.lifecycle_state == SUSPENDED:
                        raise Conflict(
                            f"agent {cid[:80]} is Suspended; the governance platform must "
                            "REINSTATE it",
                            code="agent_suspended",
                        )
                    if prev is not None:
                        same = check_manifest_freshness(manifest, prev.manifest)
                        if (
                            same
                            and prev.capabilities == caps
                            and prev.lifecycle_state == ACTIVE
                            and (cid in pending or cid in self._registry)
                        ):
                            unchanged += 1
                            continue
                except AgtpError as exc:
                    refused.append((i, exc))
                    continue
                pending[cid] = StoredAgent(
                    canonical_id=cid,
                    manifest=manifest,
                    capabilities=caps,
                    lifecycle_state=ACTIVE,
                    signer_kid=kid,
                    registered_at=prev.registered_at if prev is not None else now,
                    updated_at=now,
                )
            agents = list(pending.values())
            if agents:
                require_writable(self.audit)
                audit = self.audit.entry(
                    "bulk_import_batch",
                    count=len(agents),
                    first_canonical_id=agents[0].canonical_id,
                    last_canonical_id=agents[-1].canonical_id,
                    **(requester or {}),
                )
                ref = self.store.upsert_many(agents, audit)  # durable first, with its record
                publish(self.store, self.audit, ref, audit)
            profiles = [profile_from(a.manifest, a.capabilities) for a in agents]
            vectors = self.matcher.embed_profiles(profiles)
            entries = [AgentEntry.from_stored(a) for a in agents]
            with self._lock:
                self.matcher.upsert_many(list(zip(profiles, vectors, strict=True)))
                self._registry.put_many(entries)
                for a in agents:
                    self._forget_fields(a.canonical_id)
        return [a.canonical_id for a in agents], unchanged, refused

    def _max_skew(self) -> timedelta:
        """How far in the future a signed timestamp may be (lifecycle events,
        manifests): ``lifecycle_max_skew``."""
        return timedelta(seconds=self.config.lifecycle_max_skew)

    def _explain_removed_key(self, manifest: dict[str, Any], exc: UnknownSigningKey) -> None:
        """An unknown key that once signed this agent's stored manifest was
        removed from the trusted set: say so (401 signing_key_removed)."""
        cid = manifest.get("canonical_id")
        sig = manifest.get("signature")
        kid = sig.get("key_id") if isinstance(sig, dict) else None
        previous = self.store.get(cid) if isinstance(cid, str) else None
        if previous is not None and kid == previous.signer_kid:
            raise SignatureInvalid(
                f"manifest is signed by governance key {str(kid)[:80]!r}, which signed this "
                "agent before but is no longer trusted",
                code="signing_key_removed",
            ) from exc

    # -- lifecycle events (SUSPEND / REINSTATE / REVOKE / DEPRECATE) ---------------------
    def lifecycle(self, req: LifecycleRequest) -> dict[str, Any]:
        """Apply a governance-signed lifecycle event. The agent leaves (or
        re-enters) the index before this returns; Revoked and Deprecated ids
        are tombstoned. A replayed event (same event_id) changes nothing."""
        require_scope(
            req.identity,
            DISCOVERY_REGISTER,
            method="LIFECYCLE",
            task_id=req.task_id,
            audit=self.audit,
        )
        try:
            result, record = self._lifecycle(req)
        except AgtpError as exc:
            self.audit.record(
                "lifecycle_refused",
                status=exc.status,
                code=exc.code,
                **requester_fields(req.identity, "LIFECYCLE", req.task_id),
                lifecycle=str(req.event.get("event"))[:32],
                event_id=str(req.event.get("event_id"))[:128],
                canonical_id=str(req.event.get("canonical_id"))[:256],
                reason=exc.message,
            )
            raise
        if result["replayed"]:  # no state change: the record alone (never raises)
            self.audit.append(self._lifecycle_entry(req, record, replayed=True))
        log.info(
            "lifecycle event",
            lifecycle_event=record.event,
            canonical_id=record.canonical_id,
            state=record.state_after,
            replayed=result["replayed"],
        )
        return result

    def _lifecycle_entry(
        self, req: LifecycleRequest, record: EventRecord, *, replayed: bool
    ) -> dict[str, Any]:
        entry: dict[str, Any] = self.audit.entry(
            "lifecycle_event",
            status=200,
            **requester_fields(req.identity, "LIFECYCLE", req.task_id),
            lifecycle=record.event,
            event_id=record.event_id,
            canonical_id=record.canonical_id,
            issued_at=record.issued_at,
            signer_kid=record.signer_kid,
            state_before=record.state_before,
            state_after=record.state_after,
            replayed=replayed,
            reason=record.document.get("reason"),
        )
        return entry

    def _lifecycle(self, req: LifecycleRequest) -> tuple[dict[str, Any], EventRecord]:
        c = self.config
        now_dt = self.clock()
        ev = verify_event(
            req.event,
            self.governance_keys,
            now_dt,
            max_age=timedelta(seconds=c.lifecycle_max_age),
            max_skew=timedelta(seconds=c.lifecycle_max_skew),
        )
        cid = ev.canonical_id
        issued = ev.issued_at.astimezone(UTC).isoformat(timespec="microseconds")
        now = rfc3339(now_dt)
        with self._activate_lock:
            seen = self.store.get_event(ev.event_id)
            if seen is not None:
                if seen.canonical_id != cid or seen.event != ev.event or seen.issued_at != issued:
                    raise Conflict(
                        f"event_id {ev.event_id[:80]} was already used for another event",
                        code="stale_event",
                    )
                return self._lifecycle_result(seen, replayed=True), seen
            stored = self.store.get(cid)
            tomb = self.store.tombstone(cid)
            current = tomb.state if tomb else (stored.lifecycle_state if stored else None)
            check_transition(ev.event, current, cid)
            last = self.store.last_event(cid)
            if last is not None and issued <= last.issued_at:
                raise Conflict(
                    f"event issued at {ev.document['issued_at']} is not newer than the last "
                    f"applied event for this agent ({last.event} at {last.issued_at})",
                    code="stale_event",
                )
            target = ev.target_state
            reinstated = None
            if target == ACTIVE and current != ACTIVE:
                assert stored is not None  # check_transition: REINSTATE needs a known agent
                if self.governance_keys.get(stored.signer_kid) is None:
                    raise SignatureInvalid(
                        f"the stored manifest of {cid[:80]} is signed by governance key "
                        f"{stored.signer_kid[:80]!r}, which is no longer trusted; re-ACTIVATE "
                        "with a manifest signed by a trusted key",
                        code="signing_key_removed",
                    )
                profile = profile_from(stored.manifest, stored.capabilities)
                reinstated = (profile, self.matcher.embed_profile(profile))
            record = EventRecord(
                event_id=ev.event_id,
                canonical_id=cid,
                event=ev.event,
                issued_at=issued,
                applied_at=now,
                signer_kid=ev.signer_kid,
                state_before=current,
                state_after=target,
                document=ev.document,
            )
            tombstone = (
                Tombstone(cid, target, ev.event_id, issued, ev.reason, now)
                if target in RETIRED
                else None
            )
            require_writable(self.audit)  # 503, nothing applied
            audit = self._lifecycle_entry(req, record, replayed=False)
            ref = self.store.apply_lifecycle(record, now, tombstone, audit)  # durable first
            publish(self.store, self.audit, ref, audit)
            with self._lock:
                if target == ACTIVE:
                    self._withdrawn.pop(cid, None)
                    if reinstated is not None and stored is not None:
                        self.matcher.upsert(*reinstated)
                        self._index_entry(
                            AgentEntry.from_stored(replace(stored, lifecycle_state=ACTIVE))
                        )
                else:
                    self._unindex(cid)
                    self._withdrawn[cid] = target
        return self._lifecycle_result(record, replayed=False), record

    def _lifecycle_result(self, record: EventRecord, *, replayed: bool) -> dict[str, Any]:
        cid = record.canonical_id
        with self._lock:
            indexed = cid in self._registry
        tomb = self.store.tombstone(cid)
        stored = self.store.get(cid)
        state = tomb.state if tomb else (stored.lifecycle_state if stored else record.state_after)
        return {
            "canonical_id": cid,
            "event": record.event,
            "event_id": record.event_id,
            "previous_state": record.state_before,
            "lifecycle_state": state,
            "indexed": indexed,
            "tombstoned": tomb is not None,
            "replayed": replayed,
            "applied_at": record.applied_at,
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
            require_writable(self.audit)
            audit = self.audit.entry(
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
            publish(self.store, self.audit, self.store.upsert(updated, audit), audit)
            self.matcher.upsert(profile, vectors)
            self._index_entry(AgentEntry.from_stored(updated))
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
            require_writable(self.audit)
            event_id = before_removal(stored) if before_removal is not None else None
            audit = self.audit.entry(
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
            removed = replace(stored, lifecycle_state="Removed", updated_at=now)
            publish(self.store, self.audit, self.store.upsert(removed, audit), audit)
            self._unindex(canonical_id)
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
            withdrawn = self._withdrawn.get(req.canonical_id)
        if entry is None and withdrawn is not None:
            self._describe_withdrawn(req.canonical_id, withdrawn, req.identity.scope)
        if entry is None or not self.zones.granted(entry.governance_zone, req.identity.scope):
            raise NotFound(f"no Active agent {req.canonical_id!r} in this ANS")
        stored = self.store.get(req.canonical_id)
        if stored is None or stored.lifecycle_state != "Active":
            raise NotFound(f"no Active agent {req.canonical_id!r} in this ANS")
        return {"manifest": stored.manifest, "capabilities": stored.capabilities}

    def _describe_withdrawn(self, cid: str, state: str, scope: Any) -> None:
        """-02 6.5.3 step 3: Suspended -> 503, Revoked/Deprecated -> 410 — unless
        the agent sits in a restricted zone the caller may not see (404)."""
        stored = self.store.get(cid)
        if stored is not None and not self.zones.granted(
            stored.manifest.get("governance_zone", ""), scope
        ):
            return
        if state == SUSPENDED:
            raise Unavailable(f"agent {cid[:80]} is Suspended", code="agent_suspended")
        tomb = self.store.tombstone(cid)
        when = f" since {tomb.issued_at}" if tomb else ""
        raise Gone(f"agent {cid[:80]} is {state}{when}", code="agent_retired")

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
                "zones_accepted": sorted({c.governance_zone, *c.restricted_zones, *c.public_zones}),
                "max_limit": c.max_limit,
            },
        }
        signed: dict[str, Any] = sign_document(doc, self.key, "signature")
        return signed
