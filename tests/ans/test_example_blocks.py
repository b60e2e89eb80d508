"""Best example similarity of a candidate set (ExampleBlocks.best_of) is the
best of each slot's own example similarities (sims_of), bit for bit: with
every agent holding the same number of examples (the reshape path) and with
mixed counts, before and after churn compacts the rows."""

from __future__ import annotations

import numpy as np
import pytest

from ans.examples_index import ExampleBlocks


def unit(rng: np.random.Generator, rows: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((rows, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize("mixed", [False, True])
def test_best_of_candidates_is_the_exhaustive_best(mixed: bool) -> None:
    rng = np.random.default_rng(11 + mixed)
    blocks = ExampleBlocks(32)
    n = 300
    for slot in range(n):
        k = int(rng.integers(1, 5)) if mixed else 3
        blocks.put(slot, unit(rng, k, 64))
    queries = unit(rng, 3, 64)
    for round_ in range(6):
        if round_ == 3:  # churn: drop and re-put most agents (the rows compact)
            for slot in rng.choice(n, 250, replace=False).tolist():
                blocks.drop(slot)
                if slot % 3:
                    blocks.put(slot, unit(rng, int(rng.integers(1, 5)) if mixed else 3, 64))
        cand = np.sort(rng.choice(n, 120, replace=False)).astype(np.int64)
        got = blocks.best_of(queries, cand)
        assert got.shape == (120, 3)
        one_by_one = np.array(
            [
                blocks.sims_of(s, queries).max(axis=0) if blocks.count(s) else np.zeros(3)
                for s in cand.tolist()
            ],
            dtype=np.float32,
        )
        assert np.array_equal(got, one_by_one)


def test_best_of_leaves_agents_without_examples_at_zero() -> None:
    rng = np.random.default_rng(5)
    blocks = ExampleBlocks(16)
    for slot in (0, 2, 3):
        blocks.put(slot, unit(rng, 2, 16))
    got = blocks.best_of(unit(rng, 2, 16), np.array([0, 1, 2, 3, 9], dtype=np.int64))
    assert np.array_equal(got[[1, 4]], np.zeros((2, 2), dtype=np.float32))
    assert (got[[0, 2, 3]] != 0).any()
