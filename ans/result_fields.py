"""The per-agent part of a DISCOVER result item, built from the verified
manifest and capability document the store holds (:mod:`ans.core.live_index`
reads them for the results actually returned, and caches the fields)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

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


# The stored form of the fields (the store's ``result_fields`` column, written
# with every version of an agent): [FIELDS_FORMAT, fields]. A DISCOVER reads
# this one small document per result instead of decoding the manifest and the
# capability document and deriving the fields again (~25 us an agent). Raise
# FIELDS_FORMAT whenever result_fields() changes what it returns: rows written
# in another format are derived again on read, never served.
FIELDS_FORMAT = 1


def stored_fields(
    manifest: Mapping[str, Any], capabilities: Mapping[str, Any] | None, stored_at: str
) -> bytes | None:
    """The ``result_fields`` column of an agent row stored at ``stored_at``;
    None (stored as NULL) for documents the fields cannot be derived from
    (the store holds any document it is given; a read of such a row derives
    them from the documents, as it always did, and fails as it did)."""
    try:
        fields = result_fields(manifest, capabilities, stored_at)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return orjson.dumps([FIELDS_FORMAT, fields])


def read_stored_fields(blob: bytes | None) -> dict[str, Any] | None:
    """The fields of a ``result_fields`` column; None when it is empty (a row
    written before the column existed) or in another format."""
    if blob is None:
        return None
    doc = orjson.loads(blob)
    if isinstance(doc, list) and len(doc) == 2 and doc[0] == FIELDS_FORMAT:
        fields = doc[1]
        if isinstance(fields, dict):
            return fields
    return None
