"""The efficient-discovery profile's response (draft-xu section 6) from a
signed AGTP DISCOVER result: a translation of messages, nothing recomputed
(DESIGN.md "One core, many surfaces").

:func:`candidate` maps one AGTP result item onto a profile candidate;
:func:`profile_response` builds the whole response object and, given the
ANS signing key, signs it the way results are signed (``ans_signature``:
ES256 over its RFC 8785 bytes), so a profile client verifies it against the
same JWKS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ans.governance.keys import SigningKey
from ans.governance.profile_metadata import epoch
from ans.governance.signing import RESULT_SIGNATURE_FIELD, signature_object
from ans.protocol.jcs import canonicalize

# AGTP item fields carried over under the same name, when present.
_SAME = (
    "canonical_id",
    "bindings",
    "status",
    "score_components",
    "matched_tags",
    "matched_examples",
    "redacted",
    "redacted_fields",
    "trust_tier",
    "behavioral_trust_score",
    "capability_match_score",
    "governed",
    "governance_zone",
    "org_domain",
    "tags",
    "available",
    "availability_reason",
    "trust_warning",
    "trust_tier_explanation",
    "required_scope",
    "routing_reason",
    "equivalent_confidence",
    "alternative_to",
    # section 10 provenance of federated candidates, as the merge put it
    "origin_service",
    "origin_authority",
    "origin_signature",
    "received_at",
    "provenance",
    # detail=full
    "manifest",
    "capabilities",
)


def candidate(item: Mapping[str, Any], generated_at: str | None = None) -> dict[str, Any]:
    """One profile candidate: ``id`` (the profile id when the agent declared
    one, else its canonical id), ``name`` / ``description`` (declared, else the
    manifest's label and job description), ``score`` (the rank_score), then
    the fields the item carries (``bindings``, ``status``, evidence,
    ``freshness`` with ``metadata_updated_at`` and ``age_seconds`` at
    ``generated_at``, provenance, ...)."""
    out: dict[str, Any] = {"id": item.get("profile_id") or item["canonical_id"]}
    name = item.get("name", item.get("agent_label"))
    if name is not None:
        out["name"] = name
    description = item.get("description", item.get("job_description"))
    if description is not None:
        out["description"] = description
    out["score"] = item.get("rank_score")
    out["rank"] = item.get("rank")
    for key in _SAME:
        if key in item:
            out[key] = item[key]
    fresh = item.get("freshness")
    if isinstance(fresh, Mapping):
        f = dict(fresh)
        if "updated_at" in f:
            f["metadata_updated_at"] = f.pop("updated_at")
        updated, now = epoch(f.get("metadata_updated_at")), epoch(generated_at)
        if "age_seconds" not in f and updated is not None and now is not None:
            f["age_seconds"] = max(0, round(now - updated))  # at generated_at
        out["freshness"] = f
    return out


def warning_text(w: Any) -> str:
    """A warning as the profile's string (``code: message``, peer named)."""
    if not isinstance(w, Mapping):
        return str(w)
    text = f"{w.get('code', 'warning')}: {w.get('message', '')}"
    return f"{text} (peer {w['peer']})" if "peer" in w else text


def profile_response(result: Mapping[str, Any], key: SigningKey | None = None) -> dict[str, Any]:
    """The profile's response object for a signed AGTP DISCOVER result."""
    out: dict[str, Any] = {
        "request_id": result["query_id"],
        "generated_at": result["generated_at"],
        "query_digest": result["query_digest"],
        "candidates": [candidate(item, result["generated_at"]) for item in result["results"]],
        "total_matches": result.get("total_matches"),
        "detail": result.get("detail", "summary"),
        "applied_filters": result.get("applied_filters", {}),
        "unsupported_filters": result.get("unsupported_filters", []),
        "warnings": [warning_text(w) for w in result.get("warnings", [])],
        "ranking": result.get("ranking"),
    }
    for key_name in ("relevance", "federation_path", "routing"):
        if key_name in result:
            out[key_name] = result[key_name]
    if key is not None:
        out[RESULT_SIGNATURE_FIELD] = signature_object(canonicalize(out), key)
    return out
