"""Merging federated candidates with the local results: one entry per
canonical id (a locally indexed agent always wins), re-scored with the
caller's formula, sorted; and the ``federation_path`` of what was returned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .verify import Candidate

Score = Callable[[int, float, float], float]


@dataclass(frozen=True, slots=True)
class MergedResult:
    """A merged result before numbering: local (route ()) or federated."""

    rank_score: float
    canonical_id: str
    item: Mapping[str, Any]
    route: tuple[str, ...] = ()


def merge(
    local: list[MergedResult],
    known_local: Callable[[str], bool],
    candidates: Iterable[Candidate],
    score: Score,
) -> list[MergedResult]:
    """Local results plus federated candidates: one entry per canonical_id
    (a locally indexed agent always wins), re-scored with our formula,
    sorted by (rank_score desc, canonical_id). The caller cuts to ``limit``."""
    best: dict[str, tuple[tuple[float, int, int], MergedResult]] = {}
    for c in candidates:
        if known_local(c.canonical_id):
            continue
        s = score(c.trust_tier, c.behavioral_trust_score, c.capability_match_score)
        key = (-s, c.trust_tier, c.peer_index)
        held = best.get(c.canonical_id)
        if held is None or key < held[0]:
            best[c.canonical_id] = (key, MergedResult(s, c.canonical_id, c.item, c.route))
    merged = [*local, *(r for _, r in best.values())]
    merged.sort(key=lambda r: (-r.rank_score, r.canonical_id))
    return merged


def result_path(self_id: str, returned: Iterable[MergedResult]) -> list[str]:
    """This ANS first, then every ANS a returned entry travelled through."""
    path = [self_id]
    for r in returned:
        for ans_id in r.route:
            if ans_id not in path:
                path.append(ans_id)
    return path
