"""Verification of one peer's DISCOVER answer, before anything is merged.

Pure functions (no I/O). An answer is accepted only if it is an AGTP 200
whose ``result`` carries a valid ``ans_signature`` from the peer's key, the
``query_digest`` of exactly what we sent, and a ``generated_at`` within the
allowed clock skew. Each entry is then checked on its own: well-formed,
inside the thresholds we asked for, in a zone we accept from that peer.
Entries that fail are dropped and counted by reason; the rest become
:class:`Candidate` objects with their trust tier capped at the tier we grant
the peer (discovery draft 5.3) and a provenance block (efficient-discovery
profile section 10).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ans.governance.audit import rfc3339
from ans.governance.keys import TrustedKeys
from ans.governance.policy import (
    GATE_BEHAVIORAL,
    GATE_RESTRICTED,
    GATE_TRUST_TIER,
    GATE_ZONE,
    THRESHOLD_GATES,
    ZonePolicy,
    first_failed_gate,
    max_tier,
)
from ans.governance.profile_metadata import item_filter_failure
from ans.governance.signing import RESULT_SIGNATURE_FIELD, verify_document
from ans.protocol import jsonstrict
from ans.protocol.errors import AgtpError, UnknownSigningKey
from ans.protocol.messages import ANS_ID_RE, MAX_FEDERATION_PATH, DiscoverParams, Identity

from .peers import Peer
from .transport import PeerError, PeerReply

MAX_ENTRY_FIELDS = 64
# Fields the merging ANS sets itself; a peer's values for them are not kept.
# The routing fields (ans.core.alternatives.ROUTING_ITEM_FIELDS) mark the routing
# position, which only the ANS answering the caller decides.
# The four provenance fields of the efficient-discovery profile (section 10).
PROFILE_PROVENANCE = ("origin_service", "origin_authority", "origin_signature", "received_at")
REPLACED_FIELDS = frozenset(
    {
        "rank",
        "rank_score",
        "provenance",
        *PROFILE_PROVENANCE,
        "routing_reason",
        "equivalent_confidence",
        "alternative_to",
    }
)
# A tier-2 entry carries the AGTP tier-2 warning (AGTP -02, Agent Manifest
# fields required at tier 2); an entry we cap to tier 2 says why.
TIER2_WARNING = "org-label-unverified"
CAPPED_EXPLANATION = (
    "Tier {claimed} where it is indexed; presented at tier {tier}, the tier this ANS "
    "grants the peer that supplied it."
)


class PeerRejected(PeerError):
    """The whole answer is unusable (bad status, signature, digest, time)."""


class PeerKeyMismatch(PeerRejected):
    """Signed with a kid we do not hold for this peer (maybe a rotated key)."""

    code = "peer_signature_invalid"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One verified federated entry, ready to be ranked beside local ones."""

    canonical_id: str
    trust_tier: int
    behavioral_trust_score: float
    capability_match_score: float
    item: dict[str, Any]  # the entry as we will present it (without rank/rank_score)
    route: tuple[str, ...]  # ANS ids from the supplying peer to the origin
    peer_index: int


@dataclass
class VerifiedAnswer:
    peer: Peer
    ans_id: str
    path: tuple[str, ...]
    candidates: list[Candidate]
    received: int
    drops: dict[str, int] = field(default_factory=dict)
    drop_examples: dict[str, str] = field(default_factory=dict)

    def drop(self, code: str, detail: str) -> None:
        self.drops[code] = self.drops.get(code, 0) + 1
        self.drop_examples.setdefault(code, detail)


@dataclass(frozen=True, slots=True)
class Expectation:
    """What we asked the peer, and what we hold the answer to."""

    params: DiscoverParams
    identity: Identity
    digest: str
    zones: ZonePolicy
    min_capability_match: float
    now: datetime
    max_clock_skew: float


def parse_reply(reply: PeerReply, max_bytes: int) -> dict[str, Any]:
    """The ``result`` object of a 200 answer, or PeerRejected naming the problem.
    A non-200 is ``peer_error`` whatever its body (a proxy's HTML 502 too),
    with the AGTP error code when the body carries one."""
    try:
        doc: Any = jsonstrict.loads(reply.body, max_bytes=max_bytes)
    except AgtpError as exc:
        if reply.status != 200:
            raise PeerRejected(f"peer answered {reply.status}", "peer_error") from None
        raise PeerRejected(
            f"answer is not strict JSON: {exc.message}", "peer_bad_response"
        ) from None
    if reply.status != 200:
        err = doc.get("error") if isinstance(doc, dict) else None
        code = err.get("code") if isinstance(err, dict) else None
        raise PeerRejected(
            f"peer answered {reply.status} {str(code)[:60] if code else ''}".rstrip(),
            "peer_error",
        )
    if not isinstance(doc, dict):
        raise PeerRejected("answer is not a JSON object", "peer_bad_response")
    result = doc.get("result")
    if not isinstance(result, dict):
        raise PeerRejected("answer has no result object", "peer_bad_response")
    return result


def verify_result(
    peer: Peer,
    peer_index: int,
    result: Mapping[str, Any],
    keys: TrustedKeys,
    expect: Expectation,
) -> VerifiedAnswer:
    """Check the signed result set as a whole, then every entry."""
    try:
        kid = verify_document(result, keys, RESULT_SIGNATURE_FIELD)
    except UnknownSigningKey as exc:
        raise PeerKeyMismatch(exc.message) from None
    except AgtpError as exc:
        raise PeerRejected(f"ans_signature: {exc.message}", "peer_signature_invalid") from None
    if result.get("query_digest") != expect.digest:
        raise PeerRejected("query_digest does not match the query we sent", "peer_digest_mismatch")
    generated = _parse_time(result.get("generated_at"))
    if generated is None:
        raise PeerRejected("generated_at is missing or not RFC 3339", "peer_bad_response")
    skew = abs((expect.now - generated).total_seconds())
    if skew > expect.max_clock_skew:
        raise PeerRejected(
            f"generated_at is {skew:.0f}s away from our clock (limit {expect.max_clock_skew:.0f}s)",
            "peer_result_stale",
        )
    entries = result.get("results")
    if not isinstance(entries, list):
        raise PeerRejected("result has no results list", "peer_bad_response")
    path = _path_of(result.get("federation_path"), kid)
    answer = VerifiedAnswer(peer, kid, path, [], len(entries))
    limit = expect.params.limit
    if len(entries) > limit:
        answer.drops["peer_over_limit"] = len(entries) - limit
        answer.drop_examples["peer_over_limit"] = f"{len(entries)} results for limit {limit}"
        entries = entries[:limit]
    signature = result[RESULT_SIGNATURE_FIELD]
    peer_sig = {
        "key_id": kid,
        "query_id": str(result.get("query_id", ""))[:128],
        "generated_at": str(result.get("generated_at")),
        "value": signature["value"],
    }
    received_at = rfc3339(expect.now)
    for raw in entries:
        cand = _candidate(raw, peer, peer_index, kid, peer_sig, received_at, expect, answer)
        if cand is not None:
            answer.candidates.append(cand)
    return answer


def _candidate(
    raw: Any,
    peer: Peer,
    peer_index: int,
    kid: str,
    peer_sig: dict[str, str],
    received_at: str,
    expect: Expectation,
    answer: VerifiedAnswer,
) -> Candidate | None:
    problem = _malformed(raw)
    if problem is not None:
        answer.drop("peer_entry_invalid", problem)
        return None
    assert isinstance(raw, dict)
    cid: str = raw["canonical_id"]
    claimed = int(raw["trust_tier"])
    behavioral = float(raw["behavioral_trust_score"])
    cms = float(raw["capability_match_score"])
    zone: str = raw["governance_zone"]
    p = expect.params
    # The hard gates of our own DISCOVER (ans.governance.policy), on the entry
    # as the peer presents it.
    gated = _PeerEntry(claimed, behavioral, zone, str(raw["org_domain"]).lower())
    failed = first_failed_gate(gated, p, expect.identity.scope, expect.zones)
    # The thresholds we asked for: a peer that ignores them is misbehaving.
    if failed is not None and failed in THRESHOLD_GATES:
        answer.drop("peer_threshold_violation", _threshold_detail(failed, cid, gated, p))
        return None
    if not peer.accepts_zone(zone):
        answer.drop("peer_zone_not_accepted", f"{cid[:16]}: zone {zone} not accepted from peer")
        return None
    # Our own policy: restricted zones stay invisible without the grant (no
    # warning, which would itself reveal the agent), and our capability floor.
    if failed == GATE_RESTRICTED:
        answer.drop("restricted_zone", cid[:16])
        return None
    if p.intent is not None and cms < expect.min_capability_match:
        answer.drop("below_capability_floor", cid[:16])
        return None
    # The profile's hard filters (tags, protocols, region, age) and expiry, on
    # what the entry carries: one it cannot be checked on is not taken.
    problem = item_filter_failure(raw, p.profile, expect.now.timestamp())
    if problem is not None:
        answer.drop("peer_profile_filter", f"{cid[:16]}: {problem}")
        return None
    tier = max(claimed, peer.tier)  # never better than the tier we grant the peer
    upstream = _upstream(raw.get("provenance"))
    if upstream is not None:
        route = (kid, *upstream["route"])[:MAX_FEDERATION_PATH]
        origin, origin_sig = upstream["origin_service"], upstream["origin_signature"]
    else:
        route, origin, origin_sig = (kid,), kid, peer_sig
    item = {k: v for k, v in raw.items() if k not in REPLACED_FIELDS}
    item["trust_tier"] = tier
    item["capability_match_score"] = cms
    if tier != claimed:
        item["trust_tier_explanation"] = CAPPED_EXPLANATION.format(claimed=claimed, tier=tier)
        if tier == 2:
            item["trust_warning"] = TIER2_WARNING
    elif tier == 2:
        item.setdefault("trust_warning", TIER2_WARNING)
    provenance: dict[str, Any] = {
        "origin_service": origin,
        "origin_authority": str(raw["org_domain"]).lower(),
        "origin_signature": origin_sig,
        "peer": {"ans_id": kid, "url": peer.url, "granted_trust_tier": peer.tier},
        "route": list(route),
        "claimed_trust_tier": claimed,
        "received_at": received_at,
    }
    if origin != kid:  # it came through the peer from further away: name both signatures
        provenance["peer_signature"] = peer_sig
    item["provenance"] = provenance
    # The profile's four fields also stand on the entry itself, where that
    # profile puts candidate metadata; same values as in "provenance".
    for name in PROFILE_PROVENANCE:
        item[name] = provenance[name]
    return Candidate(cid, tier, behavioral, cms, item, route, peer_index)


@dataclass(frozen=True, slots=True)
class _PeerEntry:
    """A peer's entry as :func:`first_failed_gate` sees it. A peer lists only
    agents Active where they are indexed (its own gate), and the wire format
    carries no lifecycle state: a locally withdrawn id is refused at merge."""

    trust_tier: int
    behavioral_trust_score: float
    governance_zone: str
    org_domain: str  # lowercased
    lifecycle_state: str = "Active"


def _threshold_detail(gate: str, cid: str, entry: _PeerEntry, p: DiscoverParams) -> str:
    """The example kept for a ``peer_threshold_violation`` drop."""
    if gate == GATE_TRUST_TIER:
        return f"{cid[:16]}: trust_tier {entry.trust_tier} > {max_tier(p)}"
    if gate == GATE_BEHAVIORAL:
        return (
            f"{cid[:16]}: behavioral_trust_score {entry.behavioral_trust_score} "
            f"< {p.behavioral_trust_min}"
        )
    if gate == GATE_ZONE:
        return f"{cid[:16]}: zone {entry.governance_zone} != {p.governance_zone}"
    return f"{cid[:16]}: org_domain differs"


def _malformed(raw: Any) -> str | None:
    if not isinstance(raw, dict):
        return "entry is not an object"
    if len(raw) > MAX_ENTRY_FIELDS:
        return "entry has too many fields"
    for name in ("canonical_id", "agent_label", "manifest_uri", "org_domain", "governance_zone"):
        v = raw.get(name)
        if not isinstance(v, str) or not v or len(v) > 512:
            return f"{name} missing or not a short string"
    tier = raw.get("trust_tier")
    if isinstance(tier, bool) or tier not in (1, 2, 3):
        return "trust_tier is not 1, 2 or 3"
    for name in ("behavioral_trust_score", "capability_match_score"):
        v = raw.get(name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            return f"{name} is not a number in [0, 1]"
    return None


def _upstream(prov: Any) -> dict[str, Any] | None:
    """A well-formed provenance block from a peer that itself federated."""
    if not isinstance(prov, dict):
        return None
    origin = prov.get("origin_service")
    route = prov.get("route")
    sig = prov.get("origin_signature")
    if not (isinstance(origin, str) and ANS_ID_RE.fullmatch(origin)):
        return None
    if not (
        isinstance(route, list)
        and 0 < len(route) <= MAX_FEDERATION_PATH
        and all(isinstance(r, str) and ANS_ID_RE.fullmatch(r) for r in route)
    ):
        return None
    if not isinstance(sig, dict) or not all(
        isinstance(sig.get(k), str) and len(sig[k]) <= 2048 for k in ("key_id", "value")
    ):
        return None
    clean = {k: str(sig.get(k, ""))[:2048] for k in ("key_id", "query_id", "generated_at", "value")}
    return {"origin_service": origin, "route": route, "origin_signature": clean}


def _path_of(value: Any, kid: str) -> tuple[str, ...]:
    """The peer's own federation_path (it starts with the peer)."""
    if isinstance(value, list) and all(
        isinstance(v, str) and ANS_ID_RE.fullmatch(v) for v in value
    ):
        path = tuple(value[:MAX_FEDERATION_PATH])
        return path if path and path[0] == kid else (kid, *path)
    return (kid,)


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo is not None else None
