"""Routing alternatives (discovery draft 6.1): DISCOVER's ``preferred_agent``.

When a DISCOVER names a preferred agent, ``results[0]`` is the *routing
position*: the preferred agent itself when it is indexed, passes the
caller's gates and is available; otherwise the most equivalent alternative,
marked with ``routing_reason``, ``equivalent_confidence`` and
``alternative_to``. The signed result carries a ``routing`` summary.

This module holds the pure decisions — why the preferred agent cannot be
routed to, and which candidate replaces it; :meth:`ans.core.discovery.Discovery.route`
supplies the registry, the store, the gates and the capability matcher.

Never leak an agent the caller may not see: a preferred agent whose zone
is restricted and not granted to the caller is reported exactly as an
unknown one (``not_indexed``, no alternative), whatever its state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

# routing_reason codes (besides availability marks, which are passed through).
NOT_INDEXED = "not_indexed"
BELOW_THRESHOLDS = "below_thresholds"
# Store lifecycle_state of an agent that is out of the index -> routing_reason.
STATE_REASONS: Mapping[str, str] = {
    "Suspended": "suspended",
    "Revoked": "revoked",
    "Deprecated": "deprecated",
    "Removed": "removed",  # dropped for index freshness
}
# Availability marks set by the status poller (AnsService.mark_availability).
AVAILABILITY_REASONS = frozenset({"at_capacity", "not_responding", "suspended"})
ROUTING_REASONS = frozenset(
    {NOT_INDEXED, BELOW_THRESHOLDS, *STATE_REASONS.values(), *AVAILABILITY_REASONS}
)
# Fields an alternative in results[0] carries; a merging ANS sets them itself.
ROUTING_ITEM_FIELDS = ("routing_reason", "equivalent_confidence", "alternative_to")


@dataclass(frozen=True, slots=True)
class PreferredState:
    """What this ANS knows about the preferred agent, as seen by one caller."""

    known: bool  # a store row or an index entry exists
    zone_granted: bool  # the caller may see the agent's governance zone
    indexed: bool  # in the live registry
    unavailable: str | None  # availability mark, when indexed
    passes_gates: bool  # indexed and passes the caller's tier/score/zone/org gates
    stored_state: str | None  # store lifecycle_state, when a row exists


def routing_reason(state: PreferredState) -> str | None:
    """Why the preferred agent cannot be results[0], or None when it can.

    ``not_indexed`` for unknown agents *and* for agents in a restricted zone
    the caller lacks — the two are indistinguishable by construction."""
    if not state.known or not state.zone_granted:
        return NOT_INDEXED
    if state.indexed:
        if state.unavailable is not None:
            return state.unavailable
        if not state.passes_gates:
            return BELOW_THRESHOLDS
        return None
    if state.stored_state is None:
        return NOT_INDEXED
    # An Active row that is not (or no longer) indexed, or a state we do not
    # know, is simply not in the index.
    return STATE_REASONS.get(state.stored_state, NOT_INDEXED)


T = TypeVar("T")


def choose_alternative(
    candidates: Iterable[T],
    canonical_id: Callable[[T], str],
    rank_score: Callable[[T], float],
    equivalence: Mapping[str, float],
    floor: float,
) -> tuple[T, float] | None:
    """The most equivalent candidate at or above ``floor``; ties go to the
    higher rank_score, then the smaller canonical_id (deterministic)."""
    best: tuple[tuple[float, float, str], T, float] | None = None
    for c in candidates:
        cid = canonical_id(c)
        conf = equivalence.get(cid)
        if conf is None or conf < floor:
            continue
        key = (-conf, -rank_score(c), cid)
        if best is None or key < best[0]:
            best = (key, c, conf)
    return None if best is None else (best[1], best[2])


@dataclass(frozen=True, slots=True)
class Routing:
    """The routing decision of one DISCOVER."""

    preferred_agent: str
    available: bool
    reason: str | None = None
    alternative: str | None = None
    confidence: float | None = None

    def summary(self) -> dict[str, Any]:
        """The signed result's ``routing`` object."""
        out: dict[str, Any] = {
            "preferred_agent": self.preferred_agent,
            "available": self.available,
        }
        if self.reason is not None:
            out["routing_reason"] = self.reason
        if self.alternative is not None:
            out["alternative"] = self.alternative
            out["equivalent_confidence"] = self.confidence
        return out

    def item_fields(self) -> dict[str, Any]:
        """The fields results[0] carries when it is an alternative."""
        if self.alternative is None:
            return {}
        return {
            "routing_reason": self.reason,
            "equivalent_confidence": self.confidence,
            "alternative_to": self.preferred_agent,
        }
