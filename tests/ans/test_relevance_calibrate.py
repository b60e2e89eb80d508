"""The relevance calibration as the hot path computes it (ans.relevance):
per row, from the row's own values and the maxima of every candidate, so the
candidates past the raw floor can be scored alone; and the same model as the
(n, 10) feature matrix bench/relevance_fit.py fits it on."""

from __future__ import annotations

import numpy as np
import pytest

from ans.index.scoring import Pass, at_least
from ans.relevance import (
    FITTED,
    RelevanceGate,
    _sigmoid,
    calibrate,
    maxima,
    part_features,
    whole_components,
    whole_features,
    whole_maxima,
)


def random_pass(rng: np.random.Generator, n: int) -> Pass:
    def f32() -> np.ndarray:
        return (rng.standard_normal(n) * 0.6 + 0.2).astype(np.float32)

    # a pass holds its similarities clipped to [0, 1] (scoring.fuse_texts)
    return Pass(np.clip(f32(), 0, 1), [], np.clip(f32(), 0, 1), np.clip(f32(), 0, 1), np.abs(f32()))


def matrix_form(final: np.ndarray, whole: Pass, parts: list[Pass], weight: float) -> np.ndarray:
    n = len(final)
    p = _sigmoid(whole_features(final, whole_components(whole, n)) @ np.asarray(FITTED.whole))
    for part in parts:
        fused = np.asarray(part.fused, dtype=np.float64)
        if fused.any():
            q = _sigmoid(part_features(fused) @ np.asarray(FITTED.part))
            p = np.maximum(p, weight * q)
    return np.where(final > 0, p, 0.0)


@pytest.mark.parametrize("seed", range(4))
def test_rows_alone_score_as_in_the_whole_array(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n = int(rng.integers(1, 80))
        whole = random_pass(rng, n)
        parts = [Pass(np.clip(rng.standard_normal(n), 0, 1).astype(np.float32), [])]
        final = np.clip(rng.standard_normal(n), -0.1, 1.0)
        rows = np.flatnonzero(rng.random(n) < 0.4)
        full = calibrate(FITTED, final, whole, parts, 0.1)
        alone = calibrate(FITTED, final, whole, parts, 0.1, rows=rows)
        assert np.array_equal(full[rows], alone)  # bit for bit
        assert np.abs(full - matrix_form(final, whole, parts, 0.1)).max() < 1e-12
        assert np.array_equal(whole_maxima(final, whole), maxima(final, whole_components(whole, n)))


def test_gate_scores_of_rows_keep_the_strong_match_raise() -> None:
    rng = np.random.default_rng(7)
    n = 50
    whole = random_pass(rng, n)
    final = np.clip(rng.standard_normal(n), 0.0, 1.0)
    gate = RelevanceGate()
    rows = np.flatnonzero(final >= gate.min_capability_match)
    assert np.array_equal(gate.scores(final, whole, [])[rows], gate.scores(final, whole, [], rows=rows))


@pytest.mark.parametrize("estimate_first", [False, True])
@pytest.mark.parametrize("share_past_floor", [0.2, 0.9])
def test_gated_matches_the_whole_array_either_way(
    share_past_floor: float, estimate_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QueryScores scores the candidates past the raw floor alone when they are
    few and every candidate in place when most pass: both give the whole
    array's scores for the matches, 0 below the floor, and the same matches."""
    from ans.index import scoring
    from ans.index.scoring import QueryScores, at_least

    # relevance.reachable first (as on an exhaustive query's many candidates), or not
    monkeypatch.setattr(scoring, "REACH_MIN", 0 if estimate_first else 10**9)
    rng = np.random.default_rng(11)
    gate = RelevanceGate()
    for _ in range(50):
        n = int(rng.integers(20, 200))
        whole = random_pass(rng, n)
        past = rng.random(n) < share_past_floor
        final = np.where(past, rng.uniform(0.06, 1.0, n), rng.uniform(0.0, 0.04, n))
        final = final.astype(np.float32)
        parts = [Pass(np.clip(rng.standard_normal(n), 0, 1).astype(np.float32), [])]
        scores = QueryScores(final, None, whole, parts)
        keep, cms, raw = scores._gated(gate)
        everything = gate.scores(final.astype(np.float64), whole, parts)
        floor = at_least(raw, gate.min_capability_match)
        assert np.array_equal(floor, past)
        # the matches' scores, bit for bit (the others past the floor may stay 0:
        # those that cannot reach the threshold are not calibrated)
        assert np.array_equal(cms[keep], everything[keep])
        assert not cms[~floor].any()
        assert np.array_equal(keep, floor & at_least(everything, gate.min_relevance))


def test_the_in_place_logistic_is_the_formula_bit_for_bit() -> None:
    """_sigmoid overwrites its (fresh) logit array; the numbers stay those of
    ``1 / (1 + exp(-clip(x, -60, 60)))``, saturated logits included."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(5000) * 8.0, [-1e3, -60.0, -0.0, 0.0, 60.0, 1e3]])
    want = 1.0 / (1.0 + np.exp(-np.clip(x, -60.0, 60.0)))
    got = _sigmoid(x.copy())
    assert got.dtype == np.float64
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))


@pytest.mark.parametrize("seed", range(4))
def test_reachable_holds_every_candidate_that_can_pass_and_leaves_out_most_others(
    seed: int,
) -> None:
    rng = np.random.default_rng(100 + seed)
    kept = total = 0
    for _ in range(200):
        n = int(rng.integers(1, 400))
        whole = random_pass(rng, n)
        parts = [Pass(np.clip(rng.standard_normal(n), 0, 1).astype(np.float32), [])
                 for _ in range(int(rng.integers(0, 3)))]
        final = np.clip(rng.standard_normal(n) * 0.3 + 0.1, 0.0, 1.0)
        exact = RelevanceGate(part_weight=float(rng.choice([0.0, 0.1, 0.5]))).scores(
            final, whole, parts
        )
        # thresholds among the scores themselves: many candidates sit at the edge
        for threshold in {float(np.quantile(exact, q)) for q in (0.5, 0.9, 0.99)}:
            if not 1e-6 < threshold < 1 - 1e-6:
                continue
            gate = RelevanceGate(min_relevance=threshold, part_weight=0.1)
            cms = gate.scores(final, whole, parts)
            reach = gate.reachable(final, whole, parts)
            assert reach is not None
            passes = at_least(cms, threshold)
            assert not np.any(passes & ~reach), "a candidate that passes was left out"
            kept += int(reach.sum())
            total += n
    assert kept < 0.6 * total  # it does leave candidates out


def test_reachable_cannot_tell_without_components_or_for_the_floor_gate() -> None:
    final = np.linspace(0, 1, 5)
    bare = Pass(final.astype(np.float32), [])
    assert RelevanceGate().reachable(final, bare, []) is None
    whole = random_pass(np.random.default_rng(0), 5)
    assert RelevanceGate(kind="floor").reachable(final, whole, []) is None
    assert RelevanceGate().reachable(final, whole, []) is not None
