"""Scoring: how the components of one query text are fused into a score, and
the :class:`QueryScores` of an intent with the evidence that explains them.

Owns the fusion weights (:data:`WEIGHTS`), the example floor, the compound
intent mix, the per-text :class:`Pass` (fused score plus the components it was
fused from), the IDF-weighted tag component, and everything a caller asks of a
query's result: scores above a floor, the relevance gate's matches, one
agent's score and its evidence (components, matched tags, matched examples).
The index (:mod:`ans.index.capability`) supplies the component arrays.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..lexical import LexicalScores
from ..postings import SlotPostings
from ..ranking import PRECISION
from ..relevance import RelevanceGate, maxima, whole_components, whole_maxima
from ..text import candidate_tags
from .embedder import Vectors
from .slots import Slots, SlotTable

if TYPE_CHECKING:
    from .capability import CapabilityIndex

# The query tags a text names that some agent holds, each with its holders' slots.
TagHits = list[tuple[str, npt.NDArray[np.int32]]]
# Per query text: the dense tag component (None: no known tag named) and its hits.
TagPasses = list[tuple[Vectors | None, TagHits]]
# Per query text: BM25 scores over slots, read where asked, and the slots the postings touched.
LexicalHits = list[LexicalScores]

# Fusion weights. context/capability/lexical were fitted by leave-one-out over
# the MetaTool *example tasks* only (never the evaluation queries); tag is fixed
# a priori (MetaTool has no tags). See docs/matching.md. Published examples are
# matched through the capability vector and BM25 (both read the "examples"
# facet); the example component -- an agent's best single example -- is
# evidence, not fused: with it fused at 0.2, R@5 on MetaTool was 0.836, without
# it 0.846 (mixed trust, through the server), and it cost a second FAISS search
# and ~7,000 row gathers per query at 100k agents (docs/query-profile.md).
WEIGHTS: dict[str, float] = {
    "context": 0.2,
    "capability": 0.2,
    "lexical": 0.4,
    "tag": 0.2,
}
# The components an answer's evidence reports (``score_components``).
COMPONENTS = ("tag", "context", "capability", "example", "lexical")
# Key order of ``score_components`` in an answer.
_EVIDENCE_ORDER = {name: k for k, name in enumerate((*COMPONENTS, "fused", "segment"))}
# Example similarities at or below this are "no match" (0) — a priori.
EXAMPLE_FLOOR = 0.2


def example_value(sims: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Example similarities as the example component counts them: at or below
    :data:`EXAMPLE_FLOOR` 0, else capped at 1."""
    return np.where(sims > EXAMPLE_FLOOR, np.minimum(sims, 1.0), 0.0).astype(np.float32)


# Weight of the whole intent vs its best part for compound intents — a priori.
SEGMENT_MIX = 0.5
# Candidates from which the relevance gate first estimates who can reach its
# threshold (relevance.reachable) before calibrating them exactly.
REACH_MIN = 4096
MAX_EVIDENCE_EXAMPLES = 3


@dataclass(slots=True)
class Pass:
    """One text (the whole intent or one part) over the candidates: the fused
    score, and the inputs it was fused from, to explain any one agent."""

    fused: Vectors
    tags: TagHits  # matched query tags and their holders
    ctx: Vectors | None = None  # None: an empty text, nothing scored; clipped to [0, 1]
    cap: Vectors | None = None
    lexical: Vectors | None = None
    tag: Vectors | None = None
    has_tags: npt.NDArray[np.bool_] | None = None

    def components_at(self, i: int) -> dict[str, float]:
        """The components of candidate ``i`` (unrounded), as :func:`fuse`
        weighed them; a component the agent does not publish is absent."""
        if self.ctx is None or self.cap is None or self.lexical is None:
            return {}
        out = {
            "context": float(self.ctx[i]),  # clipped to [0, 1] already (fuse_texts)
            "capability": float(self.cap[i]),
            "lexical": float(self.lexical[i]),
        }
        if self.tag is not None and self.has_tags is not None and self.has_tags[i]:
            out["tag"] = float(self.tag[i])
        return out


@dataclass(slots=True)
class QueryScores:
    """The scores of one intent over its candidate agents (every indexed agent
    in exact mode), with what is needed to explain any of them.

    ``known_ids`` are the candidates' canonical ids; None when the query was
    asked for slots only (``lazy_ids``): :attr:`ids` then reads them from
    ``table`` on first use, which is right only while the index has not
    changed since the query (the caller holds the lock that keeps it so)."""

    final: Vectors
    known_ids: list[str | None] | None
    whole: Pass
    parts: list[Pass] = field(default_factory=list)
    part_best: Vectors | None = None
    exhaustive: bool = True
    slots: Slots = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    vectors: Vectors = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    index: CapabilityIndex | None = None
    domains: tuple[str, ...] | None = None
    texts: tuple[str, ...] = ()
    # Margins are measured to these maxima instead of the candidates' own (one agent scored alone).
    reference: npt.NDArray[np.float64] | None = None
    table: SlotTable | None = None
    _pos: dict[str, int] | None = None
    _cms: npt.NDArray[np.float64] | None = None
    _gate: RelevanceGate | None = None

    @property
    def ids(self) -> list[str | None]:
        """The candidates' canonical ids, in candidate order (None: a freed slot)."""
        if self.known_ids is None:
            assert self.table is not None
            self.known_ids = self.table.ids_at(self.slots, self.exhaustive)
        return self.known_ids

    def _position(self, canonical_id: str) -> int | None:
        if self._pos is None:
            self._pos = {cid: i for i, cid in enumerate(self.ids) if cid is not None}
        return self._pos.get(canonical_id)

    def above(self, floor: float) -> dict[str, float]:
        """capability_match_score of every candidate scoring at least ``floor``."""
        ids, values = self.above_arrays(floor)
        return {c: round(v, PRECISION) for c, v in zip(ids, values.tolist(), strict=True)}

    def above_arrays(self, floor: float) -> tuple[list[str], npt.NDArray[np.float64]]:
        """The candidates whose capability_match_score is at least ``floor``, as
        (canonical ids, unrounded scores clipped to [0, 1]); ``round(score, 6)``
        of an entry is its capability_match_score."""
        scores = np.clip(self.final, 0.0, 1.0).astype(np.float64)
        ids, picked = self._picked(at_least(scores, floor))
        return ids, scores[picked]

    def matches(
        self, gate: RelevanceGate
    ) -> tuple[list[str], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """The candidates past the relevance gate's thresholds (:mod:`ans.relevance`;
        its shortlist is applied after the hard gates, by the caller), as
        (canonical ids, unrounded capability_match_scores, fused scores)."""
        keep, cms, raw = self._gated(gate)
        ids, picked = self._picked(keep)
        return ids, cms[picked], raw[picked]

    def match_slots(
        self, gate: RelevanceGate
    ) -> tuple[Slots, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """:meth:`matches` as the candidates' slots in the matcher's slot table
        (no canonical id is read), ascending, with the same scores."""
        keep, cms, raw = self._gated(gate)
        pos = np.nonzero(keep)[0]
        return self.slots[pos], cms[pos], raw[pos]

    def _gated(
        self, gate: RelevanceGate
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Which candidates pass the gate's thresholds, with every candidate's
        capability_match_score and fused score (both unrounded, in [0, 1])."""
        raw = np.clip(self.final, 0.0, 1.0).astype(np.float64)
        floor = at_least(raw, gate.min_capability_match)
        if gate.kind == "floor":
            return floor, raw, raw
        if self._cms is not None and self._gate == gate:
            cms = self._cms
        else:
            # Only the candidates past the raw floor that can reach the gate's
            # threshold (estimated first, relevance.reachable) can be matches:
            # only theirs is calibrated (each as in the whole array); the
            # others' stay 0 here (calibrated() still gives every candidate's).
            # Fused scores are in [0, 1], so ``raw`` is ``final`` as float64.
            # The estimate pays for itself on many candidates only (an
            # exhaustive query's): on ~1,400 it cost more than it saved.
            best = self.reference if self.reference is not None else whole_maxima(raw, self.whole)
            reach = (
                gate.reachable(raw, self.whole, self.parts, best) if len(raw) >= REACH_MIN else None
            )
            rows = np.flatnonzero(floor if reach is None else floor & reach)
            if 2 * len(rows) > len(raw):
                # Most pass (an exhaustive query): score every candidate in place
                # rather than gather and scatter the rows (a row's score depends
                # on its own values and the maxima only: the same numbers).
                cms = gate.scores(raw, self.whole, self.parts, best)
                cms[~floor] = 0.0
                return floor & at_least(cms, gate.min_relevance), cms, raw
            cms = np.zeros(len(raw), dtype=np.float64)
            cms[rows] = gate.scores(raw, self.whole, self.parts, best, rows)
            keep = np.zeros(len(raw), dtype=bool)
            keep[rows] = at_least(cms[rows], gate.min_relevance)  # the others are below the floor
            return keep, cms, raw
        keep = floor & at_least(cms, gate.min_relevance)
        return keep, cms, raw

    def calibrated(self, gate: RelevanceGate) -> npt.NDArray[np.float64]:
        """capability_match_score of every candidate under ``gate`` (cached)."""
        if gate.kind == "floor":
            return np.clip(self.final, 0.0, 1.0).astype(np.float64)
        if self._cms is None or self._gate != gate:
            self._cms = gate.scores(
                self.final.astype(np.float64), self.whole, self.parts, self.reference
            )
            self._gate = gate
        return self._cms

    def _picked(self, keep: npt.NDArray[np.bool_]) -> tuple[list[str], npt.NDArray[np.intp]]:
        """The ids of the kept candidates and their positions (a slot freed
        while the query ran is left out)."""
        picked = np.nonzero(keep)[0]
        if len(picked) == 0:
            return [], picked
        table = self.ids
        ids: list[str | None] = (
            list(operator.itemgetter(*picked.tolist())(table))
            if len(picked) > 1
            else [table[int(picked[0])]]
        )
        if None in ids:
            live = np.array([c is not None for c in ids], dtype=bool)
            return [c for c in ids if c is not None], picked[live]
        return ids, picked  # type: ignore[return-value]  # no None left

    def score(self, canonical_id: str, gate: RelevanceGate | None = None) -> float:
        """capability_match_score of one indexed agent whatever the gate (0 if
        absent): calibrated under ``gate`` (margins to this query's best), else
        the fused score."""
        i = self._position(canonical_id)
        if i is not None:
            values = self.calibrated(gate) if gate is not None else self.final
            return round(min(1.0, max(0.0, float(values[i]))), PRECISION)
        if self.index is None:
            return 0.0
        extra = self.index.query(
            self.texts[0] if self.texts else "", self.domains, only=[canonical_id]
        )
        if gate is not None and gate.kind == "calibrated":
            extra.reference = self.best_values()
        return extra.score(canonical_id, gate) if extra.ids else 0.0

    def best_values(self) -> npt.NDArray[np.float64]:
        """The best fused score and components of this query (margins are measured to them)."""
        if self.reference is not None:
            return self.reference
        n = len(self.final)
        return maxima(self.final.astype(np.float64), whole_components(self.whole, n))

    def evidence(self, canonical_id: str) -> dict[str, Any]:
        """score_components, matched_tags, matched_examples of one scored agent."""
        i = self._position(canonical_id)
        if i is None or self.index is None:
            return {"score_components": {}, "matched_tags": [], "matched_examples": []}
        raw = self.whole.components_at(i)
        comps = {name: round(raw[name], PRECISION) for name in COMPONENTS if name in raw}
        comps["fused"] = round(min(1.0, max(0.0, float(self.final[i]))), PRECISION)
        if self.part_best is not None:
            comps["segment"] = round(float(self.part_best[i]), PRECISION)
        slot = int(self.slots[i])
        tags: set[str] = set()
        for p in (self.whole, *self.parts):
            for tag, holders in p.tags:
                if np.any(holders == slot):
                    tags.add(tag)
        matched: list[dict[str, Any]] = []
        if self.domains is None or "examples" in self.domains:
            example, matched = self.index.example_evidence(canonical_id, slot, self.vectors)
            if example is not None:
                comps["example"] = round(example, PRECISION)
        return {
            "score_components": dict(sorted(comps.items(), key=lambda kv: _EVIDENCE_ORDER[kv[0]])),
            "matched_tags": sorted(tags),
            "matched_examples": matched,
        }


def at_least(values: npt.NDArray[np.float64], floor: float) -> npt.NDArray[np.bool_]:
    """``round(value, 6) >= floor`` for every value, with Python's rounding
    deciding the values within rounding distance of the floor."""
    ok = values >= floor - 1e-7
    for i in np.nonzero(np.abs(values - floor) <= 2e-6)[0].tolist():
        ok[i] = round(float(values[i]), PRECISION) >= floor
    return ok


def fuse(
    ctx: Vectors,
    cap: Vectors,
    lexical: Vectors,
    tag: Vectors | None,
    has_tags: npt.NDArray[np.bool_],
    tags: TagHits,
    empty: bool,
    sums: Vectors | None,
) -> Pass:
    """The weighted mean of the components over the weights of the components
    each agent has (``sums``: :func:`weight_sums`, used when the text names a
    known tag). ``ctx`` and ``cap`` are similarities clipped to [0, 1]."""
    n = len(ctx)
    if empty:
        return Pass(np.zeros(n, dtype=np.float32), [])
    total = WEIGHTS["context"] * ctx
    total += WEIGHTS["capability"] * cap
    total += WEIGHTS["lexical"] * lexical
    if tag is not None:
        assert sums is not None
        total += WEIGHTS["tag"] * np.where(has_tags, tag, 0.0)
        total /= sums
    else:
        total /= BASE_WEIGHT
    fused = np.clip(total, 0.0, 1.0, out=total).astype(np.float32, copy=False)
    return Pass(fused, tags, ctx, cap, lexical, tag, has_tags)


BASE_WEIGHT = np.float32(WEIGHTS["context"] + WEIGHTS["capability"] + WEIGHTS["lexical"])


def weight_sums(has_tags: npt.NDArray[np.bool_]) -> Vectors:
    """Per candidate, the sum of the weights of the components it has when the
    text names a known tag (without one every agent has the same three)."""
    out: Vectors = np.full(len(has_tags), BASE_WEIGHT, dtype=np.float32)
    out += np.float32(WEIGHTS["tag"]) * has_tags
    return out


def tag_scores(tags: SlotPostings, live: int, text: str, n: int) -> tuple[Vectors | None, TagHits]:
    """IDF-weighted share of the intent's known tags that each agent carries
    (dense over ``n`` slots; ``live`` agents indexed), and the matched tags
    with their holders."""
    held = []
    key_id = tags.key_id
    for t in sorted(t for t in candidate_tags(text) if t in key_id):  # few are known tags
        holders = tags.postings(key_id[t])[0]
        if len(holders):
            held.append((t, holders))
    if not held:
        return None, []
    n_agents = max(live, 1)
    idf = {t: float(np.log(1.0 + n_agents / len(h))) for t, h in held}
    denom = sum(idf.values())
    out = np.zeros(n, dtype=np.float32)
    for t, holders in held:
        out[holders[holders < n]] += idf[t] / denom
    return np.minimum(out, 1.0), held


def fuse_texts(
    q: Vectors,
    ctx: Vectors,
    cap: Vectors,
    lex: LexicalHits,
    has_tags: npt.NDArray[np.bool_],
    tag_passes: TagPasses,
    pick: slice | Slots,
) -> list[Pass]:
    """One :class:`Pass` per query text (column ``i`` of the component arrays,
    which are over the candidates; ``pick`` selects them from the dense
    lexical and tag scores)."""
    # the similarities clipped to [0, 1] once for every text (fuse and the
    # relevance model read them clipped)
    ctx = np.clip(ctx, 0.0, 1.0)
    cap = np.clip(cap, 0.0, 1.0)
    # the weight sums are only read by a text that names a known tag
    sums = weight_sums(has_tags) if any(d is not None for d, _ in tag_passes) else None
    nonzero = np.asarray(q.any(axis=1))  # an empty text's vector is all zero
    passes = []
    for i in range(len(q)):
        tag_dense, tag_list = tag_passes[i]
        passes.append(
            fuse(
                ctx[:, i],
                cap[:, i],
                lex[i].at(pick),
                tag_dense[pick] if tag_dense is not None else None,
                has_tags,
                tag_list,
                not nonzero[i],
                sums,
            )
        )
    return passes


def combine(passes: list[Pass], ids: list[str | None] | None, **common: Any) -> QueryScores:
    """The scores of an intent from its passes (the whole intent first, then its
    parts): a compound intent mixes the whole with its best part."""
    whole = passes[0]
    if len(passes) > 1:
        # the element-wise max of the parts, pairwise (np.max over a stacked copy
        # costs ~10x more: a reduction along the short axis)
        part_best = passes[1].fused
        for p in passes[2:]:
            part_best = np.maximum(part_best, p.fused)
        final = (1.0 - SEGMENT_MIX) * whole.fused + SEGMENT_MIX * part_best
        return QueryScores(final, ids, whole, passes[1:], part_best, **common)
    return QueryScores(whole.fused, ids, whole, **common)
