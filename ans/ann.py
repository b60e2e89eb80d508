"""Approximate nearest-neighbour search with FAISS, for catalogs too big to scan.

The capability index picks its search by catalog size: up to ``exact_max``
agents every query is scored exhaustively (a flat scan, exact); above it, the
candidates of a query come from a FAISS inverted-file index with 8-bit scalar
quantization (``IndexIVFScalarQuantizer``, inner product) over the unit
capability vectors (plus the best BM25 and tag hits), and only those
candidates are scored. Recall of the approximate path against the exhaustive
one is measured at k=50 on the real query path (``bench/index_scale.py``).

Ids are the caller's int64 (a slot); a hashtable direct map makes removal
O(1) per id.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import numpy.typing as npt

from .index.select import top_k

Vectors = npt.NDArray[np.float32]
Ids = npt.NDArray[np.int64]


CANDIDATE_BASE = 100_000  # catalog size at which `candidates` applies as configured
MAX_CANDIDATES = 10_000
HEAP_K_MAX = 64  # from this k on, search() ranks a range search's hits itself
EVERY_SCORE = float(np.finfo(np.float32).min)  # an inner-product radius every code passes


@dataclass(frozen=True, slots=True)
class AnnSettings:
    exact_max: int = 20_000  # up to this many agents: exhaustive (exact) scoring
    candidates: int = 512  # per source and query text at CANDIDATE_BASE agents (see candidates_at)
    nprobe: int = 16  # inverted lists visited per search (of ~sqrt(n))
    train_size: int = 40_000  # vectors sampled to train the coarse quantizer
    threads: int = 1  # FAISS threads (the server's event loop shares the cores)
    seed: int = 1234

    def candidates_at(self, live: int) -> int:
        """Candidates per source and query text for a catalog of ``live`` agents:
        ``candidates`` up to CANDIDATE_BASE agents, then growing like sqrt(n), as
        the lists do. Each source's top-k must reach the same depth of the fused
        ranking, and at 1M agents a fixed 512 fell to recall@50 0.93 against
        exhaustive scoring (bench/index_scale.py)."""
        scale = math.sqrt(max(live, 1) / CANDIDATE_BASE)
        return min(MAX_CANDIDATES, max(self.candidates, round(self.candidates * scale)))


def nlist_for(n: int) -> int:
    """Inverted lists for n vectors: about sqrt(n), within [16, 4096]."""
    return int(min(4096, max(16, round(math.sqrt(max(n, 1))))))


class AnnIndex:
    """One IVF-SQ8 inner-product index. Not thread-safe; callers lock."""

    def __init__(self, index: faiss.Index, nprobe: int) -> None:
        self._index = index
        self.nprobe = nprobe
        faiss.extract_index_ivf(index).nprobe = nprobe

    @classmethod
    def build(cls, dim: int, vectors: Vectors, ids: Ids, settings: AnnSettings) -> AnnIndex:
        faiss.omp_set_num_threads(max(1, settings.threads))
        nlist = nlist_for(len(vectors))
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFScalarQuantizer(
            quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
        )
        index.cp.seed = settings.seed
        rng = np.random.default_rng(settings.seed)
        sample_n = min(len(vectors), max(settings.train_size, 40 * nlist))
        sample = vectors[np.sort(rng.choice(len(vectors), sample_n, replace=False))]
        index.train(np.ascontiguousarray(sample, dtype=np.float32))
        index.set_direct_map_type(faiss.DirectMap.Hashtable)  # type: ignore[attr-defined]
        ann = cls(index, settings.nprobe)
        ann.add(vectors, ids)
        return ann

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def add(self, vectors: Vectors, ids: Ids) -> None:
        if len(ids):
            self._index.add_with_ids(
                np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(ids, dtype=np.int64)
            )

    def remove(self, ids: Ids) -> None:
        if len(ids):
            self._index.remove_ids(np.asarray(ids, dtype=np.int64))  # type: ignore[arg-type]

    def search(self, queries: Vectors, k: int) -> Ids:
        """The ids of the (approximately) k best matches of every query, flattened
        query by query, in no particular order within a query (missing hits
        dropped)."""
        return self.search_floors(queries, k)[0]

    def search_floors(self, queries: Vectors, k: int) -> tuple[Ids, Vectors]:
        """:meth:`search`, and per query the lowest score it kept when it had
        to choose (-inf when it kept every hit): the score another source's
        vector must reach to have been among them. Below HEAP_K_MAX FAISS's
        heap cannot tell exactly k hits from more: k found sets the floor."""
        floors: Vectors = np.full(len(queries), -np.inf, dtype=np.float32)
        if len(self) == 0 or len(queries) == 0:
            return np.zeros(0, dtype=np.int64), floors
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if k < HEAP_K_MAX:
            dist, ids = self._index.search(q, k)
            full = ids[:, -1] >= 0
            floors[full] = dist[full, -1]
            flat: Ids = ids.ravel()
            return flat[flat >= 0], floors
        # Every probed code, then the best k of each query by top_k (a sampled
        # threshold, then a partition of what passes it): for k in the hundreds
        # FAISS's result heap costs more than the scan (158 vs 117 us per query
        # text at 100k agents, k 512). The same set as search() but for ties at
        # the k-th score (top_k keeps the earliest of them).
        lims, dist, found = self._index.range_search(q, EVERY_SCORE)
        out: list[Ids] = []
        for i in range(len(q)):
            d, got = dist[lims[i] : lims[i + 1]], found[lims[i] : lims[i + 1]]
            if len(got) > k:
                best = top_k(d, k)
                floors[i] = d[best].min()
                got = got[best]
            out.append(got)
        return np.concatenate(out).astype(np.int64, copy=False), floors

    def save(self, path: Path) -> None:
        faiss.write_index(self._index, str(path))

    @classmethod
    def load(cls, path: Path, nprobe: int) -> AnnIndex:
        index = faiss.read_index(str(path))
        return cls(index, nprobe)
