"""The relevance gate: which agents are *matches* for an intent.

The ranking formula (0.3 tier + 0.4 behavioral + 0.3 capability) orders a
match set; it does not choose it. The match set is decided here, from
capability evidence alone (DESIGN.md, "What counts as a match"):

1. **Calibration.** The matcher's fused score (``ans.index.scoring``) is turned into
   ``capability_match_score``: the estimated probability that the agent is the
   one the intent asks for, from a logistic model over the fused score, its
   margin to the query's best fused score, its ratio to it, and the same two
   kinds of evidence per component (context, capability, lexical).
   A compound intent's parts are calibrated too (a smaller model over the
   part's fused score), and an agent keeps ``max(p_whole, part_weight *
   p_part)``, so an agent that does one part well is still a match.
2. **The gate.** An agent is a match when its capability_match_score is at
   least ``min_relevance`` *and* its fused score is at least the raw floor
   ``min_capability_match`` (both predicates on published or evidence scores,
   so a caller can check them), *and* it is on the query's **shortlist**:
   among the agents that pass those and every hard gate (zone, tier, scope),
   the ``ceil(shortlist * limit)`` best by capability_match_score, ties
   included. Trust decides the order of a shortlist, never its membership:
   a capable agent cannot be crowded out by trusted agents that merely
   clear the threshold. Two kinds of agents are matches whatever their place
   on the shortlist: a fused score of at least ``strong_match`` (capable on
   its own evidence; its capability_match_score is also raised to
   ``min_relevance``), and a fused score within ``near_best`` of the best
   one (twenty replicas, or near-replicas, of the best agent all stay
   matches, and trust picks among them). Federation applies the published
   threshold to peers' results and the shortlist to the merged set.

The model has no rank feature on purpose: twenty replicas of one agent all
keep the probability of the first one (a rank feature would admit only a few).

The coefficients were fitted by ``bench/relevance_fit.py`` on the MetaTool
*example tasks* only (two folds: half of each tool's examples indexed, the
other half asked), never on the evaluation queries; the script reproduces
them (it refits, and keeps whichever of the refit and the earlier fit ranks
better on the folds) and chose ``min_relevance``, ``part_weight``,
``shortlist`` and ``strong_match`` by cross-fitting on the two folds
(bench/results/relevance_fit.json); ``near_best`` is a priori.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .index.scoring import Pass

Floats = npt.NDArray[np.float64]

# Component evidence the whole-intent model reads, in feature order.
MODEL_COMPONENTS = ("context", "capability", "lexical")


@dataclass(frozen=True, slots=True)
class RelevanceModel:
    """Logistic coefficients: ``whole`` over :func:`whole_features`, ``part``
    over :func:`part_features` (intercept first)."""

    name: str
    whole: tuple[float, ...]
    part: tuple[float, ...]


# bench/relevance_fit.py: the 2-fold fit over the MetaTool example tasks of 2026-11-25
# without its example terms -- on the folds it ranks better than a refit over these ten
# features (R@5 0.857 vs 0.846, nDCG@10 0.733 vs 0.711; see the script, step 3).
FITTED = RelevanceModel(
    name="metatool-example-tasks-2fold-v1-without-example",
    whole=(
        -4.438734178080966,
        5.159135316708747,
        5.153750256614242,
        3.2608247420014904,
        -1.952225875541248,
        -4.831285315559793,
        3.8640695992647314,
        -6.953469102278436,
        3.6834254186122357,
        -10.377991048355513,
    ),
    part=(
        -5.365396273938542,
        9.696837378743812,
        -16.810823060242193,
        2.169401085254245,
    ),
)


def _relative(values: Floats, best: float | None = None) -> list[Floats]:
    """``values``, the margin to their best and the ratio to their best."""
    if best is None:
        best = float(values.max()) if len(values) else 0.0
    ratio = values / best if best > 0 else np.zeros_like(values)
    return [values, best - values, ratio]


def part_features(fused: Floats, best: float | None = None) -> Floats:
    """(n, 4): intercept, fused score, margin to the best, ratio to the best
    (``best``: of every candidate, when ``fused`` holds some of them)."""
    return np.stack([np.ones_like(fused), *_relative(fused, best)], axis=1)


def whole_components(
    whole: Pass, n: int, rows: npt.NDArray[np.intp] | None = None
) -> list[Floats]:
    """The components the whole-intent model reads (an absent one is 0), of
    every candidate or of those at ``rows``."""
    size = n if rows is None else len(rows)
    if whole.ctx is None or whole.cap is None or whole.lexical is None:
        return [np.zeros(size) for _ in MODEL_COMPONENTS]
    ctx, cap, lexical = whole.ctx, whole.cap, whole.lexical
    if rows is not None:
        ctx, cap, lexical = ctx[rows], cap[rows], lexical[rows]
    return [  # a pass's similarities are clipped to [0, 1] already (scoring.fuse_texts)
        ctx.astype(np.float64),
        cap.astype(np.float64),
        lexical.astype(np.float64),
    ]


def whole_maxima(final: Floats, whole: Pass) -> Floats:
    """:func:`maxima` of ``final`` and :func:`whole_components` without building
    the components: each is a non-decreasing function of its input (a clip, a
    cast), so its best is the function of the best."""
    n = len(final)
    if n == 0 or whole.ctx is None or whole.cap is None or whole.lexical is None:
        return maxima(final, whole_components(whole, n))
    return np.array(
        [
            float(final.max()),
            min(max(float(whole.ctx.max()), 0.0), 1.0),
            min(max(float(whole.cap.max()), 0.0), 1.0),
            float(whole.lexical.max()),
        ]
    )


def maxima(final: Floats, components: list[Floats]) -> Floats:
    """The best final fused score and the best of each component."""
    return np.array([float(v.max()) if len(v) else 0.0 for v in (final, *components)])


def whole_features(final: Floats, components: list[Floats], best: Floats | None = None) -> Floats:
    """(n, 10): intercept, then value and margin to the best for the final fused
    score (plus its ratio to the best) and for each of :data:`MODEL_COMPONENTS`."""
    top = maxima(final, components) if best is None else best
    cols = [np.ones_like(final), *_relative(final, float(top[0]))]
    for c, b in zip(components, top[1:].tolist(), strict=True):
        cols += [c, b - c]
    return np.stack(cols, axis=1)


def _sigmoid(x: Floats) -> Floats:
    """The logistic function of ``x``, computed in place (``x`` is a fresh
    logit array of :func:`_linear`): the same operations as
    ``1 / (1 + exp(-clip(x, -60, 60)))`` without their four temporaries."""
    np.clip(x, -60.0, 60.0, out=x)
    np.negative(x, out=x)
    np.exp(x, out=x)
    x += 1.0
    np.reciprocal(x, out=x)
    return x


def _linear(
    coef: npt.NDArray[np.float64],
    value: Floats,
    best: float,
    components: list[Floats],
    tops: list[float],
) -> Floats:
    """The logit ``features @ coef`` of :func:`whole_features` (``components``
    given) or :func:`part_features` (none), folded per row into one linear form:
    ``c0 + c1 v + c2 (b - v) + c3 v / b + sum(a_j x_j + d_j (t_j - x_j))`` is
    ``C + K v + sum((a_j - d_j) x_j)``. No (n, 10) matrix is built, and a row's
    logit depends on its own values and the maxima only (a BLAS matrix-vector
    product rounds a row by where it falls in its blocks), so the candidates
    past the floor are scored alone, each within ~2e-15 of the matrix form."""
    c = coef.tolist()
    const = c[0] + c[2] * best
    slope = c[1] - c[2] + (c[3] / best if best > 0 else 0.0)
    z: Floats = value * slope
    for j, (x, t) in enumerate(zip(components, tops, strict=True)):
        a, d = c[4 + 2 * j], c[5 + 2 * j]
        const += d * t
        z += (a - d) * x
    z += const
    return z


def calibrate(
    model: RelevanceModel,
    final: Floats,
    whole: Pass,
    parts: list[Any],
    part_weight: float,
    best: Floats | None = None,
    rows: npt.NDArray[np.intp] | None = None,
) -> Floats:
    """capability_match_score of every candidate (unrounded, in [0, 1]).
    ``best``: the maxima to measure margins against (:func:`maxima`), when the
    candidates are not the whole query (one agent scored on its own).
    ``rows``: only these candidates' scores (in that order); margins are still
    measured to the best of every candidate, so each is what it is in the
    whole array."""
    n = len(final)
    if n == 0:
        return np.zeros(0)
    if best is None:
        best = whole_maxima(final, whole)
    components = whole_components(whole, n, rows)
    if rows is not None:
        final = final[rows]
    top = best.tolist()
    p = _sigmoid(_linear(np.asarray(model.whole), final, top[0], components, top[1:]))
    if part_weight > 0:
        coef = np.asarray(model.part)
        for part in parts:
            # fused scores are in [0, 1]: any() is max() > 0; the rows are cast
            # alone (the same float64 values as a cast of the whole array)
            peak = float(part.fused.max()) if len(part.fused) else 0.0
            if peak > 0:
                mine = np.asarray(part.fused if rows is None else part.fused[rows], np.float64)
                p = np.maximum(p, part_weight * _sigmoid(_linear(coef, mine, peak, [], [])))
    out: Floats = np.where(final > 0, p, 0.0)
    return out


# Logits estimated in float32 (:func:`reachable`) are compared this far below
# the threshold's: float32 errs by ~1e-5 on logits of this model's size, so no
# candidate that can pass is left out; a few more are scored exactly.
REACH_MARGIN = 1e-2


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def reachable(
    model: RelevanceModel,
    final: Floats,
    whole: Pass,
    parts: list[Any],
    part_weight: float,
    threshold: float,
    strong_match: float,
    best: Floats | None = None,
) -> npt.NDArray[np.bool_] | None:
    """A superset of the candidates whose capability_match_score (as
    :meth:`RelevanceGate.scores` gives it) can reach ``threshold``: every
    strong match, and those whose whole-intent logit or any part's, estimated
    in float32 (half the memory traffic of :func:`calibrate`, no exponential),
    is within :data:`REACH_MARGIN` of the threshold's. An exhaustive query
    scores ~5,000 of 10,000 agents past the raw floor and keeps ~300; only
    these are then scored exactly, each as in the whole array. None when it
    cannot tell (every candidate may pass)."""
    # a score that rounds to the threshold at 6 decimals passes (scoring.at_least)
    threshold -= 6e-7
    if (
        len(final) == 0
        or not 1e-9 < threshold < 1.0 - 1e-9
        or whole.ctx is None
        or whole.cap is None
        or whole.lexical is None
    ):
        return None
    f32 = np.float32
    top = (whole_maxima(final, whole) if best is None else best).tolist()
    c = model.whole
    const = c[0] + c[2] * top[0]
    slope = c[1] - c[2] + (c[3] / top[0] if top[0] > 0 else 0.0)
    v = final.astype(f32)
    z = v * f32(slope)
    for j, (x, t) in enumerate(zip((whole.ctx, whole.cap, whole.lexical), top[1:], strict=True)):
        a, d = c[4 + 2 * j], c[5 + 2 * j]
        const += d * t
        z += f32(a - d) * np.asarray(x, dtype=f32)
    z += f32(const)
    keep: npt.NDArray[np.bool_] = z >= f32(_logit(threshold) - REACH_MARGIN)
    keep |= v >= f32(strong_match - 1e-6)  # raised to the threshold
    if part_weight > 0 and threshold / part_weight < 1.0 - 1e-9:
        floor = f32(_logit(threshold / part_weight) - REACH_MARGIN)
        cp = model.part
        for part in parts:
            peak = float(part.fused.max()) if len(part.fused) else 0.0
            if peak > 0:
                zp = np.asarray(part.fused, dtype=f32) * f32(cp[1] - cp[2] + cp[3] / peak)
                keep |= zp >= floor - f32(cp[0] + cp[2] * peak)
    return keep


GATES = ("calibrated", "floor")


@dataclass(frozen=True, slots=True)
class RelevanceGate:
    """What counts as a match ([discovery] in the config). ``kind`` "floor" is
    the gate before calibration (every agent whose fused score reaches
    ``min_capability_match``, the fused score published as it is); it is kept
    for comparison and for operators who rank a catalog of near-equals."""

    kind: str = "calibrated"
    min_relevance: float = 0.005  # least capability_match_score of a match
    min_capability_match: float = 0.05  # least fused score of a match (the raw floor)
    part_weight: float = 0.1  # weight of a compound intent's best part
    # A fused score this high is capable on its own evidence, however much
    # better another agent matches: its capability_match_score is raised to
    # min_relevance and it is a match whatever its place on the shortlist.
    strong_match: float = 0.35
    # The shortlist: the ceil(shortlist * limit) agents with the best
    # capability_match_score (ties included); 0 turns it off.
    shortlist: float = 0.5
    # A fused score at least this share of the best fused score is a match
    # whatever its place on the shortlist (replicas of the best agent).
    near_best: float = 0.9
    model: RelevanceModel = FITTED

    def scores(
        self,
        final: Floats,
        whole: Pass,
        parts: list[Any],
        best: Floats | None = None,
        rows: npt.NDArray[np.intp] | None = None,
    ) -> Floats:
        """capability_match_score of every candidate under this gate (unrounded);
        of the candidates at ``rows`` only, when given (:func:`calibrate`)."""
        p = calibrate(self.model, final, whole, parts, self.part_weight, best, rows)
        mine = final if rows is None else final[rows]
        out: Floats = np.where(mine >= self.strong_match, np.maximum(p, self.min_relevance), p)
        return out

    def reachable(
        self, final: Floats, whole: Pass, parts: list[Any], best: Floats | None = None
    ) -> npt.NDArray[np.bool_] | None:
        """:func:`reachable` under this gate: which candidates :meth:`scores`
        must score exactly (None: every one)."""
        if self.kind != "calibrated":
            return None
        return reachable(
            self.model, final, whole, parts, self.part_weight, self.min_relevance,
            self.strong_match, best,
        )

    def admits(self, capability_match_score: float) -> bool:
        """The threshold on a published score (a peer's result, the merged set)."""
        return capability_match_score >= self.threshold

    def shortlist_size(self, limit: int) -> int | None:
        """How many agents the shortlist of a request with ``limit`` holds
        (ties aside); None when this gate has no shortlist."""
        if self.kind != "calibrated" or self.shortlist <= 0:
            return None
        return max(1, math.ceil(self.shortlist * limit - 1e-9))

    def shortlisted(self, cms: Floats, fused: Floats | None, limit: int) -> npt.NDArray[np.bool_]:
        """Which of these candidates (every one past the threshold and the hard
        gates) are on the shortlist: the :meth:`shortlist_size` best published
        capability_match_scores, ties included, plus every strong or near-best
        match (``fused``: their fused scores; None for a merged set, whose
        peers publish no fused score)."""
        keep = np.ones(len(cms), dtype=bool)
        size = self.shortlist_size(limit)
        if size is None or len(cms) <= size:
            return keep
        published = np.round(cms, 6)
        cutoff = float(np.partition(published, len(published) - size)[len(published) - size])
        keep = np.asarray(published >= cutoff, dtype=bool)
        if fused is not None:
            keep |= fused >= self.strong_match
            keep |= fused >= self.near_best * float(fused.max())
        return keep

    @property
    def threshold(self) -> float:
        """The least published capability_match_score of a match."""
        return self.min_relevance if self.kind == "calibrated" else self.min_capability_match

    def describe(self, limit: int | None = None) -> dict[str, Any]:
        """The gate as it is reported inside every signed result with an intent
        (``limit``: the request's, which sizes the shortlist)."""
        if self.kind == "floor":
            return {"gate": "floor", "min_capability_match_score": self.min_capability_match}
        out: dict[str, Any] = {
            "gate": "calibrated",
            "model": self.model.name,
            "min_capability_match_score": self.min_relevance,
            "min_fused_score": self.min_capability_match,
            "strong_match": self.strong_match,
            "part_weight": self.part_weight,
            "shortlist": self.shortlist,
            "near_best": self.near_best,
        }
        size = self.shortlist_size(limit) if limit is not None else None
        if size is not None:
            out["shortlist_size"] = size
        return out
