"""What a DISCOVER result says about the efficient-discovery profile's
request fields, and how much of each agent it shows (draft-xu sections 5, 6,
7.4). Pure functions over result items; :mod:`ans.core.discovery` calls them
before signing, so everything here is inside the ES256 result signature.

* :func:`score_components` — the cheap components every item carries:
  ``policy`` (the trust part of ``rank_score``: ``rank_score =
  capability_match_weight x capability_match_score + policy``), ``protocol``
  (1.0: the agent has a binding with a requested protocol; only when
  ``protocols`` was given), ``freshness`` (1 - age / max age; only with
  ``constraints.max_results_age_seconds``), ``preferred_tags`` (the boost the
  preferred tags added to the capability evidence). With ``include_evidence``
  the matcher's ``tag`` / ``context`` / ``example`` / ``fused`` join them.
* :func:`project` — ``detail``: ``minimal`` keeps identifiers, status,
  bindings, score and routing/provenance fields; ``summary`` the item as
  built; ``full`` adds the stored governance-signed ``manifest`` and the
  ``capabilities`` document, minus the fields the operator's redaction policy
  names (``[profile] redact``), which are then listed in ``redacted_fields``
  with ``redacted: true``.
* :func:`drop_unsignable_documents` — a stored document holding an integer
  beyond 2^53 (stored before ANS refused them where they enter) cannot be
  canonicalized, so no signed answer can carry it: such an item keeps its
  summary, and the answer says why.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ans.governance.profile_metadata import epoch
from ans.protocol.jcs import unsafe_integer
from ans.protocol.request_types import DiscoverParams

from ..config import RankingWeights
from ..ranking import PRECISION, TIER_NORM

# What detail=minimal keeps of an item (those present).
MINIMAL_FIELDS = (
    "rank",
    "canonical_id",
    "profile_id",
    "manifest_uri",
    "status",
    "bindings",
    "rank_score",
    "available",
    "availability_reason",
    "governed",
    "routing_reason",
    "equivalent_confidence",
    "alternative_to",
    "provenance",
    "origin_service",
    "origin_authority",
    "origin_signature",
    "received_at",
    "redacted",
)
# Where a redaction path may point: "manifest.<field>" or "capabilities.<field>".
REDACTABLE = ("manifest", "capabilities")


def freshness_of(item: Mapping[str, Any], now: float, with_age: bool) -> dict[str, Any] | None:
    """The item's ``freshness``, with ``age_seconds`` (now - metadata
    updated_at) when ``with_age``: only when the caller asked a freshness
    constraint, so that an answer does not change from second to second
    otherwise (the age is ``generated_at`` - ``updated_at``)."""
    fresh = item.get("freshness")
    if not isinstance(fresh, dict):
        return None
    out = dict(fresh)
    updated = epoch(fresh.get("updated_at"))
    if with_age and updated is not None:
        out["age_seconds"] = max(0, round(now - updated))
    return out


def score_components(
    item: Mapping[str, Any],
    params: DiscoverParams,
    weights: RankingWeights,
    boost: float | None,
    age: float | None,
) -> dict[str, float]:
    out: dict[str, float] = {}
    tier = item.get("trust_tier")
    behavioral = item.get("behavioral_trust_score")
    if tier in TIER_NORM and isinstance(behavioral, (int, float)):
        policy = weights.trust_tier * TIER_NORM[tier] + weights.behavioral_trust * behavioral
        out["policy"] = round(policy, PRECISION)
    prof = params.profile
    if prof.protocols:
        out["protocol"] = 1.0
    if prof.max_results_age_seconds is not None and age is not None:
        limit = prof.max_results_age_seconds
        out["freshness"] = round(max(0.0, 1.0 - age / limit), PRECISION) if limit > 0 else 1.0
    if boost is not None:
        out["preferred_tags"] = round(boost, PRECISION)
    return out


def applied_filters(params: DiscoverParams) -> dict[str, Any]:
    """The hard filters this answer applied (those the caller gave), named
    as in the request. Expired records are never served, whatever is asked."""
    p, prof = params, params.profile
    out: dict[str, Any] = {}
    for name in ("trust_tier_min", "behavioral_trust_min", "governance_zone", "org_domain"):
        value = getattr(p, name)
        if value is not None:
            out[name] = value
    if p.capability_domains is not None:
        out["capability_domains"] = list(p.capability_domains)
    for name in ("required_tags", "excluded_tags", "protocols"):
        value = getattr(prof, name)
        if value:
            out[name] = list(value)
    constraints: dict[str, Any] = {}
    if prof.max_results_age_seconds is not None:
        constraints["max_results_age_seconds"] = prof.max_results_age_seconds
    if prof.regions:
        constraints["region"] = list(prof.regions)
    if prof.zone is not None:
        constraints["zone"] = prof.zone
    if constraints:
        out["constraints"] = constraints
    return out


def request_warnings(params: DiscoverParams) -> list[dict[str, str]]:
    prof = params.profile
    out = []
    if prof.unsupported_filters:
        out.append(
            {
                "code": "unsupported_filter",
                "message": "not applied (listed in unsupported_filters): "
                + ", ".join(f[:64] for f in prof.unsupported_filters),
            }
        )
    if prof.client_context_digest is not None:
        out.append(
            {
                "code": "client_context_unused",
                "message": "client_context was accepted; it does not change the ranking",
            }
        )
    return out


def _redact(doc: Mapping[str, Any], fields: list[str]) -> tuple[dict[str, Any], list[str]]:
    out = copy.deepcopy(dict(doc))
    removed = [f for f in fields if f in out]
    for f in removed:
        del out[f]
    return out, removed


def project(
    item: dict[str, Any],
    detail: str,
    redact: tuple[str, ...],
    stored: tuple[Mapping[str, Any], Mapping[str, Any]] | None,
) -> tuple[dict[str, Any], bool]:
    """The item at ``detail``; for ``full``, ``stored`` is the agent's
    (manifest, capabilities) from this ANS's store (None: a federated
    candidate, whose full documents this ANS does not hold). Returns the item
    and whether a full document was missing."""
    if detail == "minimal":
        return {k: item[k] for k in MINIMAL_FIELDS if k in item}, False
    if detail != "full":
        return item, False
    if stored is None:
        return item, True
    out = dict(item)
    removed: list[str] = []
    for section, doc in zip(REDACTABLE, stored, strict=True):
        names = [r.split(".", 1)[1] for r in redact if r.startswith(section + ".")]
        kept, gone = _redact(doc, names)
        out[section] = kept
        removed += [f"{section}.{f}" for f in gone]
    if removed:
        out["redacted"] = True
        out["redacted_fields"] = removed
    return out, False


def drop_unsignable_documents(result: dict[str, Any]) -> int:
    """Take the full documents (:data:`REDACTABLE`) out of every result item
    where they hold an integer :func:`~ans.protocol.jcs.canonicalize` refuses,
    add a ``full_detail_unavailable`` warning naming the first, and return how
    many items lost them (0: the result cannot be signed for another reason).
    Called only once canonicalizing the whole result failed."""
    dropped, first = 0, ""
    for item in result.get("results", []):
        where = None
        for section in REDACTABLE:
            if section in item and (where := unsafe_integer(item[section], section)):
                break
        if where is None:
            continue
        for section in (*REDACTABLE, "redacted", "redacted_fields"):
            item.pop(section, None)
        first = first or f"{item.get('canonical_id', '')[:80]} at {where[:120]}"
        dropped += 1
    if dropped:
        result.setdefault("warnings", []).append(
            {
                "code": "full_detail_unavailable",
                "message": f"{dropped} result(s) carry their summary: their stored documents "
                f"hold an integer beyond 2^53, which no signed answer can carry (first: "
                f"{first}); re-ACTIVATE each such agent to replace them",
            }
        )
    return dropped
