"""The DISCOVER ranking formula (discovery draft 3.5, DESIGN.md).

rank_score = w_tier * tier_norm + w_behavioral * behavioral_trust_score
           + w_capability * capability_match_score,
with tier_norm 1 -> 1.0, 2 -> 0.5, 3 -> 0.0. Scores are rounded to six
decimals so that identical inputs give identical bytes; ties are broken by
canonical_id (ascending).
"""

from __future__ import annotations

from .config import RankingWeights

TIER_NORM = {1: 1.0, 2: 0.5, 3: 0.0}
PRECISION = 6


def rank_score(
    weights: RankingWeights, trust_tier: int, behavioral: float, capability: float
) -> float:
    return round(
        weights.trust_tier * TIER_NORM[trust_tier]
        + weights.behavioral_trust * behavioral
        + weights.capability_match * capability,
        PRECISION,
    )


def sort_key(score: float, canonical_id: str) -> tuple[float, str]:
    return (-score, canonical_id)
