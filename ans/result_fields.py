"""The per-agent part of a DISCOVER result item, built from the verified
manifest and capability document the store holds (:mod:`ans.core.live_index`
reads them for the results actually returned, and caches the fields)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ans.governance.profile_metadata import attrs_of, bindings_of, metadata_updated_at


def result_fields(
    manifest: Mapping[str, Any],
    capabilities: Mapping[str, Any] | None = None,
    stored_at: str | None = None,
) -> dict[str, Any]:
    """The per-agent part of a DISCOVER result item, from the verified manifest
    and its capability document (key order is part of the byte output).

    The efficient-discovery profile's fields: ``bindings`` (declared, else the
    implicit AGTP one), ``status``, the normalized ``tags`` (so that a
    federating ANS can check its hard filters), ``governed`` (False for a
    self-asserted record), ``freshness`` (``indexed_at``: when ANS stored this
    version; ``updated_at``: the metadata's own; ``expires_at`` when set; the
    age is added per answer), and ``name`` / ``description`` / ``profile_id``
    when the capability document declares them."""
    caps = capabilities or {}
    fields = {
        "manifest_uri": manifest["manifest_uri"],
        "canonical_id": manifest["canonical_id"],
        "agent_label": manifest["agent_label"],
        "org_domain": manifest["org_domain"],
        "trust_tier": manifest["trust_tier"],
        # Always the score from the verified manifest, never a self-asserted one.
        "behavioral_trust_score": float(manifest["behavioral_trust_score"]),
        "supported_methods": list(manifest["supported_methods"]),
        "governance_zone": manifest["governance_zone"],
        "job_description": manifest["job_description"],
    }
    if manifest["trust_tier"] == 2 and "trust_warning" in manifest:
        fields["trust_warning"] = manifest["trust_warning"]
    for src, dst in (("id", "profile_id"), ("name", "name"), ("description", "description")):
        if isinstance(caps.get(src), str) and caps[src] != fields.get(dst):
            fields[dst] = caps[src]
    fields["governed"] = manifest.get("governed") is not False
    fields["status"] = caps.get("status", "active")
    fields["bindings"] = bindings_of(manifest, caps)
    attrs = attrs_of(manifest, caps, stored_at or "")
    fields["tags"] = list(attrs.tags)
    if attrs.regions:
        fields["regions"] = list(attrs.regions)
    freshness = {
        "indexed_at": stored_at or str(manifest.get("activated_at", "")),
        "updated_at": metadata_updated_at(manifest, caps, stored_at or ""),
    }
    if isinstance(caps.get("expires_at"), str):
        freshness["expires_at"] = caps["expires_at"]
    fields["freshness"] = freshness
    return fields
