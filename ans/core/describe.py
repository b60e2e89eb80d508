"""DESCRIBE, and how this ANS describes itself.

:class:`Describer` answers DESCRIBE: without a canonical id (or with its
own) the ANS's self-signed Agent Manifest Document, carrying its public key;
for an indexed agent its manifest and capabilities, behind the same scope
and zone rules as DISCOVER; 503 / 410 for Suspended / retired agents
(-02 6.5.3). It also serves the JWKS.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ans.governance.audit import rfc3339
from ans.governance.lifecycle import SUSPENDED
from ans.governance.policy import DISCOVERY_QUERY, require_scope
from ans.governance.signing import sign_document
from ans.protocol.errors import ErrorCode, Gone, MissingHeader, NotFound, Unavailable
from ans.protocol.jcs import canonicalize
from ans.protocol.messages import DescribeRequest

from .context import CoreContext
from .live_index import LiveIndex


class Describer:
    def __init__(self, ctx: CoreContext, index: LiveIndex) -> None:
        self.ctx = ctx
        self.index = index
        self.manifest = self.own_manifest()

    def describe(self, req: DescribeRequest) -> dict[str, Any]:
        ctx = self.ctx
        if req.canonical_id is None or req.canonical_id == self.manifest["canonical_id"]:
            return self.manifest
        if req.identity is None:
            raise MissingHeader(
                "DESCRIBE of an indexed agent requires Agent-ID, Principal-ID and Authority-Scope",
                code=ErrorCode.MISSING_AGENT_ID,
            )
        require_scope(
            req.identity, DISCOVERY_QUERY, method="DESCRIBE", task_id=req.task_id, audit=ctx.audit
        )
        with self.index.lock:
            entry = self.index.registry.get(req.canonical_id)
            withdrawn = self.index.withdrawn.get(req.canonical_id)
        if entry is None and withdrawn is not None:
            self._describe_withdrawn(req.canonical_id, withdrawn, req.identity.scope)
        if entry is None or not ctx.zones.granted(entry.governance_zone, req.identity.scope):
            raise NotFound(f"no Active agent {req.canonical_id!r} in this ANS")
        stored = ctx.store.get(req.canonical_id)
        if stored is None or stored.lifecycle_state != "Active":
            raise NotFound(f"no Active agent {req.canonical_id!r} in this ANS")
        return {"manifest": stored.manifest, "capabilities": stored.capabilities}

    def _describe_withdrawn(self, cid: str, state: str, scope: Any) -> None:
        """-02 6.5.3 step 3: Suspended -> 503, Revoked/Deprecated -> 410 — unless
        the agent sits in a restricted zone the caller may not see (404)."""
        stored = self.ctx.store.get(cid)
        if stored is not None and not self.ctx.zones.granted(
            stored.manifest.get("governance_zone", ""), scope
        ):
            return
        if state == SUSPENDED:
            raise Unavailable(f"agent {cid[:80]} is Suspended", code=ErrorCode.AGENT_SUSPENDED)
        tomb = self.ctx.store.tombstone(cid)
        when = f" since {tomb.issued_at}" if tomb else ""
        raise Gone(f"agent {cid[:80]} is {state}{when}", code=ErrorCode.AGENT_RETIRED)

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self.ctx.key.public.jwk()]}

    def own_manifest(self) -> dict[str, Any]:
        """This ANS's Agent Manifest Document, self-signed, carrying its public key."""
        c = self.ctx.config
        key = self.ctx.key
        jwk = key.public.jwk()
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
            "activated_at": rfc3339(self.ctx.clock()),
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
        signed: dict[str, Any] = sign_document(doc, key, "signature")
        return signed
