"""A BM25 lexical index over the capability text of every agent, by facet.

Postings (:class:`ans.postings.SlotPostings`) map a content word to the slots
whose text holds it, with one term-frequency byte per facet, so a million
agents cost a few hundred bytes each. A query costs one vectorized pass per
query word. Scores are normalized *absolutely* into [0, 1]: the BM25 sum
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
            self._lengths, self._has = grown, has

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
        self._has[slot] = True
        self._docs += 1
        return {k: bytes(v) for k, v in tf.items()}

    def _forget(self, slot: int) -> None:
        if slot < len(self._has) and self._has[slot]:
            self._total -= self._lengths[slot]
            self._lengths[slot] = 0.0
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
        out = np.zeros(n_slots, dtype=np.float32)
        qwords = sorted(set(words(query)))
        n_docs = self._docs
        touched: list[Ints] = []
        if not qwords or n_docs == 0:
            return out, np.zeros(0, dtype=np.int32)
        avg = max(float(self._total @ mask) / n_docs, 1e-9)
        unseen_idf = math.log(1.0 + (n_docs + 0.5) / 0.5)
        max_total = 0.0
        maskf = mask.astype(np.float32)
        for w in qwords:
            kid = self.postings.key_id.get(w)
            slots, tfs = self.postings.postings(kid) if kid is not None else (None, None)
            df = 0 if slots is None else len(slots)
            idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5)) if df else unseen_idf
            max_total += idf * (K1 + 1.0)
            if not df or slots is None or tfs is None:
                continue
            f = tfs @ maskf
            nz = f > 0
            if not nz.all():
                slots, f = slots[nz], f[nz]
            if not len(slots):
                continue
            lengths = self._lengths[slots] @ maskf
            norm = K1 * (1.0 - B + B * lengths / avg)
            out[slots] += (idf * f * (K1 + 1.0) / (f + norm)).astype(np.float32)
            touched.append(slots)
        if max_total > 0:
            out /= np.float32(max_total)
        return out, (np.concatenate(touched) if touched else np.zeros(0, dtype=np.int32))

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
        lex._docs = int(lex._has.sum())
        return lex
