"""Exact or approximate: when the capability index stops scoring every agent,
and where the candidates of a query come from when it does.

Owns the mode switch (FAISS indices built above ``settings.exact_max`` agents,
rebuilt when the catalog outgrows them fourfold, dropped below half of
``exact_max``), keeping those indices in step with the slot table, and the
candidate union of a query (capability ANN hits, the best BM25 and tag
postings, or an exact flat-scan top-k for a ``capability_domains`` query in
exact mode). Published examples reach the candidates through the capability
vector and BM25, which both read the "examples" facet; there is no example
ANN index (the example component is evidence, not ranked: ``.scoring``).
The FAISS wrapper itself is :mod:`ans.ann`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..ann import AnnIndex, AnnSettings
from .embedder import Vectors
from .scoring import LexicalHits, TagPasses
from .select import top_k
from .slots import Slots, SlotTable

# New agents are kept out of the inverted lists until there are this many
# (at least PENDING_MIN, else a 64th of the catalog): they are scanned exactly
# instead (:meth:`AnnMode.candidates`). Adding one agent to FAISS reallocates
# its whole inverted list, and with ``--workers`` every worker does so in its own
# memory: at 1M agents, 300 ACTIVATEs grew each worker by ~160 MB of list copies
# (docs/query-profile.md, fourteenth round). Scanning a 64th of the rows costs
# about a 64th of an exhaustive scan.
PENDING_MIN = 2048
PENDING_SHARE = 64
# A pending agent joins a query text's candidates when its exact similarity
# reaches the lowest one FAISS kept for that text, less this (FAISS scores 4-bit
# codes of 2-d residuals: on the 100k benchmark catalog its 512th score was
# within +0.0025 of the exact 512th at p99, docs/query-profile.md fifteenth round).
PENDING_SLACK = 0.01


class AnnMode:
    """The approximate indices (None in exact mode); not thread-safe, callers lock."""

    def __init__(self, settings: AnnSettings) -> None:
        self.settings = settings
        self.cap: AnnIndex | None = None
        self.built_for = 0  # agents the approximate index was sized for
        # slots placed since the lists were built and not in them (ordered set)
        self.pending: dict[int, None] = {}
        self._pending_slots: Slots | None = None  # ``pending`` as an array, when read

    @property
    def active(self) -> bool:
        return self.cap is not None

    def pending_max(self, live: int) -> int:
        return max(PENDING_MIN, live // PENDING_SHARE)

    def add(self, table: SlotTable, slots: Sequence[int]) -> None:
        """Index freshly placed slots (approximate mode only): pending, until
        there are more than :meth:`pending_max` of them."""
        if self.cap is None or not len(slots):
            return
        self.pending.update(dict.fromkeys(int(s) for s in slots))
        self._pending_slots = None
        if len(self.pending) > self.pending_max(len(table)):
            self.merge(table)

    def merge(self, table: SlotTable) -> None:
        """Add the pending slots to the inverted lists."""
        if self.cap is not None and self.pending:
            arr = self._pending_array()
            self.cap.add(table.cap.get(arr), arr)
        self._clear_pending()

    def _clear_pending(self) -> None:
        self.pending.clear()
        self._pending_slots = None

    def forget(self, table: SlotTable, slot: int) -> None:
        """Drop a slot before the table clears it (approximate mode only)."""
        if self.cap is None:
            return
        if slot in self.pending:
            del self.pending[slot]
            self._pending_slots = None
        else:
            self.cap.remove(np.array([slot], dtype=np.int64))

    def maybe_switch(self, table: SlotTable) -> None:
        n = len(table)
        if self.cap is None and n > self.settings.exact_max:
            self.build(table)
        elif self.cap is not None and n > 4 * self.built_for:
            self.build(table)  # the inverted lists were sized for a quarter of this
        elif self.cap is not None and n <= self.settings.exact_max // 2:
            self.cap = None  # back to exhaustive (with hysteresis)
            self._clear_pending()

    def build(self, table: SlotTable) -> None:
        """(Re)build the approximate indices over every indexed agent."""
        table.tags.compact()
        slots = table.live_slots()
        if not len(slots):
            return
        self.built_for = len(slots)
        self.cap = AnnIndex.build(table.dim, table.cap.get(slots), slots, self.settings)
        self._clear_pending()

    def save(self, directory: Path) -> None:
        """The inverted lists (the pending slots go in the snapshot's document)."""
        if self.cap is not None:
            self.cap.save(directory / "capability.faiss")

    def load(
        self, directory: Path, table: SlotTable, built_for: int, pending: Sequence[int] = ()
    ) -> bool:
        """The saved capability index and the slots that were pending (a
        snapshot from before 2026-11-26 also holds an example index,
        ``examples.faiss``: nothing reads it now). Lists of an older layout
        are rebuilt from the table's rows; whether they were (the index then
        differs from its snapshot)."""
        self.cap = AnnIndex.load(directory / "capability.faiss", self.settings.nprobe)
        self.built_for = built_for
        self.pending = dict.fromkeys(int(s) for s in pending)
        self._pending_slots = None
        if self.cap.layout_current:
            return False
        self.build(table)
        return True

    def _pending_array(self) -> Slots:
        if self._pending_slots is None:
            self._pending_slots = np.fromiter(
                self.pending, dtype=np.int64, count=len(self.pending)
            )
        return self._pending_slots

    def _pending_hits(
        self, table: SlotTable, qv: Vectors, floors: Vectors, k: int
    ) -> list[Slots]:
        """Per query vector, the pending slots whose exact similarity reaches
        what FAISS kept (``floors``, less PENDING_SLACK), at most k of them."""
        if not self.pending:
            return []
        pend = self._pending_array()
        sims = table.cap.scan_rows(qv, pend)
        out: list[Slots] = []
        for j in range(len(qv)):
            col = sims[:, j]
            keep = np.flatnonzero(col >= floors[j] - PENDING_SLACK)
            if len(keep) > k:
                keep = keep[top_k(col[keep], k)]
            out.append(pend[keep])
        return out

    def nearest(self, table: SlotTable, capability: Vectors) -> Slots:
        """The slots nearest one capability vector (routing equivalence)."""
        assert self.cap is not None
        k = 4 * self.settings.candidates
        q = capability[None, :]
        hits, floors = self.cap.search_floors(q, k)
        out: Slots = np.unique(np.concatenate([hits, *self._pending_hits(table, q, floors, k)]))
        return out

    def candidates(
        self,
        table: SlotTable,
        q: Vectors,
        lex: LexicalHits,
        tag_passes: TagPasses,
        n: int,
    ) -> Slots:
        """The union of each source's (FAISS, BM25, tags) best
        ``candidates_at(live)`` for the whole intent (row 0 of ``q``, ``lex``,
        ``tag_passes``) and the best ``part_candidates_at(live)`` by vector for
        each of its parts (the rows of ``q`` after it). A part's words are the
        intent's words, so the intent's BM25 and tag passes already read them;
        its meaning alone is not in the intent's vector."""
        live = len(table)
        k = self.settings.candidates_at(live)
        parts: list[npt.NDArray[np.integer]] = []
        if live <= k:
            return table.live_slots()
        for rows, depth in ((q[:1], k), (q[1:], self.settings.part_candidates_at(live))):
            qv = rows[rows.any(axis=1)]  # an empty text's vector is all zero
            if not len(qv) or depth <= 0:
                continue
            if self.cap is not None:
                hits, floors = self.cap.search_floors(qv, depth)
                parts.append(hits)
                parts.extend(self._pending_hits(table, qv, floors, depth))
            else:  # exact mode, capability_domains query: exact top-k by flat scan
                sims = table.cap.scan(qv, n)
                for col in sims.T:
                    parts.append(top_k(col, depth))
        for bm25 in lex[:1]:
            parts.append(top_touched(bm25.at, bm25.touched, k))
        for tag_dense, tag_list in tag_passes[:1]:
            if tag_dense is not None and tag_list:
                touched = np.concatenate([h for _, h in tag_list])
                parts.append(top_touched(tag_dense.take, touched, k))
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return self._union(parts, table.alive, n)

    @staticmethod
    def _union(
        parts: list[npt.NDArray[np.integer]], alive: npt.NDArray[np.bool_], n: int
    ) -> Slots:
        """The live slots in any of ``parts``, ascending, each once: one sort of
        the few thousand hits (a pass of marks over every slot cost ~2.5x more
        at 100k agents)."""
        hits = np.concatenate(parts)
        hits = hits[(hits >= 0) & (hits < n)]
        out: Slots = sorted_unique(hits[alive[hits]]).astype(np.int64, copy=False)
        return out


def top_touched(
    score_at: Callable[[Any], Vectors], touched: npt.NDArray[np.integer], k: int
) -> Slots:
    """The (at most) k touched slots with the highest score (``score_at(slots)``;
    ``touched`` may repeat a slot; only the best 2k entries are de-duplicated)."""
    if not len(touched):
        return np.zeros(0, dtype=np.int64)
    if len(touched) > 2 * k:
        touched = touched[top_k(score_at(touched), 2 * k)]
    uniq: Slots = sorted_unique(touched).astype(np.int64)
    if len(uniq) <= k:
        return uniq
    out: Slots = uniq[top_k(score_at(uniq), k)]
    return out


def sorted_unique(values: npt.NDArray[np.integer]) -> npt.NDArray[np.integer]:
    """``np.unique(values)`` (sorted, each once) for the ~1,000 hits of a
    top-k: a sort and a neighbour compare, ~6x cheaper than np.unique's
    hash-then-sort at that size."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    first = np.empty(len(ordered), dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    out: npt.NDArray[np.integer] = ordered[first]
    return out
