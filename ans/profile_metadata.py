"""Self-asserted records: a profile metadata object (draft-xu section 4) that
arrives through a non-governed surface (the profile's ``PUT``, later HAIDIP
card upload and MCP announcements) mapped onto what the registry stores.

DESIGN.md "Self-asserted records": tier 3, behavioral score 0.0, marked
``"governed": false`` (so excluded from DISCOVER unless the caller admits
tier 3), signed by no governance key (``signer_kid`` is
:data:`SELF_ASSERTED_KID`). The metadata object itself is the capability
document (unknown fields kept); the manifest is synthesized from it and
carries ``self_asserted`` = ``{source, owner}``.

Ids: a profile ``id`` may be a URI; ANS canonical ids are
``[A-Za-z0-9._:-]{1,256}``. :func:`profile_canonical_id` maps one onto the
other deterministically (the id itself when it already is a canonical id).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ans.governance.manifest import validate_capabilities
from ans.protocol.errors import InvalidCapabilities
from ans.protocol.request_types import CANONICAL_ID_RE, ORG_DOMAIN_RE, ZONE_RE

# The signer_kid of a record no governance key signed (never a key id: a
# JWK thumbprint is base64url without "-" runs like this one).
SELF_ASSERTED_KID = "self-asserted"
DEFAULT_ZONE = "zone:public"
# The D0 fields (section 4.1 MUST): a self-asserted record needs them all.
REQUIRED = ("id", "name", "description", "bindings")

_LABEL_BAD = re.compile(r"[^a-z0-9._-]+")
_LABEL_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")


def profile_canonical_id(profile_id: str) -> str:
    """The canonical id a profile ``id`` maps to: itself when it is one,
    else ``urn:profile:`` and the first 32 hex digits of its SHA-256."""
    if CANONICAL_ID_RE.fullmatch(profile_id):
        return profile_id
    return "urn:profile:" + hashlib.sha256(profile_id.encode()).hexdigest()[:32]


def is_self_asserted(signer_kid: str) -> bool:
    return signer_kid == SELF_ASSERTED_KID


def owner_of(manifest: Mapping[str, Any]) -> str | None:
    marker = manifest.get("self_asserted")
    owner = marker.get("owner") if isinstance(marker, dict) else None
    return owner if isinstance(owner, str) else None


def check_metadata(metadata: Any) -> dict[str, Any]:
    """A profile metadata object fit for a self-asserted record (422 otherwise)."""
    if not isinstance(metadata, dict):
        raise InvalidCapabilities("agent metadata must be a JSON object")
    for name in REQUIRED:
        if name not in metadata:
            raise InvalidCapabilities(f"agent metadata is missing required field {name!r}")
    validate_capabilities(metadata)  # types and bounds, the profile's fields included
    return metadata


def _host(uri: str) -> str | None:
    try:
        host = urlsplit(uri).hostname
    except ValueError:
        return None
    if host and ORG_DOMAIN_RE.fullmatch(host.lower().rstrip(".")):
        return host.lower().rstrip(".")
    return None


def self_asserted_manifest(
    metadata: Mapping[str, Any], *, source: str, owner: str, zone: str | None, now: str
) -> dict[str, Any]:
    """The manifest a self-asserted record is stored and indexed with."""
    endpoints = [b["endpoint"] for b in metadata["bindings"] if isinstance(b, dict)]
    org = _host(metadata["id"]) or next(
        (h for h in map(_host, endpoints) if h), "self-asserted.invalid"
    )
    label = _LABEL_BAD.sub("-", str(metadata["name"]).lower()).strip("-._")[:128]
    zone = zone if zone is not None and ZONE_RE.fullmatch(zone) else DEFAULT_ZONE
    uri = metadata["id"] if ":" in metadata["id"] else endpoints[0]
    return {
        "document_type": "agtp-manifest",
        "schema_version": "efficient-discovery-profile-d0",
        "manifest_uri": uri,
        "canonical_id": profile_canonical_id(metadata["id"]),
        "agent_label": label if _LABEL_RE.fullmatch(label) else "agent",
        "org_domain": org,
        "governance_zone": zone,
        "trust_tier": 3,
        "behavioral_trust_score": 0.0,
        "lifecycle_state": "Active",
        "supported_methods": [],
        "authority_scope_categories": [],
        "job_description": metadata["description"],
        "activated_at": now,
        "last_updated": metadata.get("updated_at", now),
        "principal_org": owner,
        "governed": False,
        "self_asserted": {"source": source, "owner": owner},
    }
