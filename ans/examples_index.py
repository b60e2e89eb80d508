"""One vector per published example task, stored in contiguous per-agent blocks.

An agent's examples occupy rows [start, start + count) of one float32 matrix,
appended together on upsert; a replaced or removed agent's rows are zeroed
and left as holes (a zero row scores 0, which is never a match) until more
than half the rows are holes, when the matrix is compacted. Scoring P query
vectors is one matrix product over all rows and one ``maximum.reduceat`` over
the block starts, so an agent's example score is its best example -- never an
average -- at the cost of a single scan.

Only the leading ``dims`` components are stored: the default embedder is
trained so that its leading 128 of 256 dimensions are themselves an
embedding (Matryoshka), which halves the memory a scan reads.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

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
        self._rows = np.zeros((0, dims), dtype=np.float32)
        self._used = 0
        self._live = 0
        self.start: dict[int, int] = {}
        self.count: dict[int, int] = {}
        self._order: tuple[Ints, Ints] | None = None

    @property
    def total(self) -> int:
        return self._live

    def project(self, vectors: Vectors) -> Vectors:
        return _unit(np.ascontiguousarray(vectors[:, : self.dims], dtype=np.float32))

    def put(self, slot: int, vectors: Vectors) -> None:
        self.drop(slot)
        k = len(vectors)
        if k == 0:
            return
        if self._used + k > len(self._rows):
            if self._live + k <= len(self._rows) // 2:
                self._compact()
            if self._used + k > len(self._rows):
                grown = np.zeros(
                    (max(256, 2 * len(self._rows), self._used + k), self.dims), dtype=np.float32
                )
                grown[: self._used] = self._rows[: self._used]
                self._rows = grown
        self._rows[self._used : self._used + k] = self.project(vectors)
        self.start[slot], self.count[slot] = self._used, k
        self._used += k
        self._live += k
        self._order = None

    def drop(self, slot: int) -> None:
        s = self.start.pop(slot, None)
        if s is None:
            return
        k = self.count.pop(slot)
        self._rows[s : s + k] = 0.0
        self._live -= k
        self._order = None

    def _compact(self) -> None:
        rows = np.zeros_like(self._rows)
        at = 0
        for slot in sorted(self.start, key=self.start.__getitem__):
            s, k = self.start[slot], self.count[slot]
            rows[at : at + k] = self._rows[s : s + k]
            self.start[slot] = at
            at += k
        self._rows, self._used = rows, at

    def _blocks(self) -> tuple[Ints, Ints]:
        if self._order is None:
            slots = np.array(sorted(self.start, key=self.start.__getitem__), dtype=np.int64)
            starts = np.array([self.start[s] for s in slots.tolist()], dtype=np.int64)
            self._order = (slots, starts)
        return self._order

    def best(self, queries: Vectors, n_slots: int) -> tuple[Vectors, Vectors]:
        """(best example similarity per slot and query: (n_slots, P);
        every row's similarity: (rows, P)) for full-width query vectors."""
        q = self.project(queries)
        out = np.zeros((n_slots, len(q)), dtype=np.float32)
        if not self.start:
            return out, np.zeros((0, len(q)), dtype=np.float32)
        sims = self._rows[: self._used] @ q.T
        slots, starts = self._blocks()
        out[slots] = np.maximum.reduceat(sims, starts, axis=0)
        return out, sims

    def block(self, slot: int) -> tuple[int, int]:
        return self.start.get(slot, 0), self.count.get(slot, 0)
