"""One vector per published example task, stored in contiguous per-agent blocks.

An agent's examples occupy rows [start, start + count) of one int8-coded row
store (:class:`ans.index.int8_rows.QRows`), appended together on upsert; a replaced or
removed agent's rows are zeroed and left as holes (a zero row scores 0, which
is never a match) until more than half the rows are holes, when the rows are
compacted. An agent's example score is its best example -- never an average.
The rows are read for a set of slots only (:meth:`ExampleBlocks.best_of`, routing
equivalence) or one slot (:meth:`ExampleBlocks.sims_of`, a result's evidence):
the example component is evidence, not ranked (``ans.index.scoring``).

Only the leading ``dims`` components are stored: the default embedder is
trained so that its leading 128 of 256 dimensions are themselves an
embedding (Matryoshka), which halves memory and scan cost.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .index.int8_rows import QRows

Vectors = npt.NDArray[np.float32]
Ints = npt.NDArray[np.int64]


def _unit(v: Vectors) -> Vectors:
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    out = np.zeros_like(v)
    np.divide(v, norms, out=out, where=norms > 1e-12)
    return out


class ExampleBlocks:
    """Not thread-safe by itself; the capability index holds its lock."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.rows = QRows(dims)
        self._used = 0
        self._live = 0
        self._start = np.zeros(0, dtype=np.int64)  # slot -> first row
        self._count = np.zeros(0, dtype=np.int32)  # slot -> rows (0: none)

    @property
    def total(self) -> int:
        return self._live

    def project(self, vectors: Vectors) -> Vectors:
        return _unit(np.ascontiguousarray(vectors[:, : self.dims], dtype=np.float32))

    def _ensure(self, slot: int) -> None:
        if slot >= len(self._count):
            cap = max(64, 2 * len(self._count), slot + 1)
            start = np.zeros(cap, dtype=np.int64)
            start[: len(self._start)] = self._start
            count = np.zeros(cap, dtype=np.int32)
            count[: len(self._count)] = self._count
            self._start, self._count = start, count

    def put(self, slot: int, vectors: Vectors) -> None:
        self.drop(slot)
        k = len(vectors)
        if k == 0:
            return
        self._ensure(slot)
        if self._used + k > len(self.rows):
            if self._live + k <= len(self.rows) // 2:
                self._compact()
            self.rows.reserve(self._used + k)
        self.rows.set(slice(self._used, self._used + k), self.project(vectors))
        self._start[slot], self._count[slot] = self._used, k
        self._used += k
        self._live += k

    def drop(self, slot: int) -> None:
        if slot >= len(self._count) or self._count[slot] == 0:
            return
        s, k = int(self._start[slot]), int(self._count[slot])
        self.rows.clear(slice(s, s + k))
        self._count[slot] = 0
        self._live -= k

    def _compact(self) -> None:
        slots = np.nonzero(self._count)[0]
        slots = slots[np.argsort(self._start[slots], kind="stable")]
        idx = self._rows_of(slots)
        codes, scale = self.rows.codes[idx].copy(), self.rows.scale[idx].copy()
        self.rows.clear(slice(0, self._used))
        self.rows.codes[: len(idx)] = codes
        self.rows.scale[: len(idx)] = scale
        counts = self._count[slots].astype(np.int64)
        starts = np.zeros(len(slots), dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        self._start[slots] = starts
        self._used = len(idx)

    def _rows_of(self, slots: Ints) -> Ints:
        """Row indices of the slots' examples, block after block."""
        counts = self._count[slots].astype(np.int64)
        total = int(counts.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64)
        ends = np.cumsum(counts)
        shift = np.repeat(self._start[slots] - (ends - counts), counts)
        return shift + np.arange(total, dtype=np.int64)

    def best_of(self, queries: Vectors, slots: Ints) -> Vectors:
        """Best example similarity of each given slot per query: (len(slots), P)."""
        q = self.project(queries)
        out = np.zeros((len(slots), len(q)), dtype=np.float32)
        slots = np.asarray(slots, dtype=np.int64)
        inside = slots < len(self._count)
        has = np.zeros(len(slots), dtype=bool)
        has[inside] = self._count[slots[inside]] > 0
        if not has.any():
            return out
        with_rows = slots[has]
        counts = self._count[with_rows]
        size = int(counts[0])
        if bool((counts == size).all()):
            # Every candidate has `size` examples (a bulk-loaded catalog): its rows
            # are start + 0..size-1, and its best is a row maximum of a reshape --
            # the same rows and maxima as the segmented path below, at a third of
            # its cost (no repeat / cumsum / reduceat over ~10k rows).
            starts = self._start.take(with_rows)
            idx = (starts[:, None] + np.arange(size, dtype=np.int64)).ravel()
            sims = self.rows.scan_rows(q, idx)
            # (P, candidates, size) over the contiguous query-major rows; a chain
            # of np.maximum over the k-th examples (a max(axis=...) reduction
            # over so short an axis costs ~5x more)
            blocks = sims.T.reshape(len(q), len(with_rows), size)
            best = blocks[:, :, 0].copy()
            for k in range(1, size):
                np.maximum(best, blocks[:, :, k], out=best)
            out[has] = best.T
            return out
        idx = self._rows_of(with_rows)
        sims = self.rows.scan_rows(q, idx)
        offsets = np.zeros(len(with_rows), dtype=np.int64)
        np.cumsum(counts[:-1].astype(np.int64), out=offsets[1:])
        for j in range(len(q)):
            out[has, j] = np.maximum.reduceat(sims[:, j], offsets)
        return out

    def vectors_of(self, slot: int) -> Vectors:
        """The slot's stored (projected, dequantized) example vectors, in order."""
        if slot >= len(self._count) or self._count[slot] == 0:
            return np.zeros((0, self.dims), dtype=np.float32)
        s, k = int(self._start[slot]), int(self._count[slot])
        return self.rows.get(np.arange(s, s + k))

    def sims_of(self, slot: int, queries: Vectors) -> Vectors:
        """Similarity of each of the slot's examples, in order, with each query
        vector: (count, P) -- the same numbers :meth:`best_of` takes the max of."""
        if slot >= len(self._count) or self._count[slot] == 0:
            return np.zeros((0, len(queries)), dtype=np.float32)
        s, k = int(self._start[slot]), int(self._count[slot])
        return self.rows.scan_rows(self.project(queries), np.arange(s, s + k))

    def count(self, slot: int) -> int:
        return int(self._count[slot]) if slot < len(self._count) else 0

    # -- snapshot --------------------------------------------------------------------
    def state(self) -> dict[str, npt.NDArray[np.generic]]:
        if self._used > 2 * self._live:
            self._compact()
        return {
            **self.rows.state("ex", self._used),
            "ex_start": self._start,
            "ex_count": self._count,
        }

    @classmethod
    def restore(
        cls, dims: int, arrays: dict[str, npt.NDArray[np.generic]], used: int | None = None
    ) -> ExampleBlocks:
        """``used``: how many of the rows are examples (the rest room to grow;
        default all)."""
        ex = cls(dims)
        ex.rows = QRows.restore(dims, "ex", arrays)
        ex._used = len(ex.rows) if used is None else used
        ex._start = np.asarray(arrays["ex_start"], dtype=np.int64)
        ex._count = np.asarray(arrays["ex_count"], dtype=np.int32)
        ex._live = int(ex._count.sum())
        if len(ex._start) != len(ex._count) or (
            ex._live and int((ex._start + ex._count).max()) > ex._used
        ):
            raise ValueError("example snapshot is inconsistent")
        return ex
