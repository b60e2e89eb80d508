"""DISCOVER, end to end inside the core: admit → match locally → route →
federate → finish (merge, relevance, sign).

:class:`Discovery` is what every discovery surface calls: :meth:`~Discovery.discover`
(local only) and :meth:`~Discovery.discover_async` (with federation when
configured). Both take a typed :class:`DiscoverRequest` and return the signed
result object. The hard gates are the registry's vectorized mask
(:meth:`ans.registry.Registry.gate_mask`, the same rules as
:func:`ans.governance.policy.first_failed_gate`); what counts as a match is
the relevance gate (:mod:`ans.relevance`); the ``preferred_agent`` routing
position follows the rules of :mod:`ans.core.alternatives`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ans.federation.merge import MergedResult, merge, result_path
from ans.federation.plan import Dispatched, Gathered
from ans.governance.audit import rfc3339
from ans.governance.policy import (
    DISCOVERY_QUERY,
    first_failed_gate,
    max_tier,
    requester_fields,
    require_scope,
)
from ans.governance.signing import RESULT_SIGNATURE_FIELD, signature_object
from ans.protocol.jcs import canonicalize
from ans.protocol.messages import DiscoverRequest

from ..matcher import profile_from
from ..profile_columns import passes
from ..ranking import rank_score
from ..registry import AgentEntry
from .alternatives import NOT_INDEXED, PreferredState, Routing, choose_alternative, routing_reason
from .context import CoreContext
from .detail import (
    applied_filters,
    drop_unsignable_documents,
    freshness_of,
    project,
    request_warnings,
    score_components,
)
from .live_index import LiveIndex
from .scan_batch import ScanBatch

# How long an early federated DISCOVER waits for its peer requests to go out
# (a first connection or key fetch) before matching locally anyway.
DISPATCH_WAIT = 0.02

LocalRanked = tuple[float, float, AgentEntry]  # (rank_score, capability_match_score, entry)


@dataclass(frozen=True, slots=True)
class LocalAnswer:
    # At least the best `limit` gate-passing local agents, in order (all of
    # them on the routing path); `total` counts every one.
    ranked: list[LocalRanked]
    matched: Any  # QueryScores, or None without an intent
    total: int
    # preferred_agent given: the decision, and whether ranked[0] is the routing position.
    routing: Routing | None = None
    pinned: bool = False
    # preferred_tags given: the boost each ranked agent's evidence received.
    boosts: dict[str, float] | None = None


def _assignments(
    matcher: Any,
) -> tuple[list[str | None], Any, list[int] | None, object]:
    """The matcher's slot table for :meth:`ans.registry.Registry.linked`."""
    token, ids, slot_of, changes = matcher.slot_assignments()
    return ids, slot_of, changes, token


def _cms_of(r: MergedResult) -> float:
    value = r.item.get("capability_match_score", 0.0)
    return float(value) if isinstance(value, (int, float)) else 0.0


class Discovery:
    def __init__(self, ctx: CoreContext, index: LiveIndex) -> None:
        self.ctx = ctx
        self.index = index
        # concurrent DISCOVERs share one exhaustive scan (ans/core/scan_batch.py)
        self.scans = ScanBatch(lambda: self.ctx.matcher)

    # -- the surfaces' entry points ----------------------------------------------------
    def discover(self, req: DiscoverRequest) -> dict[str, Any]:
        """A local-only answer (no federation), signed."""
        self.check_scope_and_zone(req)
        return self.finish(req, self.local(req), None)

    async def discover_async(self, req: DiscoverRequest) -> dict[str, Any]:
        """Local answer first; when fewer than ``limit`` pass and federation is
        configured, ask trusted peers, then merge, re-rank and re-sign."""
        self.check_scope_and_zone(req)  # 451 / 453 before anything leaves this server
        fed = self.ctx.federator
        p = req.params
        if fed is None:
            await self.scans.join(p.intent, p.capability_domains)
            return self.finish(req, self.local(req), None)
        early = fed.plan(req, self.gate_bound(req))
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
                await self.scans.join(p.intent, p.capability_domains)
                local = self.local(req)
            except BaseException:  # cancelled, or the local match refused the query
                fed.cancel(fanout)
                raise
            return self.finish(req, local, await fed.collect(fanout))
        await self.scans.join(p.intent, p.capability_domains)
        local = self.local(req)
        plan = fed.plan(req, local.total)
        if not plan.peers and not plan.skipped:
            return self.finish(req, local, None)
        return self.finish(req, local, await fed.gather(req, plan))

    # -- the steps ------------------------------------------------------------------
    def check_scope_and_zone(self, req: DiscoverRequest) -> None:
        """The SEP checks of DISCOVER: ``discovery:query`` (451) and a requested
        restricted zone (453), each refusal audited."""
        ctx = self.ctx
        require_scope(
            req.identity, DISCOVERY_QUERY, method="DISCOVER", task_id=req.task_id, audit=ctx.audit
        )
        ctx.zones.check_requested(
            req.identity,
            req.params.governance_zone,
            method="DISCOVER",
            task_id=req.task_id,
            audit=ctx.audit,
        )

    def gate_bound(self, req: DiscoverRequest) -> int:
        """An upper bound on the local agents that can pass the gates (zone, tier,
        restricted zones), without matching anything."""
        p = req.params
        cap = max_tier(p)
        total = 0
        with self.index.lock:
            for (zone, tier), n in self.index.registry.gate_counts.items():
                if tier <= cap and p.governance_zone in (None, zone):
                    if self.ctx.zones.granted(zone, req.identity.scope):
                        total += n
        return total

    def warm(self) -> None:
        """Build what the first DISCOVER would otherwise build lazily: the
        registry's slot link (a pass over every matcher slot). ``ans serve
        --workers`` calls this before the fork, so that the link is built once
        in the shared pages: built in each worker, it cost the worker's first
        DISCOVER ~1 s at 1M agents and, by touching every canonical id, made
        private copies of most of the shared heap. Also the profile filters'
        postings, which a bulk load leaves to be built on first use, and the
        matcher's packed rows (:meth:`CapabilityIndex.warm`)."""
        self.ctx.matcher.warm()
        with self.index.lock:
            self.index.registry.linked(np.zeros(0, dtype=np.int64), *_assignments(self.ctx.matcher))
            self.index.registry.profiles.settle()

    def local(self, req: DiscoverRequest) -> LocalAnswer:
        """The gate-passing local matches, ranked (and routed when
        ``preferred_agent`` is given). The profile's hard filters (tags,
        protocols, region, age, expiry) are part of the gate mask, so the
        relevance shortlist is taken among agents that pass them too."""
        p = req.params
        matched = None
        matcher = self.ctx.matcher
        preferred = p.profile.preferred_tags
        boost = None
        # Routing needs every gate-passing candidate; otherwise the best `limit`.
        limit = None if p.preferred_agent is not None else p.limit
        now = self.ctx.clock().timestamp()
        # The match runs under the index lock, which every writer of the matcher
        # and the registry holds: the matcher's candidate slots then map to
        # registry slots through the registry's integer slot link, and ids
        # read later (evidence, routing) are still the candidates'.
        with self.index.lock:
            registry = self.index.registry
            mask = registry.gate_mask(p, req.identity.scope, self.ctx.zones, now)
            if p.intent is None:  # every agent is a candidate, ranked on trust alone
                slots = np.nonzero(mask)[0]
                cms = None
                if preferred:  # ... and on the evidence the preferred tags add
                    boost = self._boost(slots, preferred)
                    cms = boost
            else:
                matched = matcher.query(
                    p.intent, p.capability_domains, evidence=p.include_evidence, lazy_ids=True
                )
                # cms unrounded: rank() rounds the ones it returns, as above() would
                matcher_slots, cms, fused = matched.match_slots(self.ctx.relevance)
                slots = registry.linked(matcher_slots, *_assignments(matcher))
                keep = slots >= 0
                keep[keep] = mask[slots[keep]]
                slots, cms, fused = slots[keep], cms[keep], fused[keep]
                if preferred:
                    boost = self._boost(slots, preferred)
                    cms = cms + boost * (1.0 - cms)
                    fused = fused + boost * (1.0 - fused)
                # The shortlist is taken among the agents every hard gate let
                # through: relevance decides membership, trust the order.
                short = self.ctx.relevance.shortlisted(cms, fused, p.limit)
                slots, cms = slots[short], cms[short]
                if p.include_evidence or p.preferred_agent is not None:
                    matched.ids  # noqa: B018  # read now, while the index cannot change
            top = registry.rank(slots, cms, limit)
            ranked = [
                (r.rank_score, r.capability_match_score, registry.entry_at(r.slot)) for r in top
            ]
            boosts = None
            if preferred:  # what each returned agent's evidence received
                top_slots = np.array([r.slot for r in top], dtype=np.int64)
                values = self._boost(top_slots, preferred).tolist()
                boosts = {e.canonical_id: v for (_, _, e), v in zip(ranked, values, strict=True)}
        if p.preferred_agent is not None:
            answer = self.route(req, ranked, matched)
            return replace(answer, boosts=boosts) if boosts is not None else answer
        return LocalAnswer(ranked, matched, len(slots), boosts=boosts)

    def _boost(
        self, slots: npt.NDArray[np.int64], preferred: tuple[str, ...]
    ) -> npt.NDArray[np.float64]:
        """The capability-evidence boost of each slot from the request's
        preferred tags: ``preferred_tag_boost`` x the share of them the agent
        holds (caller holds the index lock). Never a trust term."""
        return self.index.registry.profiles.share_of(slots, preferred) * (
            self.ctx.config.preferred_tag_boost
        )

    def _local_item(
        self,
        req: DiscoverRequest,
        score: float,
        cms: float,
        entry: AgentEntry,
        fields: dict[str, Any],
        local: LocalAnswer,
    ) -> dict[str, Any]:
        p = req.params
        item = {**fields, "capability_match_score": cms, "rank_score": score}
        unavailable = self.index.unavailable.get(entry.canonical_id)
        if unavailable is not None:  # discovery draft 6.2; available agents are unchanged
            item["available"] = False
            item["availability_reason"] = unavailable
        if p.scope_negotiate:
            item["required_scope"] = entry.required_scope
        if p.include_evidence:
            matched = local.matched
            item.update(
                matched.evidence(entry.canonical_id)
                if matched is not None
                else {"score_components": {}, "matched_tags": [], "matched_examples": []}
            )
        if local.boosts is not None:
            item["preferred_tags_boost"] = local.boosts.get(entry.canonical_id, 0.0)
        return item

    def _decorate(self, item: dict[str, Any], req: DiscoverRequest, now: float) -> None:
        """The profile's per-item fields, local or federated. An agent's
        declared ``bindings`` and ``status`` are always shown; a request that
        speaks the profile
        (``ProfileParams.used``) also gets ``freshness``, ``score_components``
        (the cheap ones, with the evidence when asked), ``governed`` and
        ``redacted``; ``tags`` / ``regions`` only when a tag / region filter
        asks for them (what a federating ANS checks) or at ``full``. A legacy
        DISCOVER answer about agents without profile metadata is byte for
        byte what it was (the implicit AGTP binding and ``active`` left out)."""
        p = req.params
        prof = p.profile
        full = prof.detail == "full"
        if not (full or prof.required_tags or prof.excluded_tags or prof.preferred_tags):
            item.pop("tags", None)
        if not (full or prof.regions):
            item.pop("regions", None)
        boost = item.pop("preferred_tags_boost", None)
        if not prof.used:
            item.pop("freshness", None)
            if item.get("governed") is True:
                del item["governed"]
            if item.get("status") == "active":
                del item["status"]
            if item.get("bindings") == [{"protocol": "agtp", "endpoint": item.get("manifest_uri")}]:
                del item["bindings"]  # the implicit one: its manifest_uri says it
            if not p.include_evidence:
                return
        max_age = prof.max_results_age_seconds
        fresh = freshness_of(item, now, with_age=max_age is not None)
        if fresh is not None and prof.used:
            item["freshness"] = fresh
        if prof.preferred_tags and boost is None and "provenance" not in item:
            boost = 0.0
        cheap = score_components(
            item,
            p,
            self.ctx.config.ranking,
            boost,
            fresh.get("age_seconds") if fresh is not None else None,
        )
        evidence = item.get("score_components")
        item["score_components"] = (
            {**evidence, **cheap} if isinstance(evidence, dict) and p.include_evidence else cheap
        )
        if prof.used:
            item.setdefault("redacted", False)

    def _gate_merged(
        self, merged: list[MergedResult], local_ids: set[str], limit: int
    ) -> list[MergedResult]:
        """The merged set through the relevance gate once more: every entry
        past the published threshold, and a peer's entry only when it is also
        on the merged set's shortlist (a peer cannot re-admit agents less
        relevant than the ones our own shortlist kept; ours passed it already)."""
        gate = self.ctx.relevance
        merged = [r for r in merged if gate.admits(_cms_of(r))]
        if not merged:
            return merged
        cms = np.array([_cms_of(r) for r in merged], dtype=np.float64)
        short = gate.shortlisted(cms, None, limit)
        kept = zip(merged, short.tolist(), strict=True)
        return [r for r, ok in kept if ok or r.canonical_id in local_ids]

    def finish(
        self, req: DiscoverRequest, local: LocalAnswer, gathered: Gathered | None
    ) -> dict[str, Any]:
        """Build the items, merge what peers gathered, and sign the result."""
        ctx, index = self.ctx, self.index
        p = req.params
        weights = ctx.config.ranking
        best = local.ranked[: p.limit]
        fields = index.result_fields([entry.canonical_id for _, _, entry in best])
        top = [
            MergedResult(
                score,
                entry.canonical_id,
                self._local_item(req, score, cms, entry, fields[entry.canonical_id], local),
            )
            for score, cms, entry in best
            if entry.canonical_id in fields  # deleted meanwhile: skipped
        ]
        # The routing position (preferred agent or its alternative) stays results[0].
        first_kept = bool(best) and bool(top) and top[0].canonical_id == best[0][2].canonical_id
        pinned = top[:1] if local.pinned and first_kept else []
        if pinned and local.routing is not None:
            first = pinned[0]
            pinned[0] = top[0] = MergedResult(
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
                lambda cid: cid in index.registry or cid in index.withdrawn or cid == preferred,
                gathered.candidates,
                lambda tier, behavioral, cms: rank_score(weights, tier, behavioral, cms),
            )
            if p.intent is not None:  # the merged set passes the relevance gate once more
                merged = self._gate_merged(merged, {r.canonical_id for r in top}, p.limit)
            total += len(merged) - (len(top) - len(pinned))
            chosen = [*pinned, *merged[: p.limit - len(pinned)]]
        now = ctx.clock().timestamp()
        results = []
        for i, r in enumerate(chosen, start=1):
            item = {"rank": i, **r.item}
            item["rank_score"] = r.rank_score
            self._decorate(item, req, now)
            results.append(item)
        warnings = request_warnings(p)
        results = self._project(req, results, warnings)
        result: dict[str, Any] = {
            "query_id": f"qry-{ctx.new_id()}",
            "total_matches": total,
            "returned": len(results),
            "results": results,
            "generated_at": rfc3339(ctx.clock()),
            "query_digest": req.query_digest,
            "ranking": weights.name,
            "detail": p.profile.detail,
            "applied_filters": applied_filters(p),
            "unsupported_filters": list(p.profile.unsupported_filters),
        }
        if p.intent is not None:  # what counted as a match, so a caller sees why one is absent
            result["relevance"] = ctx.relevance.describe(p.limit)
        if gathered is not None:
            result["federation_path"] = result_path(ctx.key.kid, chosen)
            warnings = [*gathered.warnings, *warnings]
        if gathered is not None or warnings:
            result["warnings"] = warnings
        if local.routing is not None:
            result["routing"] = local.routing.summary()
        try:
            canonical = canonicalize(result)
        except ValueError:  # a stored document no signed answer can carry
            if not drop_unsignable_documents(result):
                raise
            canonical = canonicalize(result)
        result[RESULT_SIGNATURE_FIELD] = signature_object(canonical, ctx.key)
        return result

    def _project(
        self, req: DiscoverRequest, results: list[dict[str, Any]], warnings: list[dict[str, str]]
    ) -> list[dict[str, Any]]:
        """The items at the request's ``detail`` (ans.core.detail.project);
        ``full`` reads the returned local agents' documents from the store."""
        detail = req.params.profile.detail
        if detail == "summary":
            return results
        stored: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        if detail == "full":
            local_ids = [r["canonical_id"] for r in results if "provenance" not in r]
            got = self.ctx.store.get_many(local_ids)
            stored = {cid: (a.manifest, a.capabilities) for cid, a in got.items()}
        out, missing, redacted = [], 0, False
        redact = self.ctx.config.profile_redact
        for item in results:
            docs = stored.get(item["canonical_id"]) if "provenance" not in item else None
            projected, lacked = project(item, detail, redact, docs)
            missing += lacked
            redacted = redacted or bool(projected.get("redacted"))
            out.append(projected)
        if missing:
            warnings.append(
                {
                    "code": "full_detail_unavailable",
                    "message": f"{missing} federated result(s) carry the peer's summary: "
                    "their full documents are held by the ANS named in provenance",
                }
            )
        if redacted:
            warnings.append(
                {
                    "code": "redacted",
                    "message": "fields were removed by this ANS's redaction policy "
                    "(each result's redacted_fields); a redacted manifest no longer "
                    "verifies against its governance signature",
                }
            )
        return out

    # -- routing alternatives (discovery draft 6.1; rules in ans.core.alternatives) ----------------
    def route(self, req: DiscoverRequest, ranked: list[LocalRanked], matched: Any) -> LocalAnswer:
        """Put the preferred agent, or its most equivalent alternative, at ranked[0].

        The preferred agent never appears anywhere else. With an intent the
        alternative is the most equivalent *intent match* (``ranked`` holds
        exactly the gate-passing intent matches); without one, the most
        equivalent gate-passing agent. Either way it must be available and at
        least ``min_equivalent_confidence`` equivalent, else there is none."""
        ctx = self.ctx
        p = req.params
        cid = p.preferred_agent
        assert cid is not None
        scope = req.identity.scope
        stored = ctx.store.get(cid)
        with self.index.lock:
            entry = self.index.registry.get(cid)
            profile = self.index.registry.profile_of(cid)
            unavailable = dict(self.index.unavailable)
        zone = (
            entry.governance_zone
            if entry is not None
            else str(stored.manifest.get("governance_zone", ""))
            if stored is not None
            else ""
        )
        state = PreferredState(
            known=entry is not None or stored is not None,
            zone_granted=ctx.zones.granted(zone, scope),
            indexed=entry is not None,
            unavailable=unavailable.get(cid),
            passes_gates=entry is not None
            and first_failed_gate(entry, p, scope, ctx.zones) is None
            and passes(profile, p.profile, ctx.clock().timestamp()),
            stored_state=stored.lifecycle_state if stored is not None else None,
        )
        reason = routing_reason(state)
        rest = [t for t in ranked if t[2].canonical_id != cid]
        if reason is None and entry is not None:
            own = next((t for t in ranked if t[2].canonical_id == cid), None)
            if own is None:  # passes the gates but not the intent's capability floor
                cms = matched.score(cid, ctx.relevance) if matched is not None else 0.0
                score = rank_score(
                    ctx.config.ranking, entry.trust_tier, entry.behavioral_trust_score, cms
                )
                own = (score, cms, entry)
            final = [own, *rest]
            return LocalAnswer(final, matched, len(final), Routing(cid, True), pinned=True)
        reason = reason or NOT_INDEXED
        chosen = None
        if reason != NOT_INDEXED and stored is not None:
            # The preferred agent's own profile, from the store: it may have
            # left the index (suspended, revoked, removed for freshness).
            equivalence = ctx.matcher.equivalence(
                profile_from(stored.manifest, stored.capabilities)
            )
            chosen = choose_alternative(
                (t for t in rest if t[2].canonical_id not in unavailable),
                lambda t: t[2].canonical_id,
                lambda t: t[0],
                equivalence,
                ctx.config.min_equivalent_confidence,
            )
        ctx.audit.record(
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
            return LocalAnswer(rest, matched, len(rest), Routing(cid, False, reason))
        alt, confidence = chosen
        others = [t for t in rest if t is not alt]
        routing = Routing(cid, False, reason, alt[2].canonical_id, confidence)
        return LocalAnswer([alt, *others], matched, len(rest), routing, pinned=True)
