"""The candidate top-k of the approximate path (ans.index.approximate): its
sorted de-duplication and the gathers it reads scores with give exactly what
np.unique and fancy indexing gave."""

from __future__ import annotations

import numpy as np

from ans.index.approximate import sorted_unique, top_touched
from ans.lexical import LexicalScores


def test_sorted_unique_is_np_unique() -> None:
    rng = np.random.default_rng(3)
    for size in [0, 1, 2, 3, 17, 1024, 5000]:
        for dtype in (np.int32, np.int64):
            values = rng.integers(0, max(size // 3, 1), size).astype(dtype)
            got = sorted_unique(values)
            want = np.unique(values)
            assert got.dtype == want.dtype
            assert np.array_equal(got, want)


def _hits(rng: np.random.Generator, n: int, sizes: list[int], shuffled: int = -1) -> list:
    """Words' (slots, contributions, ascending) as LexicalIndex.score_many gives
    them; word ``shuffled`` has its slots out of order (postings added one at a
    time since the last compaction)."""
    out = []
    for i, size in enumerate(sizes):
        slots = np.sort(rng.choice(n, size, replace=False)).astype(np.int32)
        if i == shuffled:
            slots = rng.permutation(slots)
        contrib = rng.random(size) * rng.choice([1e-3, 1.0, 9.0])
        out.append((slots, contrib, i != shuffled))
    return out


def test_scores_at_slots_are_the_dense_scores_there() -> None:
    rng = np.random.default_rng(4)
    hits = _hits(rng, 1000, [300, 700, 50])
    lex = LexicalScores(1000, hits, 3.5)
    dense = lex.dense()
    touched = lex.touched
    assert len(touched) == 1050
    assert np.array_equal(lex.at(touched), dense[touched])
    assert np.array_equal(lex.at(np.arange(10, 20)), dense[10:20])
    assert np.array_equal(lex.at(slice(5, 50)), dense[5:50])
    assert not LexicalScores(1000, [], 1.0).at(np.arange(7)).any()


def test_scores_read_at_candidates_alone_are_the_dense_bits() -> None:
    """A part's BM25 at a few candidates of many postings is read per word by
    binary search, never summed over every slot: the same additions in the
    same word order as the bincount, so the same bits, slots absent or not."""
    rng = np.random.default_rng(8)
    n = 200_000
    for shuffled in (-1, 1):
        # a word with no posting left (a capability_domains mask dropped them all)
        hits = _hits(rng, n, [90_000, 40_000, 0, 120_000, 7], shuffled)
        pick = np.sort(rng.choice(n, 3_000, replace=False))
        pick[:3] = [0, 1, n - 1]  # the ends of the slot range
        lazy = LexicalScores(n, hits, 4.25)
        got = lazy.at(pick)
        # with every word's slots ascending nothing was summed over every slot
        assert (lazy._sums is None) == (shuffled < 0)
        dense = LexicalScores(n, hits, 4.25)
        assert got.tobytes() == dense.dense()[pick].tobytes()
        # the raw float64 sums too, before the float32 score hides their last bits
        assert dense.sums is not None
        if shuffled < 0:
            assert lazy._sums_at(pick).tobytes() == dense.sums[pick].tobytes()
    # few postings against the candidates: the dense sums, as before
    small = LexicalScores(n, _hits(rng, n, [500]), 2.0)
    small.at(np.arange(100))
    assert small._sums is not None


def test_top_touched_keeps_the_best_distinct_slots() -> None:
    rng = np.random.default_rng(5)
    scores = rng.random(400).astype(np.float32)
    # each slot touched twice: the best 2k entries hold the best k slots
    touched = np.concatenate([rng.permutation(400), rng.permutation(400)]).astype(np.int32)
    top = top_touched(scores.take, touched, 20)
    held = np.unique(touched)
    best = held[np.argsort(-scores[held])][:20]
    assert sorted(top.tolist()) == sorted(best.tolist())
