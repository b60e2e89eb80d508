"""Growable rows of unit vectors stored as int8 codes with one float32 scale per row.

A 256-d embedding costs 260 bytes instead of 1 KiB, so a million agents'
description and capability vectors fit in half a gigabyte. Reading a row
gives ``codes * scale``; the rounding error of a cosine is below 1e-2 and is
the same on every read, so scores stay deterministic for identical index
contents.

Similarities with query vectors (:meth:`QRows.scan`, :meth:`QRows.scan_rows`)
are computed as ``(codes · q) * scale``: the codes as float32, one dot product
per row, then the row's scale. For exhaustive scans a float32 copy of the
codes is kept alongside (built once, kept up to date); for a candidate set
only those rows' codes are converted. Both take the same code path, so the
exhaustive and the candidate paths agree to float32 rounding (the BLAS kernel
may sum a row in another order depending on where it sits in its block: a few
units in the last place, far below the six decimals a score is rounded to).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]
Index = npt.NDArray[np.integer] | int


# Rows per block of :func:`similarities`: about 1 MiB of float32, so that every
# query vector re-reads the block from the core's L2 cache, not from memory.
SCAN_BLOCK_BYTES = 1 << 20


def similarities(rows: Vectors, queries: Vectors) -> Vectors:
    """``rows @ queries.T`` as an (len(rows), P) array whose columns are contiguous.

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


class QRows:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.codes = np.zeros((0, dim), dtype=np.int8)
        self.scale = np.zeros(0, dtype=np.float32)
        self._dense: Vectors | None = None

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
        if self._dense is not None:
            dense = np.zeros((cap, self.dim), dtype=np.float32)
            dense[: len(self._dense)] = self._dense
            self._dense = dense

    def set(self, rows: Index | slice, vectors: Vectors) -> None:
        codes, scale = quantize(vectors)
        self.codes[rows] = codes
        self.scale[rows] = scale
        if self._dense is not None:
            self._dense[rows] = codes

    def clear(self, rows: Index | slice) -> None:
        self.codes[rows] = 0
        self.scale[rows] = 0.0
        if self._dense is not None:
            self._dense[rows] = 0.0

    def get(self, rows: Index) -> Vectors:
        out: Vectors = self.codes[rows].astype(np.float32)
        out *= self.scale[rows][..., None]
        return out

    def scan(self, queries: Vectors, n: int) -> Vectors:
        """Similarities of rows [0, n) with the query vectors: (n, P)."""
        if self._dense is None or len(self._dense) < len(self.scale):
            self._dense = self.codes.astype(np.float32)
        out = similarities(self._dense[:n], queries)
        out *= self.scale[:n, None]
        return out

    def scan_rows(self, queries: Vectors, rows: npt.NDArray[np.integer]) -> Vectors:
        """Similarities of the given rows with the query vectors: (len(rows), P)."""
        rows = np.asarray(rows, dtype=np.intp)
        # take() copies whole rows; fancy indexing is ~3x slower for this gather
        out = similarities(self.codes.take(rows, axis=0).astype(np.float32), queries)
        out *= self.scale.take(rows)[:, None]
        return out

    def drop_dense(self) -> None:
        self._dense = None

    def state(self, prefix: str, n: int) -> dict[str, npt.NDArray[np.generic]]:
        return {f"{prefix}_codes": self.codes[:n], f"{prefix}_scale": self.scale[:n]}

    @classmethod
    def restore(cls, dim: int, prefix: str, arrays: dict[str, npt.NDArray[np.generic]]) -> QRows:
        q = cls(dim)
        q.codes = np.asarray(arrays[f"{prefix}_codes"], dtype=np.int8).reshape(-1, dim)
        q.scale = np.asarray(arrays[f"{prefix}_scale"], dtype=np.float32)
        if len(q.codes) != len(q.scale):
            raise ValueError(f"{prefix} snapshot is inconsistent")
        return q
