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


def test_scores_at_slots_are_the_dense_scores_there() -> None:
    rng = np.random.default_rng(4)
    sums = rng.random(1000) * 7.0
    touched = rng.integers(0, 1000, 3000).astype(np.int32)
    lex = LexicalScores(1000, sums, 3.5, touched)
    dense = lex.dense()
    assert np.array_equal(lex.at(touched), dense[touched])
    assert np.array_equal(lex.at(np.arange(10, 20)), dense[10:20])
    assert np.array_equal(lex.at(slice(5, 50)), dense[5:50])


def test_top_touched_keeps_the_best_distinct_slots() -> None:
    rng = np.random.default_rng(5)
    scores = rng.random(400).astype(np.float32)
    # each slot touched twice: the best 2k entries hold the best k slots
    touched = np.concatenate([rng.permutation(400), rng.permutation(400)]).astype(np.int32)
    top = top_touched(scores.take, touched, 20)
    held = np.unique(touched)
    best = held[np.argsort(-scores[held])][:20]
    assert sorted(top.tolist()) == sorted(best.tolist())
