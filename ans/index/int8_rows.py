"""Growable rows of unit vectors stored as int8 codes with one float32 scale per row.

A 256-d embedding costs 260 bytes instead of 1 KiB, so a million agents'
description and capability vectors fit in half a gigabyte. Reading a row
gives ``codes * scale``; the rounding error of a cosine is below 1e-2 and is
the same on every read, so scores stay deterministic for identical index
contents.

Similarities with query vectors (:meth:`QRows.scan`, :meth:`QRows.scan_rows`)
quantize each query vector the same way (int8 codes, one scale), take the
exact integer dot product of the codes (numkong's packed int8 kernels:
int32 accumulation, no rounding) and then multiply by the row's scale and the
query's scale in float32. The integer part is exact whichever kernel or path
computes it, so an exhaustive scan and a candidate scan give bit-identical
numbers for the same row, on any machine. Candidate scans stream the rows as
stored against the packed query vectors. Exhaustive scans of a table made
with ``pack=True`` read a packed copy of the rows instead where this machine
scans that layout clearly faster (:mod:`.layout`; :class:`PackedCopy`).
"""

from __future__ import annotations

from typing import NamedTuple

import numkong
import numpy as np
import numpy.typing as npt

from .layout import scan_layout

Vectors = npt.NDArray[np.float32]
Index = npt.NDArray[np.integer] | int


# Rows per block of :func:`similarities`: about 1 MiB of float32, so that every
# query vector re-reads the block from the core's L2 cache, not from memory.
SCAN_BLOCK_BYTES = 1 << 20


def similarities(rows: Vectors, queries: Vectors) -> Vectors:
    """``rows @ queries.T`` as an (len(rows), P) array whose columns are contiguous,
    for float rows (the int8 stores use :meth:`QRows.scan`).

    For the few query vectors of a DISCOVER (the intent and its segments),
    BLAS's matrix product packs the whole row matrix first and costs about
    twice as much as one matrix-vector product per query vector, block after
    block (measured: 10k x 256 rows, 3 queries, 0.79 -> 0.43 ms; 50k x 128,
    1.6x faster). Each entry is a float32 dot product of a row with a query,
    deterministic for the same rows."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    n, p = len(rows), len(queries)
    out = np.empty((p, n), dtype=np.float32)
    if n and p:
        step = max(256, SCAN_BLOCK_BYTES // max(4 * rows.shape[1], 1))
        for start in range(0, n, step):
            block = rows[start : start + step]
            for j in range(p):
                np.dot(block, queries[j], out=out[j, start : start + step])
    return out.T


def quantize(v: Vectors) -> tuple[npt.NDArray[np.int8], Vectors]:
    v = np.asarray(v, dtype=np.float32)
    peak = np.abs(v).max(axis=-1) if v.size else np.zeros(len(v), np.float32)
    scale = (peak / 127.0).astype(np.float32)
    safe = np.where(scale > 0, scale, 1.0)[..., None]
    codes = np.rint(v / safe).clip(-127, 127).astype(np.int8)
    return codes, scale


class QueryCodes(NamedTuple):
    """Query vectors quantized like the rows: int8 codes (P, dim) and one scale each."""

    codes: npt.NDArray[np.int8]
    scale: Vectors


def query_codes(queries: Vectors | QueryCodes) -> QueryCodes:
    """Quantize query vectors once for several scans (already quantized: as is)."""
    if isinstance(queries, QueryCodes):
        return queries
    return QueryCodes(*quantize(queries))


def int_dots(codes: npt.NDArray[np.int8], q8: npt.NDArray[np.int8]) -> npt.NDArray[np.int32]:
    """Exact ``q8 @ codes.T`` in int32: (P, len(codes))."""
    if len(codes) == 0 or len(q8) == 0:
        return np.zeros((len(q8), len(codes)), dtype=np.int32)
    codes = np.ascontiguousarray(codes, dtype=np.int8)
    if len(q8) < len(codes):
        # Pack the few query vectors and stream the rows: packing the rows
        # costs as much as the product itself (4000 x 256 rows, 3 queries:
        # 209 -> 39 us). Integer dot products: the same numbers either way.
        small = numkong.dots_pack(np.ascontiguousarray(q8, dtype=np.int8))
        return np.asarray(numkong.dots_packed(codes, small), dtype=np.int32).T
    packed = numkong.dots_pack(codes)
    return np.asarray(numkong.dots_packed(q8, packed), dtype=np.int32)


def finish_scan(raw: npt.NDArray[np.int32], row_scale: Vectors, q_scale: Vectors) -> Vectors:
    """Integer dot products (P, m) -> similarities (m, P), columns contiguous."""
    out = raw.astype(np.float32, order="C")  # int_dots gives a transposed view
    out *= row_scale[None, :]
    out *= q_scale[:, None]
    return out.T


# Exhaustive scans of fewer rows stream them (a packed copy is not worth its upkeep).
PACK_MIN_ROWS = 1024
# The copy is packed again once the rows added or changed since exceed this
# share of it (each such row is scanned from the stored rows until then).
REPACK_FRACTION = 16


class PackedCopy:
    """numkong's packed copy of rows [0, n) of a :class:`QRows`, and which of them
    changed since it was packed (scanned from the stored rows until the copy is
    packed again). Not thread-safe: the index's lock covers it with the rows."""

    def __init__(self) -> None:
        self.matrix: numkong.PackedMatrix | None = None
        self.n = 0
        self.stale: set[int] = set()

    def changed(self, rows: npt.NDArray[np.intp]) -> None:
        if self.matrix is None:
            return
        if len(rows) > max(64, self.n // REPACK_FRACTION):  # a bulk load: pack anew
            self.matrix, self.n = None, 0
            self.stale.clear()
            return
        self.stale.update(int(r) for r in rows if r < self.n)

    def due(self, n: int) -> bool:
        if self.matrix is None or n < self.n:
            return True
        return (n - self.n) + len(self.stale) > max(64, self.n // REPACK_FRACTION)

    def pack(self, codes: npt.NDArray[np.int8], n: int) -> None:
        self.matrix = numkong.dots_pack(np.ascontiguousarray(codes[:n], dtype=np.int8))
        self.n = n
        self.stale.clear()

    def dots(
        self, codes: npt.NDArray[np.int8], q8: npt.NDArray[np.int8], n: int
    ) -> npt.NDArray[np.int32]:
        """Exact ``q8 @ codes[:n].T`` in int32, (P, n): the packed rows from the
        copy, rows added or changed since from ``codes``."""
        if self.due(n):
            self.pack(codes, n)
        assert self.matrix is not None
        m = self.n
        q8 = np.ascontiguousarray(q8, dtype=np.int8)
        if m == n:
            out: npt.NDArray[np.int32] = np.asarray(numkong.dots_packed(q8, self.matrix))
        else:
            out = np.empty((len(q8), n), dtype=np.int32)
            out[:, :m] = np.asarray(numkong.dots_packed(q8, self.matrix))
            out[:, m:] = int_dots(codes[m:n], q8)
        if self.stale:
            idx = np.fromiter(sorted(self.stale), dtype=np.intp, count=len(self.stale))
            out[:, idx] = int_dots(codes.take(idx, axis=0), q8)
        return out


def _row_indices(rows: Index | slice, length: int) -> npt.NDArray[np.intp]:
    if isinstance(rows, slice):
        return np.arange(length, dtype=np.intp)[rows]
    return np.atleast_1d(np.asarray(rows, dtype=np.intp))


class QRows:
    def __init__(self, dim: int, *, pack: bool = False) -> None:
        self.dim = dim
        self.codes = np.zeros((0, dim), dtype=np.int8)
        self.scale = np.zeros(0, dtype=np.float32)
        self.version = 0  # counts the writes of rows (set, clear)
        # a packed copy for exhaustive scans, where this machine scans it faster
        self.packed: PackedCopy | None = PackedCopy() if pack else None

    def __len__(self) -> int:
        return len(self.scale)

    def reserve(self, rows: int) -> None:
        if rows <= len(self.scale):
            return
        cap = max(64, 2 * len(self.scale), rows)
        codes = np.zeros((cap, self.dim), dtype=np.int8)
        codes[: len(self.codes)] = self.codes
        scale = np.zeros(cap, dtype=np.float32)
        scale[: len(self.scale)] = self.scale
        self.codes, self.scale = codes, scale

    def set(self, rows: Index | slice, vectors: Vectors) -> None:
        codes, scale = quantize(vectors)
        self.codes[rows] = codes
        self.scale[rows] = scale
        self.version += 1
        if self.packed is not None:
            self.packed.changed(_row_indices(rows, len(self.codes)))

    def clear(self, rows: Index | slice) -> None:
        self.codes[rows] = 0
        self.scale[rows] = 0.0
        self.version += 1
        if self.packed is not None:
            self.packed.changed(_row_indices(rows, len(self.codes)))

    def _packs(self, n: int) -> bool:
        return self.packed is not None and n >= PACK_MIN_ROWS and scan_layout(self.dim) == "packed"

    def prepare(self, n: int) -> None:
        """Pack rows [0, n) now if exhaustive scans will read a packed copy (start-up,
        before ``ans serve --workers`` forks: the copy is then shared)."""
        if self._packs(n):
            assert self.packed is not None
            self.packed.pack(self.codes, n)

    def get(self, rows: Index) -> Vectors:
        out: Vectors = self.codes[rows].astype(np.float32)
        out *= self.scale[rows][..., None]
        return out

    def scan(self, queries: Vectors | QueryCodes, n: int) -> Vectors:
        """Similarities of rows [0, n) with the query vectors: (n, P)."""
        q8, q_scale = query_codes(queries)
        if n <= 0:
            return np.zeros((0, len(q8)), dtype=np.float32)
        if self._packs(n):
            assert self.packed is not None
            raw = self.packed.dots(self.codes, q8, n)
        else:
            raw = int_dots(self.codes[:n], q8)
        return finish_scan(raw, self.scale[:n], q_scale)

    def scan_rows(self, queries: Vectors | QueryCodes, rows: npt.NDArray[np.integer]) -> Vectors:
        """Similarities of the given rows with the query vectors: (len(rows), P)."""
        q8, q_scale = query_codes(queries)
        rows = np.asarray(rows, dtype=np.intp)
        # take() copies whole rows; fancy indexing is ~3x slower for this gather
        raw = int_dots(self.codes.take(rows, axis=0), q8)
        return finish_scan(raw, self.scale.take(rows), q_scale)

    def state(self, prefix: str, n: int) -> dict[str, npt.NDArray[np.generic]]:
        return {f"{prefix}_codes": self.codes[:n], f"{prefix}_scale": self.scale[:n]}

    @classmethod
    def restore(
        cls,
        dim: int,
        prefix: str,
        arrays: dict[str, npt.NDArray[np.generic]],
        *,
        pack: bool = False,
    ) -> QRows:
        q = cls(dim, pack=pack)
        q.codes = np.asarray(arrays[f"{prefix}_codes"], dtype=np.int8).reshape(-1, dim)
        q.scale = np.asarray(arrays[f"{prefix}_scale"], dtype=np.float32)
        if len(q.codes) != len(q.scale):
            raise ValueError(f"{prefix} snapshot is inconsistent")
        return q
