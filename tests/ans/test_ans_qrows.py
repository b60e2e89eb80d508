"""int8 row store: blocked similarity scans; exhaustive and candidate paths agree
to float32 rounding (the BLAS kernel sums a row in an order that can depend on
where the row sits in its block, a few units in the last place)."""

from __future__ import annotations

import numpy as np
import pytest

from ans.qrows import SCAN_BLOCK_BYTES, QRows, similarities


def unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_similarities_equal_the_matrix_product_across_blocks(p: int) -> None:
    dim = 256
    step = SCAN_BLOCK_BYTES // (4 * dim)
    n = 3 * step + 17  # three whole blocks and a partial one
    rows, q = unit_rows(n, dim, 1), unit_rows(p, dim, 2)
    got = similarities(rows, q)
    assert got.shape == (n, p)
    np.testing.assert_allclose(got, rows @ q.T, atol=1e-5)
    for j in range(p):
        assert got[:, j].flags.c_contiguous  # each query's column is one array
        # one float32 dot product per row: equal up to the kernel's summation order
        np.testing.assert_allclose(got[:, j], rows @ q[j], rtol=0, atol=1e-6)


def test_similarities_of_nothing() -> None:
    assert similarities(np.zeros((0, 8), np.float32), unit_rows(2, 8, 3)).shape == (0, 2)
    assert similarities(unit_rows(5, 8, 3), np.zeros((0, 8), np.float32)).shape == (5, 0)


def test_exhaustive_and_candidate_scans_give_the_same_numbers() -> None:
    dim, n = 64, 5000
    store = QRows(dim)
    store.reserve(n)
    store.set(slice(0, n), unit_rows(n, dim, 4))
    q = unit_rows(3, dim, 5)
    picked = np.array([4999, 0, 17, 2048, 2049, 3333])
    full = store.scan(q, n)
    np.testing.assert_allclose(full[picked], store.scan_rows(q, picked), rtol=0, atol=1e-6)
    # scores are the cosines of the dequantized rows, up to float rounding
    np.testing.assert_allclose(full, store.get(np.arange(n)) @ q.T, atol=1e-5)

    # the float copy kept for exhaustive scans follows later writes
    store.set(np.array([17]), unit_rows(1, dim, 6))
    store.clear(np.array([0]))
    again = store.scan(q, n)
    np.testing.assert_allclose(again[picked], store.scan_rows(q, picked), rtol=0, atol=1e-6)
    assert np.abs(again[17] - full[17]).max() > 1e-3
    assert np.all(again[0] == 0.0)
