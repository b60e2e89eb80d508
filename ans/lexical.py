"""A BM25 lexical index over the capability text of every agent, by facet.

Postings (:class:`ans.postings.SlotPostings`) map a content word to the slots
whose text holds it, with one term-frequency byte per facet, so a million
agents cost a few hundred bytes each. A query costs one vectorized pass over
the postings of all its words. Scores are normalized *absolutely* into [0, 1]: the BM25 sum
divided by its maximum possible value for the query (every query word present,
saturated), so a lexical score does not depend on which other agents matched.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

from .postings import SlotPostings
from .text import words

K1 = 1.2
B = 0.75
# Postings whose BM25 contributions are kept between queries (8 bytes each, 12
# where a facet mask dropped some): the words queried most, until a write
# changes the collection statistics. 8M postings: the 2,000 varied intents of
# bench/load.py at 100k agents touch ~5.9M (~52 MB held), and at 2M postings
# (16 MB) every intent recomputed ~2 of its words: -6 to -9% of a DISCOVER's
# CPU in process for ~35 MB more per worker (docs/query-profile.md, ninth round).
IMPACT_CACHE = 1 << 23
# Facet masks whose per-slot lengths are kept (4 bytes a slot each).
MASKED_LENGTHS = 4

FloatArray = npt.NDArray[np.float32]
Ints = npt.NDArray[np.int32]


# One word's slots, their BM25 contributions, and whether the slots ascend.
Hit = tuple[Ints, npt.NDArray[np.float64], bool]
# Read at candidates (:meth:`LexicalScores.at`) instead of summed over every slot
# when the words' postings hold more than this many times as many entries as
# there are candidates: a binary search per candidate and word against a pass
# over every posting.
SPARSE_RATIO = 16


class LexicalScores:
    """Normalized BM25 of one query text over slots [0, n), read only where asked
    (:meth:`at`): a query reads a few thousand candidates of a catalog of a
    million. Kept as its words' contributions; summed over every slot (a
    ``bincount``, float64) only when a read needs it, else read at the asked
    slots alone -- the same additions in the same order, so the same bits."""

    __slots__ = ("_hits", "_sums", "_touched", "n", "total")

    def __init__(self, n: int, hits: list[Hit], total: float) -> None:
        self.n = n
        self.total = total
        self._hits = hits  # per query word held by some slot, in word order
        self._sums: npt.NDArray[np.float64] | None = None
        self._touched: Ints | None = None

    @property
    def sums(self) -> npt.NDArray[np.float64] | None:
        """Every slot's raw BM25 sum (None: no query word is held by any slot)."""
        if self._sums is None and self._hits:
            if len(self._hits) == 1:
                slots, contrib, _ = self._hits[0]
            else:
                slots = self.touched
                contrib = np.concatenate([h[1] for h in self._hits])
            self._sums = cast(
                npt.NDArray[np.float64], np.bincount(slots, weights=contrib, minlength=self.n)
            )
        return self._sums

    @property
    def touched(self) -> Ints:
        """The slots the postings touched (unsorted, may repeat)."""
        if self._touched is None:
            if not self._hits:
                self._touched = np.zeros(0, dtype=np.int32)
            elif len(self._hits) == 1:
                self._touched = self._hits[0][0]
            else:
                self._touched = np.concatenate([h[0] for h in self._hits])
        return self._touched

    def at(self, pick: npt.NDArray[np.integer] | slice) -> FloatArray:
        """The scores at ``pick`` (slots, or a slice of them)."""
        if not self._hits:
            size = len(range(self.n)[pick]) if isinstance(pick, slice) else len(pick)
            return np.zeros(size, dtype=np.float32)
        if isinstance(pick, slice):
            sums = self.sums
            assert sums is not None
            picked = sums[pick]
        elif self._sums is None and self._sparse(len(pick)):
            picked = self._sums_at(np.asarray(pick))
        else:
            sums = self.sums
            assert sums is not None
            picked = sums.take(pick)  # the same values as sums[pick], ~3x faster
        out: FloatArray = (picked / self.total).astype(np.float32)
        return out

    def _sparse(self, picked: int) -> bool:
        """Whether reading ``picked`` slots alone is cheaper than the dense sums,
        and possible: each word's slots ascending (the postings' base; a word
        with postings added one at a time since the last compaction may not be)."""
        entries = sum(len(h[0]) for h in self._hits)
        return entries > SPARSE_RATIO * picked and all(h[2] for h in self._hits)

    def _sums_at(self, pick: npt.NDArray[np.integer]) -> npt.NDArray[np.float64]:
        """The raw sums at ``pick``: each word's contribution added in word order,
        as the ``bincount`` of :attr:`sums` adds them."""
        out = np.zeros(len(pick), dtype=np.float64)
        for slots, contrib, _ in self._hits:
            if not len(slots):  # a word whose postings a facet mask emptied
                continue
            pos = np.searchsorted(slots, pick)
            np.minimum(pos, len(slots) - 1, out=pos)
            found = slots[pos] == pick
            out[found] += contrib[pos[found]]
        return out

    def dense(self) -> FloatArray:
        """Every slot's score."""
        return self.at(slice(0, self.n))


def ascending(slots: Ints) -> bool:
    """Whether ``slots`` is strictly ascending."""
    return len(slots) < 2 or bool((slots[1:] > slots[:-1]).all())


class LexicalIndex:
    """Not thread-safe by itself; the capability index holds its lock around every call."""

    def __init__(self, n_facets: int) -> None:
        self._nf = n_facets
        self.postings = SlotPostings(n_facets)
        self._lengths = np.zeros((0, n_facets), dtype=np.float32)
        # Per slot, the length over every facet: the common query (no
        # capability_domains) reads one float per posting instead of a row.
        self._len_all = np.zeros(0, dtype=np.float32)
        self._total = np.zeros(n_facets, dtype=np.float64)
        self._docs = 0
        self._has = np.zeros(0, dtype=bool)
        self._version = 0  # bumped by every document added or removed
        # keyed by (word id, facet mask bits): a capability_domains query's
        # contributions are kept as the common query's are
        self._impact_cache: OrderedDict[
            tuple[int, int], tuple[float, Ints, npt.NDArray[np.float64], bool]
        ] = OrderedDict()
        self._impact_size = 0
        self._impact_version = -1
        # per slot, the length over a restricted query's facets, by mask bits
        # (a few masks: DISCOVER's capability_domains sets), until the next write
        self._masked_lengths: OrderedDict[int, FloatArray] = OrderedDict()

    def __len__(self) -> int:
        return self._docs

    def _ensure(self, slot: int) -> None:
        if slot >= self._lengths.shape[0]:
            cap = max(64, 2 * self._lengths.shape[0], slot + 1)
            grown = np.zeros((cap, self._nf), np.float32)
            grown[: self._lengths.shape[0]] = self._lengths
            has = np.zeros(cap, dtype=bool)
            has[: len(self._has)] = self._has
            len_all = np.zeros(cap, np.float32)
            len_all[: len(self._len_all)] = self._len_all
            self._lengths, self._has, self._len_all = grown, has, len_all

    def _document(self, slot: int, facet_texts: Sequence[str]) -> dict[int, bytes]:
        self._ensure(slot)
        tf: dict[int, bytearray] = {}
        intern = self.postings.intern
        for f, text in enumerate(facet_texts):
            counts = Counter(words(text))
            self._lengths[slot, f] = sum(counts.values())
            for w, c in counts.items():
                kid = intern(w)
                row = tf.get(kid)
                if row is None:
                    row = tf[kid] = bytearray(self._nf)
                row[f] = min(c, 255)
        self._total += self._lengths[slot]
        self._len_all[slot] = self._lengths[slot].sum()
        self._has[slot] = True
        self._docs += 1
        self._version += 1
        return {k: bytes(v) for k, v in tf.items()}

    def _forget(self, slot: int) -> None:
        if slot < len(self._has) and self._has[slot]:
            self._total -= self._lengths[slot]
            self._lengths[slot] = 0.0
            self._len_all[slot] = 0.0
            self._has[slot] = False
            self._docs -= 1
            self._version += 1

    def upsert(self, slot: int, facet_texts: Sequence[str]) -> None:
        self._forget(slot)
        self.postings.put(slot, self._document(slot, facet_texts))

    def upsert_many(self, slots: Sequence[int], docs: Sequence[Sequence[str]]) -> None:
        for slot in slots:
            self._forget(slot)
        self.postings.add_many(
            slots, [self._document(s, d) for s, d in zip(slots, docs, strict=True)]
        )

    def remove(self, slot: int) -> None:
        self._forget(slot)
        self.postings.remove(slot)

    def accumulate(self, query: str, mask: FloatArray, n_slots: int) -> tuple[FloatArray, Ints]:
        """BM25 over the facets selected by ``mask`` (0/1 per facet), normalized to
        [0, 1], as a dense array over slots [0, n_slots); and the slots that
        hold at least one query word (unsorted, may repeat)."""
        return self.accumulate_many([query], mask, n_slots)[0]

    def accumulate_many(
        self, queries: Sequence[str], mask: FloatArray, n_slots: int
    ) -> list[tuple[FloatArray, Ints]]:
        """:meth:`accumulate` for several texts at once (:meth:`score_many`, dense)."""
        return [(h.dense(), h.touched) for h in self.score_many(queries, mask, n_slots)]

    def score_many(
        self, queries: Sequence[str], mask: FloatArray, n_slots: int
    ) -> list[LexicalScores]:
        """BM25 of several texts at once (an intent and its
        segments share their words). Every distinct word's postings are read
        and scored once; each text then sums the contributions of its own
        words (a ``bincount``). With every facet allowed (the common query),
        a word's per-posting contributions are kept (:meth:`_impacts`) until
        the next write changes the collection statistics."""
        word_sets = [sorted(set(words(q))) for q in queries]
        n_docs = self._docs
        if n_docs == 0:
            return [LexicalScores(n_slots, [], 1.0) for _ in queries]
        vocab = sorted(set().union(*word_sets))
        position = {w: i for i, w in enumerate(vocab)}
        unseen_idf = math.log(1.0 + (n_docs + 0.5) / 0.5)
        idf = np.full(len(vocab), unseen_idf, dtype=np.float64)
        maskf = mask.astype(np.float32)
        full = bool(maskf.all())
        # a 0/1 mask (DISCOVER's) is a cache key; any other weighting is not cached
        # (a plain loop over the few facets: np.isin costs ~20 us a call)
        weights = maskf.tolist()
        bits = (
            sum(1 << j for j, m in enumerate(weights) if m)
            if all(m in (0.0, 1.0) for m in weights)
            else None
        )
        if self._impact_version != self._version:
            self._impact_cache.clear()
            self._masked_lengths.clear()
            self._impact_size = 0
            self._impact_version = self._version
        avg = max(float(self._total @ mask) / n_docs, 1e-9)
        lengths: FloatArray | None = None
        per_word: list[Hit | None] = [None] * len(vocab)
        for i, w in enumerate(vocab):
            kid = self.postings.key_id.get(w)
            if kid is None:
                continue
            key = (kid, bits) if bits is not None else None
            hit = self._impact_cache.get(key) if key is not None else None
            if hit is not None and key is not None:
                self._impact_cache.move_to_end(key)
                idf[i], slots, contrib, ordered = hit
                per_word[i] = (slots, contrib, ordered)
                continue
            slots, tfs = self.postings.postings(kid)
            df = len(slots)
            if not df:
                continue
            idf[i] = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
            f = tfs @ maskf
            nz = f > 0
            if not nz.all():
                slots, f = slots[nz], f[nz]
            if lengths is None:
                # Word counts are whole numbers: the sum over every facet is exact
                # either way, and per slot it is kept rather than recomputed.
                lengths = self._len_all if full else self._masked(maskf, bits)
            norm = K1 * (1.0 - B + B * lengths.take(slots) / avg)
            contrib = idf[i] * f * (K1 + 1.0) / (f + norm)
            word = per_word[i] = (slots, contrib, ascending(slots))
            if key is not None:
                self._keep_impacts(key, idf[i], word)
        out: list[LexicalScores] = []
        for ws in word_sets:
            ids = [position[w] for w in ws]
            hits = [h for i in ids if (h := per_word[i]) is not None]
            if not hits:
                out.append(LexicalScores(n_slots, [], 1.0))
                continue
            max_total = float(idf[np.array(ids, dtype=np.int32)].sum()) * (K1 + 1.0)
            out.append(LexicalScores(n_slots, hits, max_total))
        return out

    def _masked(self, maskf: FloatArray, bits: int | None) -> FloatArray:
        """Every slot's length over the masked facets (kept for MASKED_LENGTHS
        masks: a 1M x 7 product costs ~5 ms)."""
        if bits is None:
            return self._lengths @ maskf
        got = self._masked_lengths.get(bits)
        if got is None:
            got = self._lengths @ maskf
            self._masked_lengths[bits] = got
            while len(self._masked_lengths) > MASKED_LENGTHS:
                self._masked_lengths.popitem(last=False)
        else:
            self._masked_lengths.move_to_end(bits)
        return got

    def _keep_impacts(self, kid: tuple[int, int], idf: float, hit: Hit) -> None:
        """Keep one word's contributions (LRU, at most IMPACT_CACHE postings)."""
        slots, contrib, ordered = hit
        if len(slots) > IMPACT_CACHE // 4:
            return
        self._impact_cache[kid] = (idf, slots, contrib, ordered)
        self._impact_size += len(slots)
        while self._impact_size > IMPACT_CACHE:
            _, (_, old, _, _) = self._impact_cache.popitem(last=False)
            self._impact_size -= len(old)

    def scores(self, query: str, mask: FloatArray, n_slots: int) -> tuple[FloatArray, list[str]]:
        """Dense normalized BM25 over slots [0, n_slots), and the scored query words."""
        out, _ = self.accumulate(query, mask, n_slots)
        return out, sorted(set(words(query)))

    # -- snapshot --------------------------------------------------------------------
    def state(self) -> dict[str, npt.NDArray[np.generic]]:
        return {
            **{f"post_{k}": v for k, v in self.postings.state().items()},
            "lengths": self._lengths,
            "total": self._total,
            "has": self._has,
        }

    @classmethod
    def restore(
        cls, n_facets: int, keys: list[str], arrays: dict[str, npt.NDArray[np.generic]]
    ) -> LexicalIndex:
        lex = cls(n_facets)
        lex.postings = SlotPostings.restore(
            n_facets, keys, {k[5:]: v for k, v in arrays.items() if k.startswith("post_")}
        )
        lex._lengths = np.asarray(arrays["lengths"], dtype=np.float32)
        lex._total = np.asarray(arrays["total"], dtype=np.float64)
        lex._has = np.asarray(arrays["has"], dtype=bool)
        lex._len_all = lex._lengths.sum(axis=1, dtype=np.float32)
        if len(lex._len_all) != len(lex._has):
            raise ValueError("lexical snapshot is inconsistent")
        lex._docs = int(lex._has.sum())
        return lex
