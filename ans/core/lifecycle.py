"""Governance lifecycle events: SUSPEND, REINSTATE, REVOKE, DEPRECATE.

:class:`LifecycleEvents` verifies a governance-signed event, checks the
transition and its order against the last applied event, persists the event
(and a tombstone for Revoked / Deprecated) with its audit record, and takes
the agent out of (or puts it back into) the live index before returning. A
replayed event (same ``event_id``) changes nothing.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, timedelta
from typing import Any

import structlog

from ans.governance.audit import rfc3339
from ans.governance.lifecycle import ACTIVE, RETIRED, check_transition, verify_event
from ans.governance.policy import DISCOVERY_REGISTER, requester_fields, require_scope
from ans.protocol.errors import AgtpError, Conflict, ErrorCode, SignatureInvalid
from ans.protocol.messages import LifecycleRequest

from ..audited import publish, require_writable
from ..matcher import profile_from
from ..registry import AgentEntry
from ..store import EventRecord, Tombstone
from .context import CoreContext
from .live_index import LiveIndex

log = structlog.get_logger("ans")


class LifecycleEvents:
    def __init__(self, ctx: CoreContext, index: LiveIndex) -> None:
        self.ctx = ctx
        self.index = index

    def apply(self, req: LifecycleRequest) -> dict[str, Any]:
        """Apply a governance-signed lifecycle event. The agent leaves (or
        re-enters) the index before this returns; Revoked and Deprecated ids
        are tombstoned. A replayed event (same event_id) changes nothing."""
        require_scope(
            req.identity,
            DISCOVERY_REGISTER,
            method="LIFECYCLE",
            task_id=req.task_id,
            audit=self.ctx.audit,
        )
        try:
            result, record = self._apply(req)
        except AgtpError as exc:
            self.ctx.audit.record(
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
            self.ctx.audit.append(self._entry(req, record, replayed=True))
        log.info(
            "lifecycle event",
            lifecycle_event=record.event,
            canonical_id=record.canonical_id,
            state=record.state_after,
            replayed=result["replayed"],
        )
        return result

    def _entry(
        self, req: LifecycleRequest, record: EventRecord, *, replayed: bool
    ) -> dict[str, Any]:
        entry: dict[str, Any] = self.ctx.audit.entry(
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

    def _apply(self, req: LifecycleRequest) -> tuple[dict[str, Any], EventRecord]:
        ctx, index = self.ctx, self.index
        c = ctx.config
        now_dt = ctx.clock()
        ev = verify_event(
            req.event,
            ctx.governance_keys,
            now_dt,
            max_age=timedelta(seconds=c.lifecycle_max_age),
            max_skew=timedelta(seconds=c.lifecycle_max_skew),
        )
        cid = ev.canonical_id
        issued = ev.issued_at.astimezone(UTC).isoformat(timespec="microseconds")
        now = rfc3339(now_dt)
        store = ctx.store
        with index.write_lock:
            seen = store.get_event(ev.event_id)
            if seen is not None:
                if seen.canonical_id != cid or seen.event != ev.event or seen.issued_at != issued:
                    raise Conflict(
                        f"event_id {ev.event_id[:80]} was already used for another event",
                        code=ErrorCode.STALE_EVENT,
                    )
                return self._result(seen, replayed=True), seen
            stored = store.get(cid)
            tomb = store.tombstone(cid)
            current = tomb.state if tomb else (stored.lifecycle_state if stored else None)
            check_transition(ev.event, current, cid)
            last = store.last_event(cid)
            if last is not None and issued <= last.issued_at:
                raise Conflict(
                    f"event issued at {ev.document['issued_at']} is not newer than the last "
                    f"applied event for this agent ({last.event} at {last.issued_at})",
                    code=ErrorCode.STALE_EVENT,
                )
            target = ev.target_state
            reinstated = None
            if target == ACTIVE and current != ACTIVE:
                assert stored is not None  # check_transition: REINSTATE needs a known agent
                if ctx.governance_keys.get(stored.signer_kid) is None:
                    raise SignatureInvalid(
                        f"the stored manifest of {cid[:80]} is signed by governance key "
                        f"{stored.signer_kid[:80]!r}, which is no longer trusted; re-ACTIVATE "
                        "with a manifest signed by a trusted key",
                        code=ErrorCode.SIGNING_KEY_REMOVED,
                    )
                profile = profile_from(stored.manifest, stored.capabilities)
                reinstated = (profile, ctx.matcher.embed_profile(profile))
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
            require_writable(ctx.audit)  # 503, nothing applied
            audit = self._entry(req, record, replayed=False)
            ref = store.apply_lifecycle(record, now, tombstone, audit)  # durable first
            publish(store, ctx.audit, ref, audit)
            with index.lock:
                if target == ACTIVE:
                    index.withdrawn.pop(cid, None)
                    if reinstated is not None and stored is not None:
                        ctx.matcher.upsert(*reinstated)
                        index.put(AgentEntry.from_stored(replace(stored, lifecycle_state=ACTIVE)))
                else:
                    index.remove(cid)
                    index.withdrawn[cid] = target
        return self._result(record, replayed=False), record

    def _result(self, record: EventRecord, *, replayed: bool) -> dict[str, Any]:
        cid = record.canonical_id
        with self.index.lock:
            indexed = cid in self.index.registry
        tomb = self.ctx.store.tombstone(cid)
        stored = self.ctx.store.get(cid)
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
