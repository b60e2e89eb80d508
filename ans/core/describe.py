"""DESCRIBE, and how this ANS describes itself.

:class:`Describer` answers DESCRIBE: without a canonical id (or with its
own) the ANS's self-signed Agent Manifest Document, carrying its public key;
for an indexed agent (named by canonical id, or by a name:
:mod:`ans.core.names`) its manifest and capabilities, behind the same scope
and zone rules as DISCOVER; 503 / 410 for Suspended / retired agents
(-02 6.5.3). It also serves the JWKS.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ans.governance.audit import rfc3339
from ans.governance.lifecycle import SUSPENDED
from ans.governance.policy import DISCOVERY_QUERY, require_scope
from ans.governance.profile_metadata import epoch
from ans.governance.signing import sign_document
from ans.protocol.errors import (
    Conflict,
    ErrorCode,
    Gone,
    MissingHeader,
    NotFound,
    Unavailable,
)
from ans.protocol.jcs import canonicalize, unsafe_integer
from ans.protocol.messages import DescribeRequest
from ans.protocol.scope import ScopeToken

from ..config import Config
from .context import CoreContext
from .live_index import LiveIndex
from .names import NameResolver

# The "agtp_version" an Identity Document names: the base draft revision
# whose schema it follows (-09).
IDENTITY_AGTP_VERSION = "0.9"

# The efficient-discovery profile (draft-xu) and the level this ANS claims.
PROFILE_NAME = "draft-xu-efficient-agent-discovery-profile-00"
PROFILE_LEVEL = "D2"


def discovery_profile(c: Config) -> dict[str, Any]:
    """How this ANS serves the efficient-discovery profile: its conformance
    level (section 3.1: D2 includes D0 and D1) and the bindings that carry it."""
    bindings: dict[str, Any] = {"agtp": {"method": "DISCOVER"}}
    if c.profile.enabled:
        base = c.profile.base_path
        bindings["json"] = {
            "discover": f"POST {base}/discover",
            "agent": f"GET {base}/agents/{{id}}",
            "self_registration": f"PUT {base}/agents/{{id}}"
            if c.profile.self_registration
            else None,
        }
    return {"profile": PROFILE_NAME, "level": PROFILE_LEVEL, "bindings": bindings}


class Describer:
    def __init__(self, ctx: CoreContext, index: LiveIndex) -> None:
        self.ctx = ctx
        self.index = index
        self.names = NameResolver(ctx, index)
        self.manifest = self.own_manifest()
        self.identity_document = self.own_identity()

    def describe(
        self,
        req: DescribeRequest,
        *,
        required: ScopeToken = DISCOVERY_QUERY,
        method: str = "DESCRIBE",
        signed: bool = True,
    ) -> dict[str, Any]:
        """An indexed agent as ``{"manifest", "capabilities"}`` when the
        caller holds ``required`` (451, audited as ``method``) and its zone
        (else 404, as for an unknown agent); 503 Suspended, 410 retired; 409
        when the documents go into a ``signed`` answer and hold an integer no
        signature can carry. The HAIDIP invocation gateway asks with
        ``agents:invoke`` and signs nothing of them."""
        ctx = self.ctx
        if req.canonical_id is None or req.canonical_id == self.manifest["canonical_id"]:
            return self.manifest
        if req.identity is None:
            raise MissingHeader(
                "DESCRIBE of an indexed agent requires Agent-ID, Principal-ID and Authority-Scope",
                code=ErrorCode.MISSING_AGENT_ID,
            )
        require_scope(req.identity, required, method=method, task_id=req.task_id, audit=ctx.audit)
        cid = req.canonical_id
        with self.index.lock:
            entry = self.index.registry.get(cid)
            withdrawn = self.index.withdrawn.get(cid)
        if entry is None and withdrawn is None:
            # Not an indexed id: a name (label.org_domain, an explicit name)?
            found = self.names.by_name(cid, req.identity)
            if found is not None:
                cid = found
                with self.index.lock:
                    entry = self.index.registry.get(cid)
        if entry is None and withdrawn is not None:
            self._describe_withdrawn(cid, withdrawn, req.identity.scope)
        if entry is None or not ctx.zones.granted(entry.governance_zone, req.identity.scope):
            raise NotFound(f"no Active agent {cid!r} in this ANS")
        stored = ctx.store.get(cid)
        if stored is None or stored.lifecycle_state != "Active":
            raise NotFound(f"no Active agent {cid!r} in this ANS")
        expires = epoch(stored.capabilities.get("expires_at"))
        if expires is not None and expires <= ctx.clock().timestamp():  # never served once expired
            raise Gone(
                f"agent {cid[:80]} expired at {stored.capabilities['expires_at']}",
                code=ErrorCode.METADATA_EXPIRED,
            )
        unsafe = signed and (
            unsafe_integer(stored.manifest, "manifest")
            or unsafe_integer(stored.capabilities, "capabilities")
        )
        if unsafe:  # stored before ANS refused such documents where they enter
            raise Conflict(
                f"agent {cid[:80]}'s stored documents hold an integer beyond 2^53 (at "
                f"{unsafe[:120]}), which no signed answer can carry; re-ACTIVATE the agent "
                "to replace them"
            )
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
            "discovery_profile": discovery_profile(c),
        }
        signed: dict[str, Any] = sign_document(doc, key, "signature")
        return signed

    def own_identity(self) -> dict[str, Any]:
        """This ANS as a -09 Agent Identity Document, signed, with its keys."""
        m = self.manifest
        doc = identity_fields(m, m.get("capabilities", {}))
        doc.update(
            {
                "issuer": m["manifest_uri"],
                "issued_at": m["activated_at"],
                "updated_at": m["activated_at"],
                "scopes_accepted": ["discovery:query", "discovery:register"],
                "public_key": m["public_key"],
                "jwks": m["jwks"],
                "jwks_uri": m["jwks_uri"],
                "ranking_weights": m["ranking_weights"],
                "agtp_manifest": m,
            }
        )
        signed: dict[str, Any] = sign_document(doc, self.ctx.key, "signature")
        return signed

    def identity_of(self, described: dict[str, Any]) -> dict[str, Any]:
        """An indexed agent's DESCRIBE answer (``{"manifest", "capabilities"}``)
        as an Agent Identity Document, signed with the ANS key."""
        manifest = described["manifest"]
        doc = identity_fields(manifest, described.get("capabilities", {}))
        doc.update(
            {
                "issuer": self.manifest["manifest_uri"],
                "issued_at": manifest.get("activated_at", ""),
                "updated_at": manifest.get("updated_at", manifest.get("activated_at", "")),
                "scopes_accepted": list(manifest.get("authority_scope_categories", [])),
                "capability_document": described.get("capabilities", {}),
                "agtp_manifest": manifest,
                "issuer_key_id": self.ctx.key.kid,
            }
        )
        signed: dict[str, Any] = sign_document(doc, self.ctx.key, "signature")
        return signed


def identity_fields(manifest: dict[str, Any], capabilities: Any) -> dict[str, Any]:
    """The -09 Identity Document fields an Agent Manifest Document maps to
    (``behavioral_trust_score`` -> ``trust_score``, ``lifecycle_state`` ->
    ``status`` in lowercase, ``supported_methods`` -> ``methods``, ...)."""
    caps = capabilities if isinstance(capabilities, dict) else {}
    raw_tags = caps.get("tags")
    tags: list[Any] = raw_tags if isinstance(raw_tags, list) else []
    doc: dict[str, Any] = {
        "agtp_version": IDENTITY_AGTP_VERSION,
        "document_type": "agtp-identity",
        "document_version": "1.0",
        "agent_id": manifest["canonical_id"],
        "name": manifest.get("agent_label", ""),
        "description": manifest.get("job_description", ""),
        "principal": manifest.get("principal_org", ""),
        "principal_id": manifest.get("org_domain", ""),
        "status": str(manifest.get("lifecycle_state", "Active")).lower(),
        "methods": list(manifest.get("supported_methods", [])),
        "capabilities": [t for t in tags if isinstance(t, str)],
        "trust_score": manifest.get("behavioral_trust_score", 0.0),
        "trust_tier": manifest.get("trust_tier"),
        "owner_id": manifest.get("principal_org", ""),
        "org_domain": manifest.get("org_domain", ""),
        "governance_zone": manifest.get("governance_zone", ""),
        "manifest_uri": manifest.get("manifest_uri", ""),
        "package_format": manifest.get("package_format", ""),
        "package_integrity_hash": manifest.get("package_integrity_hash", ""),
    }
    for name in ("trust_warning", "trust_explanation", "cert_status"):
        if name in manifest:
            doc[name] = manifest[name]
    return doc
