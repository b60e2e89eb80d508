"""int8 row store: exact integer scans, so the exhaustive and the candidate paths
give bit-identical similarities; and the float blocked scan used for float rows."""

from __future__ import annotations

import numpy as np
import pytest

from ans.index.int8_rows import (
    SCAN_BLOCK_BYTES,
    QRows,
    int_dots,
    quantize,
    similarities,
)


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


def reference(store: QRows, q: np.ndarray, n: int) -> np.ndarray:
    """The documented formula, in NumPy: exact int64 dot products of the codes,
    then float32 x row scale x query scale."""
    q8, qs = quantize(q)
    raw = (q8.astype(np.int64) @ store.codes[:n].astype(np.int64).T).astype(np.float32)
    raw *= store.scale[:n][None, :]
    raw *= qs[:, None]
    return raw.T


@pytest.mark.parametrize("dim", [3, 64, 100, 256])
def test_int_dots_are_exact(dim: int) -> None:
    rng = np.random.default_rng(dim)
    for n, p in [(0, 2), (1, 1), (37, 3), (1000, 5)]:
        codes = rng.integers(-127, 128, (n, dim), dtype=np.int8)
        q8 = rng.integers(-127, 128, (p, dim), dtype=np.int8)
        got = int_dots(codes, q8)
        assert got.shape == (p, n) and got.dtype == np.int32
        assert np.array_equal(got, q8.astype(np.int64) @ codes.astype(np.int64).T)
    assert int_dots(np.zeros((4, dim), np.int8), np.zeros((0, dim), np.int8)).shape == (0, 4)


def test_exhaustive_and_candidate_scans_give_the_same_numbers() -> None:
    dim, n = 64, 5000
    store = QRows(dim)
    store.reserve(n)
    store.set(slice(0, n), unit_rows(n, dim, 4))
    q = unit_rows(3, dim, 5)
    picked = np.array([4999, 0, 17, 2048, 2049, 3333])
    full = store.scan(q, n)
    assert full.shape == (n, 3) and all(full[:, j].flags.c_contiguous for j in range(3))
    assert np.array_equal(full, reference(store, q, n))
    assert np.array_equal(full[picked], store.scan_rows(q, picked))
    # both sides quantized: within 1e-2 of the float cosines
    np.testing.assert_allclose(full, unit_rows(n, dim, 4) @ q.T, atol=1e-2)

    # rows written after a scan are read as they are now, never stale
    store.set(np.array([17]), unit_rows(1, dim, 6))
    store.clear(np.array([0]))
    again = store.scan(q, n)
    assert np.array_equal(again, reference(store, q, n))
    assert np.array_equal(again[picked], store.scan_rows(q, picked))
    assert np.abs(again[17] - full[17]).max() > 1e-3
    assert np.all(again[0] == 0.0)


def test_scans_follow_growth_and_rewrites() -> None:
    dim = 32
    store = QRows(dim)
    q = unit_rows(2, dim, 7)
    assert store.scan(q, 0).shape == (0, 2)
    n = 1024
    store.reserve(n)
    store.set(slice(0, n), unit_rows(n, dim, 8))
    assert np.array_equal(store.scan(q, n), reference(store, q, n))
    # a few more rows: scanned with the others
    store.reserve(n + 10)
    store.set(slice(n, n + 10), unit_rows(10, dim, 9))
    assert np.array_equal(store.scan(q, n + 10), reference(store, q, n + 10))
    # every row rewritten: the new numbers
    m = n + 10
    store.set(slice(0, m), unit_rows(m, dim, 10))
    assert np.array_equal(store.scan(q, m), reference(store, q, m))
    # a scan of a prefix
    assert np.array_equal(store.scan(q, 5), reference(store, q, 5))
    # a zero query vector scores 0 everywhere
    zero = np.zeros((1, dim), np.float32)
    assert np.all(store.scan(zero, m) == 0.0)


def test_snapshot_round_trip_scans_the_same() -> None:
    dim, n = 48, 700
    store = QRows(dim)
    store.reserve(n)
    store.set(slice(0, n), unit_rows(n, dim, 11))
    q = unit_rows(3, dim, 12)
    back = QRows.restore(dim, "x", {k: v.copy() for k, v in store.state("x", n).items()})
    assert np.array_equal(back.scan(q, n), store.scan(q, n))
    back.reserve(n + 1)
    back.set(np.array([n]), unit_rows(1, dim, 13))
    assert np.array_equal(back.scan(q, n + 1)[:n], store.scan(q, n))


# -- the packed copy of exhaustive scans (ans.index.layout) ---------------------------------


@pytest.fixture
def packed_layout():
    from ans.index import layout

    layout.force_layout("packed")
    yield
    layout.force_layout(None)


def test_packed_copy_scans_the_same_numbers_through_every_change(packed_layout) -> None:
    from ans.index.int8_rows import PACK_MIN_ROWS, REPACK_FRACTION

    dim, n = 64, 4 * PACK_MIN_ROWS
    store = QRows(dim, pack=True)
    store.reserve(n + 200)
    store.set(slice(0, n), unit_rows(n, dim, 21))
    q = unit_rows(2, dim, 22)
    assert np.array_equal(store.scan(q, n), reference(store, q, n))
    copy = store.packed
    assert copy is not None and copy.matrix is not None and copy.n == n  # scanned from the copy
    packed_matrix = copy.matrix

    # single rows rewritten or cleared: patched from the stored rows, not repacked
    store.set(np.array([5]), unit_rows(1, dim, 23))
    store.set(7, unit_rows(1, dim, 24)[0])
    store.clear(np.array([n - 1]))
    assert copy.stale == {5, 7, n - 1}
    got = store.scan(q, n)
    assert np.array_equal(got, reference(store, q, n))
    assert np.all(got[n - 1] == 0.0)
    assert copy.matrix is packed_matrix

    # rows appended: the tail is scanned from the stored rows until the copy is due
    store.set(slice(n, n + 10), unit_rows(10, dim, 25))
    assert np.array_equal(store.scan(q, n + 10), reference(store, q, n + 10))
    assert copy.matrix is packed_matrix and copy.n == n

    # past the share of changed rows the copy is packed again, with every change in it
    many = n // REPACK_FRACTION + 10
    for i in range(many):
        store.set(np.array([100 + i]), unit_rows(1, dim, 100 + i))
    assert np.array_equal(store.scan(q, n + 10), reference(store, q, n + 10))
    assert copy.matrix is not packed_matrix and copy.n == n + 10 and not copy.stale

    # a bulk write drops the copy; a scan of a prefix packs that prefix
    store.set(slice(0, n), unit_rows(n, dim, 26))
    assert copy.matrix is None
    assert np.array_equal(store.scan(q, n + 10), reference(store, q, n + 10))
    assert np.array_equal(store.scan(q, PACK_MIN_ROWS), reference(store, q, PACK_MIN_ROWS))
    assert copy.n == PACK_MIN_ROWS


def test_packed_copy_only_where_asked_and_large_enough(packed_layout) -> None:
    from ans.index.int8_rows import PACK_MIN_ROWS

    dim = 32
    small, plain = QRows(dim, pack=True), QRows(dim)
    for store in (small, plain):
        store.reserve(PACK_MIN_ROWS)
        store.set(slice(0, PACK_MIN_ROWS), unit_rows(PACK_MIN_ROWS, dim, 31))
    q = unit_rows(1, dim, 32)
    assert np.array_equal(small.scan(q, PACK_MIN_ROWS - 1), plain.scan(q, PACK_MIN_ROWS - 1))
    assert small.packed is not None and small.packed.matrix is None  # too few rows
    plain.prepare(PACK_MIN_ROWS)
    assert plain.packed is None
    small.prepare(PACK_MIN_ROWS)
    assert small.packed.matrix is not None and small.packed.n == PACK_MIN_ROWS
    assert np.array_equal(small.scan(q, PACK_MIN_ROWS), plain.scan(q, PACK_MIN_ROWS))
    # a restored table keeps asking for its copy
    back = QRows.restore(dim, "x", small.state("x", PACK_MIN_ROWS), pack=True)
    assert np.array_equal(back.scan(q, PACK_MIN_ROWS), plain.scan(q, PACK_MIN_ROWS))
    assert back.packed is not None and back.packed.n == PACK_MIN_ROWS


def test_streamed_layout_keeps_no_copy() -> None:
    from ans.index import layout
    from ans.index.int8_rows import PACK_MIN_ROWS

    layout.force_layout("streamed")
    try:
        store = QRows(16, pack=True)
        store.reserve(PACK_MIN_ROWS)
        store.set(slice(0, PACK_MIN_ROWS), unit_rows(PACK_MIN_ROWS, 16, 41))
        q = unit_rows(2, 16, 42)
        assert np.array_equal(store.scan(q, PACK_MIN_ROWS), reference(store, q, PACK_MIN_ROWS))
        store.prepare(PACK_MIN_ROWS)
        assert store.packed is not None and store.packed.matrix is None
    finally:
        layout.force_layout(None)


def test_the_layout_is_measured_at_the_rows_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """``[index] embedding_dims = 128`` halves the bytes of a row, which can tip the
    choice: each width is calibrated on rows of that width, once, and described
    on its own; a pinned layout holds at every width."""
    from ans.index import layout

    widths: list[int] = []
    real = layout.calibrate

    def calibrate(**kw: int) -> dict[str, float]:
        widths.append(kw["dim"])
        return real(rows=256, reps=1, evict_bytes=1 << 16, dim=kw["dim"])

    monkeypatch.setattr(layout, "calibrate", calibrate)
    layout.force_layout(None)
    try:
        assert layout.describe(128)["scan_layout"] is None  # not measured yet
        first = layout.scan_layout(128)
        assert layout.scan_layout(128) == first and widths == [128]  # measured once
        layout.scan_layout(256)
        assert widths == [128, 256]
        for dim in (128, 256):
            got = layout.describe(dim)
            assert got["scan_layout"] == layout.choose(got["scan_layout_us"])  # type: ignore[arg-type]
        layout.force_layout("packed")
        assert layout.scan_layout(128) == layout.scan_layout(256) == "packed"
        assert layout.describe(128) == {
            "scan_layout": "packed", "scan_layout_pinned": True, "scan_layout_us": {}
        }
        assert widths == [128, 256]  # a pinned layout measures nothing
    finally:
        layout.force_layout(None)
    # the calibration itself runs both kernels on 128-wide rows
    measured = real(rows=300, reps=1, evict_bytes=1 << 16, dim=128)
    assert all(v > 0 for v in measured.values())


def test_the_layout_is_chosen_from_measured_scans() -> None:
    from ans.index import layout

    assert layout.choose(
        {"packed_hot_us": 98, "packed_cold_us": 624, "streamed_hot_us": 578, "streamed_cold_us": 652}
    ) == "packed"  # an AVX2-only machine (docs/query-profile.md, twelfth round)
    assert layout.choose(
        {"packed_hot_us": 89, "packed_cold_us": 307, "streamed_hot_us": 118, "streamed_cold_us": 174}
    ) == "streamed"  # an AVX-512 machine (eighth round)
    # a near tie keeps the rows as stored: the copy must win clearly
    assert layout.choose(
        {"packed_hot_us": 92, "packed_cold_us": 92, "streamed_hot_us": 100, "streamed_cold_us": 100}
    ) == "streamed"
    assert layout.choose(  # an Intel machine with AMX (nineteenth round): whole scans
        {"packed_hot_us": 604, "packed_cold_us": 727, "streamed_hot_us": 721, "streamed_cold_us": 871}
    ) == "packed"
    # the scan as the server runs it: the product and its float similarities,
    # for a DISCOVER alone and for a batch's query vectors (summed)
    assert layout.CALIBRATION_QUERIES == (2, 16)
    measured = layout.calibrate(rows=512, reps=2, evict_bytes=1 << 20)
    assert set(measured) == {
        "packed_hot_us", "packed_cold_us", "streamed_hot_us", "streamed_cold_us"
    }
    assert all(v > 0 for v in measured.values())
    layout.force_layout(None)
    try:
        chosen = layout.scan_layout()
        assert chosen in ("packed", "streamed")
        described = layout.describe()
        assert described["scan_layout"] == chosen
        assert chosen == layout.choose(described["scan_layout_us"])  # type: ignore[arg-type]
    finally:
        layout.force_layout(None)
