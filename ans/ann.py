"""Approximate nearest-neighbour search with FAISS, for catalogs too big to scan.

The capability index picks its search by catalog size: up to ``exact_max``
agents every query is scored exhaustively (a flat scan, exact); above it, the
candidates of a query come from a FAISS inverted-file index over the unit
capability vectors (plus the best BM25 and tag hits), and only those
candidates are scored, exactly, from the int8 rows. Recall of the approximate
path against the exhaustive one is measured at k=50 on the real query path
(``bench/index_scale.py``).

The lists hold 4-bit product-quantization codes of each vector's residual to
its list's centroid, two dimensions per sub-quantizer, searched with FAISS's
SIMD "fast scan" (``IndexIVFPQFastScan``). On the 100k benchmark catalog's
capability vectors and 893 MetaTool query texts, keeping 512 hits a text
(docs/query-profile.md, fifteenth round): this layout at ``nprobe`` 32 took
105 µs a text for recall@50 0.982 of the exact top 50, where 8-bit scalar
codes (``IndexIVFScalarQuantizer``) at ``nprobe`` 16 took 262 µs for 0.947 -
decoding each scalar code bound that scan. The codes are a quarter the size.

Ids are the caller's int64 (a slot). Fast-scan lists cannot remove one id
through a direct map, and removing without one reads every list (~5 ms at 1M
agents), so a removed id is only marked stale -- its hits are dropped from
every search -- and the stale ids leave the lists together: when there are
more than STALE_MAX, before any add (an id may come back) and before a save.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]
Ids = npt.NDArray[np.int64]


CANDIDATE_BASE = 100_000  # catalog size at which `candidates` applies as configured
MAX_CANDIDATES = 10_000
STALE_MAX = 1024  # removed ids marked, not yet taken out of the lists
PQ_BITS = 4  # fast scan's code size per sub-quantizer


@dataclass(frozen=True, slots=True)
class AnnSettings:
    exact_max: int = 20_000  # up to this many agents: exhaustive (exact) scoring
    candidates: int = 512  # per source for the whole intent, at CANDIDATE_BASE agents
    # by vector for each part of a compound intent (``ans.text.segments``), at
    # CANDIDATE_BASE agents; 0: the parts add none (see part_candidates_at)
    part_candidates: int = 64
    nprobe: int = 32  # inverted lists visited per search (of ~sqrt(n))
    train_size: int = 40_000  # vectors sampled to train the coarse quantizer
    threads: int = 1  # FAISS threads (the server's event loop shares the cores)
    seed: int = 1234
    # the exhaustive scan's int8 layout (ans.index.layout): "auto" measures this
    # machine at start-up; "packed" or "streamed" pins it
    scan_layout: str = "auto"
    # width of the bundled embedder's vectors (128 or 256): 128 halves what every
    # scan and row gather reads, for a little recall (docs/scale.md)
    embedding_dims: int = 256

    def candidates_at(self, live: int) -> int:
        """Candidates per source for the whole intent, ``live`` agents indexed:
        ``candidates`` up to CANDIDATE_BASE agents, then growing like sqrt(n), as
        the lists do. Each source's top-k must reach the same depth of the fused
        ranking, and at 1M agents a fixed 512 fell to recall@50 0.93 against
        exhaustive scoring (bench/index_scale.py)."""
        return _scaled(self.candidates, live)

    def part_candidates_at(self, live: int) -> int:
        """Candidates by vector for each part of a compound intent, scaled as
        :meth:`candidates_at` and never more than it. The whole intent's
        candidates carry its parts' words (BM25, tags) and most of their
        meaning; each part adds only its nearest few, for the agent that does
        one part alone and would not reach the whole intent's top-k. At 100k
        agents with MetaTool's 199 tools among them, 64 by vector instead of 512
        from every source kept MetaTool's recall@1, recall@5 and nDCG@10 within
        0.001 and cut ~17% of a DISCOVER's CPU in process (bench/part_candidates.py,
        bench/query_profile.py; docs/query-profile.md seventeenth round)."""
        if self.part_candidates <= 0:
            return 0
        return min(self.candidates_at(live), _scaled(self.part_candidates, live))


def _scaled(base: int, live: int) -> int:
    scale = math.sqrt(max(live, 1) / CANDIDATE_BASE)
    return min(MAX_CANDIDATES, max(base, round(base * scale)))


def nlist_for(n: int) -> int:
    """Inverted lists for n vectors: about sqrt(n), within [16, 4096]."""
    return int(min(4096, max(16, round(math.sqrt(max(n, 1))))))


def sub_quantizers(dim: int) -> int:
    """Two dimensions per 4-bit sub-quantizer (one per dimension for an odd dim)."""
    return dim // 2 if dim % 2 == 0 else dim


class AnnIndex:
    """One IVF-PQ fast-scan inner-product index. Not thread-safe; callers lock."""

    def __init__(self, index: faiss.Index, nprobe: int) -> None:
        self._index = index
        ivf = faiss.extract_index_ivf(index)
        # never more than there are lists: fast scan then scores garbage (2e31)
        self.nprobe = min(nprobe, int(ivf.nlist))
        ivf.nprobe = self.nprobe
        self._stale: set[int] = set()
        self._stale_ids: Ids | None = None  # ``_stale`` as a sorted array, when read

    @classmethod
    def build(cls, dim: int, vectors: Vectors, ids: Ids, settings: AnnSettings) -> AnnIndex:
        faiss.omp_set_num_threads(max(1, settings.threads))
        nlist = nlist_for(len(vectors))
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFPQFastScan(
            quantizer, dim, nlist, sub_quantizers(dim), PQ_BITS, faiss.METRIC_INNER_PRODUCT
        )
        index.by_residual = True  # codes of the offset from the list's centroid
        index.cp.seed = settings.seed
        index.pq.cp.seed = settings.seed
        rng = np.random.default_rng(settings.seed)
        sample_n = min(len(vectors), max(settings.train_size, 40 * nlist))
        sample = vectors[np.sort(rng.choice(len(vectors), sample_n, replace=False))]
        index.train(np.ascontiguousarray(sample, dtype=np.float32))
        ann = cls(index, settings.nprobe)
        ann.add(vectors, ids)
        return ann

    def __len__(self) -> int:
        return int(self._index.ntotal) - len(self._stale)

    def add(self, vectors: Vectors, ids: Ids) -> None:
        if len(ids):
            self._flush()  # an id coming back must not meet its stale entry
            self._index.add_with_ids(
                np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(ids, dtype=np.int64)
            )

    def remove(self, ids: Ids) -> None:
        """Mark the ids stale; they leave the lists in one pass (:meth:`_flush`)."""
        if len(ids):
            self._stale.update(int(i) for i in ids)
            self._stale_ids = None
            if len(self._stale) > STALE_MAX:
                self._flush()

    def _flush(self) -> None:
        if self._stale:
            self._index.remove_ids(self._stale_array())  # type: ignore[arg-type]
            self._stale.clear()
            self._stale_ids = None

    def _stale_array(self) -> Ids:
        if self._stale_ids is None:
            self._stale_ids = np.array(sorted(self._stale), dtype=np.int64)
        return self._stale_ids

    def search(self, queries: Vectors, k: int) -> Ids:
        """The ids of the (approximately) k best matches of every query, flattened
        query by query, in no particular order within a query (missing hits
        dropped)."""
        return self.search_floors(queries, k)[0]

    def search_floors(self, queries: Vectors, k: int) -> tuple[Ids, Vectors]:
        """:meth:`search`, and per query the lowest score it kept when it had
        to choose (-inf when it kept every hit): the score another source's
        vector must reach to have been among them (FAISS cannot tell exactly
        k hits from more: k found sets the floor). Stale ids count towards the
        k, as they did when chosen, and are dropped from what is returned."""
        floors: Vectors = np.full(len(queries), -np.inf, dtype=np.float32)
        if len(self) == 0 or len(queries) == 0:
            return np.zeros(0, dtype=np.int64), floors
        q = np.ascontiguousarray(queries, dtype=np.float32)
        dist, ids = self._index.search(q, k)
        full = ids[:, -1] >= 0
        floors[full] = dist[full, -1]
        flat: Ids = ids.ravel()
        keep = flat >= 0
        if self._stale:
            keep &= ~np.isin(flat, self._stale_array())
        return flat[keep], floors

    def save(self, path: Path) -> None:
        self._flush()
        faiss.write_index(self._index, str(path))

    @classmethod
    def load(cls, path: Path, nprobe: int) -> AnnIndex:
        index = faiss.read_index(str(path))
        return cls(index, nprobe)

    @property
    def layout_current(self) -> bool:
        """Whether the lists have this code's layout (an older snapshot's 8-bit
        scalar lists are rebuilt by the caller)."""
        ix = self._index
        return isinstance(ix, faiss.IndexIVFPQFastScan) and bool(ix.by_residual)
