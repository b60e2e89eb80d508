"""Index freshness writes (discovery draft 4.4), driven by :mod:`ans.freshness_runner`.

:class:`FreshnessWrites` applies what the refresher learned: a changed
capability document (re-embedded; the signed manifest is untouched) or an
agent that stopped answering DESCRIBE (persisted as lifecycle "Removed" and
taken out of the index). The decisions themselves (schedules, strikes,
what an answer means) live in :mod:`ans.freshness_policy`; the network side in
:mod:`ans.freshness_runner`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog

from ans.governance.audit import rfc3339
from ans.protocol.jcs import canonicalize

from ..audited import publish, require_writable
from ..freshness_policy import merge_pinned
from ..matcher import profile_from
from ..registry import AgentEntry
from ..store import StoredAgent
from .context import CoreContext
from .live_index import LiveIndex

log = structlog.get_logger("ans")


class FreshnessWrites:
    def __init__(self, ctx: CoreContext, index: LiveIndex) -> None:
        self.ctx = ctx
        self.index = index

    def refresh_capabilities(self, canonical_id: str, described: dict[str, Any]) -> bool:
        """Replace an indexed agent's capability document with what it just
        answered to DESCRIBE (already validated), re-embedding it; the signed
        manifest (tier, score, zone) is untouched. False when nothing changed
        or the agent left the index meanwhile."""
        ctx, index = self.ctx, self.index
        stored = ctx.store.get(canonical_id)
        if stored is None or stored.lifecycle_state != "Active":
            return False
        caps = merge_pinned(described, stored.capabilities)
        if canonicalize(caps) == canonicalize(stored.capabilities):
            return False  # unchanged: not re-embedded
        profile = profile_from(stored.manifest, caps)
        vectors = ctx.matcher.embed_profile(profile)
        now = rfc3339(ctx.clock())
        with index.write_lock, index.lock:
            current = ctx.store.get(canonical_id)
            if (
                current is None
                or current.lifecycle_state != "Active"
                or canonical_id not in index.registry
                or current.manifest != stored.manifest
                or current.capabilities != stored.capabilities
            ):
                return False  # re-activated, deregistered or removed while we asked
            updated = replace(current, capabilities=caps, updated_at=now)
            require_writable(ctx.audit)
            audit = ctx.audit.entry(
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
            publish(ctx.store, ctx.audit, ctx.store.upsert(updated, audit), audit)
            ctx.matcher.upsert(profile, vectors)
            index.put(AgentEntry.from_stored(updated))
        log.info("capabilities refreshed", canonical_id=canonical_id)
        return True

    def remove(
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
        ctx, index = self.ctx, self.index
        now = rfc3339(ctx.clock())
        with index.write_lock, index.lock:
            stored = ctx.store.get(canonical_id)
            if (
                stored is None
                or stored.lifecycle_state != "Active"
                or canonical_id not in index.registry
            ):
                return False
            require_writable(ctx.audit)
            event_id = before_removal(stored) if before_removal is not None else None
            audit = ctx.audit.entry(
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
            publish(ctx.store, ctx.audit, ctx.store.upsert(removed, audit), audit)
            index.remove(canonical_id)
        log.warning(
            "agent removed for freshness",
            canonical_id=canonical_id,
            reason=reason,
            failures=failures,
            last_error=last_error,
        )
        return True
