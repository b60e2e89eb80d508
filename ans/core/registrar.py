"""Registration: ACTIVATE, one at a time or in bulk (``ans import``).

:class:`Registrar` verifies a governance-signed manifest, decides whether the
registration may be (re)activated — one rule, :func:`check_admissible`, for
both paths — persists it durably with its audit record, then indexes it.
Nothing is stored on any failure. Lifecycle events live in
:mod:`ans.core.lifecycle`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import structlog

from ans.governance.audit import rfc3339
from ans.governance.lifecycle import (
    ACTIVE,
    SUSPENDED,
    check_manifest_freshness,
    check_manifest_time,
)
from ans.governance.manifest import validate_capabilities, verify_manifest
from ans.governance.policy import DISCOVERY_REGISTER, requester_fields, require_scope
from ans.governance.profile_metadata import epoch
from ans.protocol.errors import (
    AgtpError,
    Conflict,
    ErrorCode,
    Gone,
    InvalidCapabilities,
    SignatureInvalid,
    UnknownSigningKey,
)
from ans.protocol.messages import ActivateRequest, Identity

from ..audited import publish, require_writable
from ..matcher import CapabilityProfile, ProfileVectors, profile_from
from ..profile_metadata import (
    SELF_ASSERTED_KID,
    check_metadata,
    is_self_asserted,
    owner_of,
    self_asserted_manifest,
)
from ..registry import AgentEntry
from ..store import StoredAgent, Tombstone
from .context import CoreContext
from .live_index import LiveIndex

log = structlog.get_logger("ans")


def check_not_expired(caps: Mapping[str, Any], now: float) -> None:
    """A capability document whose ``expires_at`` has passed is refused (409
    ``stale_metadata``): it would never be served."""
    expires = epoch(caps.get("expires_at"))
    if expires is not None and expires <= now:
        raise Conflict(
            f"expires_at {str(caps['expires_at'])[:40]} has passed; refresh the metadata",
            code=ErrorCode.STALE_METADATA,
        )


def check_not_future_dated(caps: Mapping[str, Any], now: float, skew: float) -> None:
    """Self-asserted metadata whose ``updated_at`` is ahead of this server's
    clock by more than ``skew`` seconds is refused (422): admitted, it would
    make every later update look older than the stored record."""
    updated = epoch(caps.get("updated_at"))
    if updated is not None and updated > now + skew:
        raise InvalidCapabilities(
            f"capabilities.updated_at {str(caps['updated_at'])[:40]} is in the future "
            f"(beyond {int(skew)} s of clock skew)"
        )


def check_admissible(
    cid: str,
    manifest: Mapping[str, Any],
    caps: Mapping[str, Any],
    previous: StoredAgent | None,
    tomb: Tombstone | None,
    indexed: bool,
) -> bool:
    """Whether this ACTIVATE changes nothing (same manifest and capabilities,
    already Active and indexed); raises when it may not be (re)activated:
    a tombstoned id 410 ``agent_retired``, a Suspended agent 409
    ``agent_suspended``, an older manifest 409 ``stale_metadata``."""
    if tomb is not None:
        raise Gone(
            f"agent {cid[:80]} is {tomb.state} (event {tomb.event_id}); "
            "its canonical id is retired and cannot be activated again",
            code=ErrorCode.AGENT_RETIRED,
        )
    if previous is None:
        return False
    if previous.lifecycle_state == SUSPENDED:
        raise Conflict(
            f"agent {cid[:80]} is Suspended; the governance platform must REINSTATE it",
            code=ErrorCode.AGENT_SUSPENDED,
        )
    if is_self_asserted(previous.signer_kid):
        return False  # a governance ACTIVATE turns a self-asserted record into a governed one
    same = check_manifest_freshness(manifest, previous.manifest)
    return same and previous.capabilities == caps and previous.lifecycle_state == ACTIVE and indexed


class Registrar:
    def __init__(self, ctx: CoreContext, index: LiveIndex) -> None:
        self.ctx = ctx
        self.index = index

    def activate(self, req: ActivateRequest) -> dict[str, Any]:
        """Verify, persist durably, then index. Nothing is stored on any failure.

        Re-ACTIVATE with the stored manifest is idempotent; an older one is
        409 ``stale_metadata``; a tombstoned id is 410 ``agent_retired``; a
        Suspended agent comes back only through REINSTATE (409)."""
        audit = self.ctx.audit
        require_scope(
            req.identity, DISCOVERY_REGISTER, method="ACTIVATE", task_id=req.task_id, audit=audit
        )
        try:
            return self._activate(req)
        except AgtpError as exc:
            self.ctx.audit.record(
                "activation_refused",
                status=exc.status,
                code=exc.code,
                **requester_fields(req.identity, "ACTIVATE", req.task_id),
                canonical_id=str(req.manifest.get("canonical_id"))[:256],
                reason=exc.message,
            )
            raise

    def admissible(
        self, cid: str, manifest: dict[str, Any], caps: dict[str, Any]
    ) -> tuple[StoredAgent | None, bool]:
        """The stored record and whether this ACTIVATE changes nothing, from the
        store as it is now (:func:`check_admissible`)."""
        store = self.ctx.store
        tomb = store.tombstone(cid)
        previous = store.get(cid) if tomb is None else None
        indexed = cid in self.index.registry
        return previous, check_admissible(cid, manifest, caps, previous, tomb, indexed)

    def _activate(self, req: ActivateRequest) -> dict[str, Any]:
        ctx = self.ctx
        validate_capabilities(req.capabilities)
        try:
            verified = verify_manifest(req.manifest, ctx.governance_keys)
        except UnknownSigningKey as exc:
            self._explain_removed_key(req.manifest, exc)
            raise
        manifest = verified.manifest
        check_manifest_time(manifest, ctx.clock(), self.max_skew())
        check_not_expired(req.capabilities, ctx.clock().timestamp())
        cid = manifest["canonical_id"]
        # Checked once outside the lock so that a refused or unchanged
        # registration is never embedded, and again under it (state may move).
        _, unchanged = self.admissible(cid, manifest, req.capabilities)
        profile = profile_from(manifest, req.capabilities)
        vectors = None if unchanged else ctx.matcher.embed_profile(profile)
        now = rfc3339(ctx.clock())
        with self.index.write_lock:  # serialises ACTIVATE and lifecycle events
            previous, unchanged = self.admissible(cid, manifest, req.capabilities)
            audit = ctx.audit.entry(
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
                require_writable(ctx.audit)  # 503, nothing applied
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
                ref = ctx.store.upsert(stored, audit)
                publish(ctx.store, ctx.audit, ref, audit)
                if vectors is None:
                    vectors = ctx.matcher.embed_profile(profile)
                entry = AgentEntry.from_stored(stored)
                with self.index.lock:
                    ctx.matcher.upsert(profile, vectors)
                    self.index.put(entry)
        if unchanged:  # no state change: the record alone (never raises)
            ctx.audit.append(audit)
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

    # -- self-asserted records (DESIGN.md "Self-asserted records") --------------------
    def admit_self_asserted(
        self,
        metadata: Any,
        *,
        source: str,
        identity: Identity,
        task_id: str | None = None,
        zone: str | None = None,
        owner: str | None = None,
    ) -> dict[str, Any]:
        """Admit a profile metadata object (section 4.1: ``id``, ``name``,
        ``description``, ``bindings`` required; unknown fields kept) as a
        self-asserted record: tier 3, behavioral 0.0, ``"governed": false``.

        For surfaces an operator has enabled (the profile's PUT, HAIDIP,
        MCP); ``source`` names the surface, ``identity`` the requester (its
        Principal-ID owns the record), ``zone`` the governance zone it is
        indexed in (default ``zone:public``). Requires ``discovery:register``
        (451). 409 ``conflict`` when the id is a governed record (announcing
        never replaces or upgrades one) or is owned by another principal; 409
        ``stale_metadata`` for metadata older than the stored (``updated_at``)
        or already expired; 410 for a retired id; 422 for malformed metadata.
        Same content again is idempotent (``unchanged``). ``owner`` replaces
        the Principal-ID as the record's owner when the surface proves
        ownership itself (MCP: the key pinned for the agent_id)."""
        audit = self.ctx.audit
        require_scope(identity, DISCOVERY_REGISTER, method=source, task_id=task_id, audit=audit)
        try:
            return self._admit_self_asserted(metadata, source, identity, task_id, zone, owner)
        except AgtpError as exc:
            audit.record(
                "self_asserted_refused",
                status=exc.status,
                code=exc.code,
                **requester_fields(identity, source, task_id),
                source=source,
                profile_id=str(metadata.get("id") if isinstance(metadata, dict) else "")[:256],
                reason=exc.message,
            )
            raise

    def _admit_self_asserted(
        self,
        metadata: Any,
        source: str,
        identity: Identity,
        task_id: str | None,
        zone: str | None,
        owner: str | None = None,
    ) -> dict[str, Any]:
        ctx = self.ctx
        caps = check_metadata(metadata)
        at = ctx.clock().timestamp()
        check_not_expired(caps, at)
        check_not_future_dated(caps, at, ctx.config.lifecycle_max_skew)
        owner = owner if owner is not None else identity.principal_id
        now = rfc3339(ctx.clock())
        manifest = self_asserted_manifest(caps, source=source, owner=owner, zone=zone, now=now)
        cid = manifest["canonical_id"]
        profile = profile_from(manifest, caps)
        vectors = ctx.matcher.embed_profile(profile)
        with self.index.write_lock:
            tomb = ctx.store.tombstone(cid)
            previous = ctx.store.get(cid) if tomb is None else None
            check_admissible(cid, manifest, caps, None, tomb, False)  # 410 for a retired id
            unchanged = self._check_self_asserted(cid, caps, owner, previous)
            if unchanged:
                assert previous is not None
                stored = previous
            else:
                if previous is not None:  # the first admission's time stays
                    manifest["activated_at"] = previous.manifest.get("activated_at", now)
                require_writable(ctx.audit)
                stored = StoredAgent(
                    canonical_id=cid,
                    manifest=manifest,
                    capabilities=caps,
                    lifecycle_state=ACTIVE,
                    signer_kid=SELF_ASSERTED_KID,
                    registered_at=previous.registered_at if previous else now,
                    updated_at=now,
                )
                entry = ctx.audit.entry(
                    "self_asserted_admission",
                    status=200,
                    **requester_fields(identity, source, task_id),
                    canonical_id=cid,
                    profile_id=str(caps["id"])[:512],
                    source=source,
                    trust_tier=3,
                    governance_zone=manifest["governance_zone"],
                    replaced=previous is not None,
                )
                ref = ctx.store.upsert(stored, entry)
                publish(ctx.store, ctx.audit, ref, entry)
                with self.index.lock:
                    ctx.matcher.upsert(profile, vectors)
                    self.index.put(AgentEntry.from_stored(stored))
        log.info(
            "self-asserted agent admitted", canonical_id=cid, source=source, unchanged=unchanged
        )
        return {
            "canonical_id": cid,
            "id": caps["id"],
            "lifecycle_state": ACTIVE,
            "governed": False,
            "trust_tier": 3,
            "indexed": True,
            "unchanged": unchanged,
            "registered_at": stored.registered_at,
            "updated_at": stored.updated_at,
        }

    def remove_self_asserted(self, cid: str, *, source: str, event: str, **fields: Any) -> bool:
        """Take a self-asserted record of ``source`` out of the index and
        persist it as lifecycle "Removed" (a change-feed entry, so every
        follower drops it), with the audit record ``event``. A later
        admission brings it back. False (nothing written) when the record is
        absent, governed, of another surface or not Active."""
        ctx, index = self.ctx, self.index
        now = rfc3339(ctx.clock())
        with index.write_lock:
            stored = ctx.store.get(cid)
            marker = stored.manifest.get("self_asserted") if stored is not None else None
            if (
                stored is None
                or not is_self_asserted(stored.signer_kid)
                or not isinstance(marker, dict)
                or marker.get("source") != source
                or stored.lifecycle_state != ACTIVE
            ):
                return False
            require_writable(ctx.audit)
            audit = ctx.audit.entry(event, canonical_id=cid, source=source, **fields)
            removed = replace(stored, lifecycle_state="Removed", updated_at=now)
            publish(ctx.store, ctx.audit, ctx.store.upsert(removed, audit), audit)
            with index.lock:
                index.remove(cid)
        return True

    def _check_self_asserted(
        self, cid: str, caps: Mapping[str, Any], owner: str, previous: StoredAgent | None
    ) -> bool:
        """Whether a self-asserted update changes nothing; raises on conflicts."""
        if previous is None:
            return False
        if not is_self_asserted(previous.signer_kid):
            raise Conflict(
                f"agent {cid[:80]} is a governed record; a self-asserted record cannot replace it",
                code=ErrorCode.CONFLICT,
            )
        if owner_of(previous.manifest) != owner:
            raise Conflict(
                f"agent {cid[:80]} is owned by another principal", code=ErrorCode.CONFLICT
            )
        if previous.lifecycle_state == SUSPENDED:
            raise Conflict(f"agent {cid[:80]} is Suspended", code=ErrorCode.AGENT_SUSPENDED)
        if previous.capabilities == caps:
            return previous.lifecycle_state == ACTIVE and cid in self.index.registry
        new, old = epoch(caps.get("updated_at")), epoch(previous.capabilities.get("updated_at"))
        if new is None and old is not None:  # it cannot be shown newer than the stored
            raise Conflict(
                f"the stored record carries updated_at {previous.capabilities['updated_at']}; "
                "an update must carry one at least as recent",
                code=ErrorCode.STALE_METADATA,
            )
        if new is not None and old is not None and new < old:
            raise Conflict(
                f"updated_at {caps['updated_at']} is older than the stored "
                f"{previous.capabilities['updated_at']}",
                code=ErrorCode.STALE_METADATA,
            )
        return False

    # -- bulk ACTIVATE (ans import) -----------------------------------------------------
    def activate_many(
        self,
        verified: Sequence[tuple[dict[str, Any], dict[str, Any], str]],
        requester: Mapping[str, Any] | None = None,
        vectors: Sequence[ProfileVectors | None] | None = None,
    ) -> tuple[list[str], int, list[tuple[int, AgtpError]]]:
        """ACTIVATE a batch of already verified (manifest, capabilities,
        signer_kid), as if one after another: the same admissibility rule
        (:func:`check_admissible`), a later line for the same canonical id
        checked against the earlier one. Then one store transaction, one
        batched embedding, one index update.

        The batch's audit record (``bulk_import_batch``, with the
        ``requester_fields`` of who imports, if given) is committed with it;
        the store or audit log unwritable raises 503 ``storage_unavailable``
        with nothing applied.

        ``vectors``, aligned with ``verified``: the profile vectors of a line
        already embedded (``ans import`` embeds in its worker processes, with
        an embedder of this matcher's fingerprint); None where not.

        Returns (stored canonical ids in order, unchanged count,
        [(position in ``verified``, refusal)])."""
        ctx, index = self.ctx, self.index
        at = ctx.clock()
        now = rfc3339(at)
        refused: list[tuple[int, AgtpError]] = []
        unchanged = 0
        with index.write_lock:
            previous = ctx.store.get_many(m["canonical_id"] for m, _, _ in verified)
            pending: dict[str, StoredAgent] = {}
            line_of: dict[str, int] = {}  # the line each pending agent came from
            for i, (manifest, caps, kid) in enumerate(verified):
                cid = manifest["canonical_id"]
                try:
                    check_manifest_time(manifest, at, self.max_skew())
                    check_not_expired(caps, at.timestamp())
                    prev = pending.get(cid) or previous.get(cid)
                    # Tombstoned ids are among the withdrawn (no store read per line).
                    withdrawn = index.withdrawn.get(cid)
                    retired = withdrawn is not None and withdrawn != SUSPENDED
                    tomb = ctx.store.tombstone(cid) if retired else None
                    indexed = cid in pending or cid in index.registry
                    if check_admissible(cid, manifest, caps, prev, tomb, indexed):
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
                line_of[cid] = i
            agents = list(pending.values())
            if agents:
                require_writable(ctx.audit)
                audit = ctx.audit.entry(
                    "bulk_import_batch",
                    count=len(agents),
                    first_canonical_id=agents[0].canonical_id,
                    last_canonical_id=agents[-1].canonical_id,
                    **(requester or {}),
                )
                ref = ctx.store.upsert_many(agents, audit)  # durable first, with its record
                publish(ctx.store, ctx.audit, ref, audit)
            profiles = [profile_from(a.manifest, a.capabilities) for a in agents]
            given = [vectors[line_of[a.canonical_id]] if vectors else None for a in agents]
            embedded = self._embed_missing(profiles, given)
            entries = [AgentEntry.from_stored(a) for a in agents]
            with index.lock:
                ctx.matcher.upsert_many(list(zip(profiles, embedded, strict=True)))
                index.registry.put_many(entries)
                for a in agents:
                    index.forget_fields(a.canonical_id)
        return [a.canonical_id for a in agents], unchanged, refused

    def _embed_missing(
        self, profiles: Sequence[CapabilityProfile], given: Sequence[ProfileVectors | None]
    ) -> list[ProfileVectors]:
        """``given`` with each None replaced by its profile's vectors (one
        embedder call for all of them)."""
        missing = [profiles[j] for j, v in enumerate(given) if v is None]
        done = iter(self.ctx.matcher.embed_profiles(missing) if missing else ())
        return [v if v is not None else next(done) for v in given]

    def max_skew(self) -> timedelta:
        """How far in the future a signed timestamp may be (lifecycle events,
        manifests): ``lifecycle_max_skew``."""
        return timedelta(seconds=self.ctx.config.lifecycle_max_skew)

    def _explain_removed_key(self, manifest: dict[str, Any], exc: UnknownSigningKey) -> None:
        """An unknown key that once signed this agent's stored manifest was
        removed from the trusted set: say so (401 signing_key_removed)."""
        cid = manifest.get("canonical_id")
        sig = manifest.get("signature")
        kid = sig.get("key_id") if isinstance(sig, dict) else None
        previous = self.ctx.store.get(cid) if isinstance(cid, str) else None
        if previous is not None and kid == previous.signer_kid:
            raise SignatureInvalid(
                f"manifest is signed by governance key {str(kid)[:80]!r}, which signed this "
                "agent before but is no longer trusted",
                code=ErrorCode.SIGNING_KEY_REMOVED,
            ) from exc
