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
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .postings import SlotPostings
from .text import words

K1 = 1.2
B = 0.75

FloatArray = npt.NDArray[np.float32]
Ints = npt.NDArray[np.int32]


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
        return {k: bytes(v) for k, v in tf.items()}

    def _forget(self, slot: int) -> None:
        if slot < len(self._has) and self._has[slot]:
            self._total -= self._lengths[slot]
            self._lengths[slot] = 0.0
            self._len_all[slot] = 0.0
            self._has[slot] = False
            self._docs -= 1

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
        """:meth:`accumulate` for several texts at once (an intent and its
        segments share their words). Every distinct word's postings are read
        and scored once, in one vectorized pass over all of them; each text
        then sums the contributions of its own words (a ``bincount``), so the
        cost no longer grows with a fixed per-word NumPy overhead."""
        word_sets = [sorted(set(words(q))) for q in queries]
        n_docs = self._docs
        none = np.zeros(0, dtype=np.int32)
        if n_docs == 0:
            return [(np.zeros(n_slots, dtype=np.float32), none) for _ in queries]
        vocab = sorted(set().union(*word_sets))
        position = {w: i for i, w in enumerate(vocab)}
        unseen_idf = math.log(1.0 + (n_docs + 0.5) / 0.5)
        idf = np.full(len(vocab), unseen_idf, dtype=np.float64)
        slot_parts: list[Ints] = []
        tf_parts: list[npt.NDArray[np.uint8]] = []
        owners: list[int] = []
        for i, w in enumerate(vocab):
            kid = self.postings.key_id.get(w)
            if kid is None:
                continue
            slots, tfs = self.postings.postings(kid)
            df = len(slots)
            if not df:
                continue
            idf[i] = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
            slot_parts.append(slots)
            tf_parts.append(tfs)
            owners.append(i)
        if slot_parts:
            maskf = mask.astype(np.float32)
            avg = max(float(self._total @ mask) / n_docs, 1e-9)
            slots_all = np.concatenate(slot_parts)
            f = np.concatenate(tf_parts) @ maskf
            word_of = np.repeat(np.array(owners, dtype=np.int32), [len(p) for p in slot_parts])
            nz = f > 0
            if not nz.all():
                slots_all, f, word_of = slots_all[nz], f[nz], word_of[nz]
            # Word counts are whole numbers: the sum over every facet is exact
            # either way, and per slot it is kept rather than recomputed.
            lengths = self._len_all if maskf.all() else self._lengths @ maskf
            norm = K1 * (1.0 - B + B * lengths.take(slots_all) / avg)
            contrib = idf[word_of] * f * (K1 + 1.0) / (f + norm)
        out: list[tuple[FloatArray, Ints]] = []
        for ws in word_sets:
            if not ws:
                out.append((np.zeros(n_slots, dtype=np.float32), none))
                continue
            ids = np.array([position[w] for w in ws], dtype=np.int32)
            max_total = float(idf[ids].sum()) * (K1 + 1.0)
            if not slot_parts:
                out.append((np.zeros(n_slots, dtype=np.float32), none))
                continue
            if len(ws) == len(vocab):
                sel_slots, sel_contrib = slots_all, contrib
            else:
                wanted = np.zeros(len(vocab), dtype=bool)
                wanted[ids] = True
                keep = wanted[word_of]  # np.isin sorts; a lookup table does not
                sel_slots, sel_contrib = slots_all[keep], contrib[keep]
            dense = np.bincount(sel_slots, weights=sel_contrib, minlength=n_slots)[:n_slots]
            scores = (dense / max_total).astype(np.float32)
            out.append((scores, sel_slots))
        return out

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
