"""A BM25 lexical index over the capability text of every agent, by facet.

Postings map a content word to ``{slot: term frequency per facet}``; a
per-word NumPy view is cached and rebuilt only when that word's postings
change, so a query costs one vectorized pass per query word. Scores are
normalized *absolutely* into [0, 1]: the BM25 sum divided by its maximum
possible value for the query (every query word present, saturated), so a
lexical score does not depend on which other agents matched.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .text import words

K1 = 1.2
B = 0.75

FloatArray = npt.NDArray[np.float32]


class LexicalIndex:
    """Not thread-safe by itself; the capability index holds its lock around every call."""

    def __init__(self, n_facets: int) -> None:
        self._nf = n_facets
        self._postings: dict[str, dict[int, tuple[float, ...]]] = {}
        self._views: dict[str, tuple[npt.NDArray[np.int64], FloatArray]] = {}
        self._doc_words: dict[int, set[str]] = {}
        self._lengths = np.zeros((0, n_facets), dtype=np.float32)
        self._total = np.zeros(n_facets, dtype=np.float64)

    def __len__(self) -> int:
        return len(self._doc_words)

    def _ensure(self, slot: int) -> None:
        if slot >= self._lengths.shape[0]:
            grown = np.zeros((max(64, 2 * self._lengths.shape[0], slot + 1), self._nf), np.float32)
            grown[: self._lengths.shape[0]] = self._lengths
            self._lengths = grown

    def upsert(self, slot: int, facet_texts: Sequence[str]) -> None:
        self.remove(slot)
        self._ensure(slot)
        tf: dict[str, npt.NDArray[np.float32]] = {}
        for f, text in enumerate(facet_texts):
            counts = Counter(words(text))
            self._lengths[slot, f] = sum(counts.values())
            for w, c in counts.items():
                vec = tf.get(w)
                if vec is None:
                    vec = tf[w] = np.zeros(self._nf, dtype=np.float32)
                vec[f] = c
        self._total += self._lengths[slot]
        for w, vec in tf.items():
            self._postings.setdefault(w, {})[slot] = tuple(vec.tolist())
            self._views.pop(w, None)
        self._doc_words[slot] = set(tf)

    def remove(self, slot: int) -> None:
        old = self._doc_words.pop(slot, None)
        if old is None:
            return
        self._total -= self._lengths[slot]
        self._lengths[slot] = 0.0
        for w in old:
            posting = self._postings.get(w)
            if posting is not None:
                posting.pop(slot, None)
                if not posting:
                    del self._postings[w]
            self._views.pop(w, None)

    def _view(self, w: str) -> tuple[npt.NDArray[np.int64], FloatArray] | None:
        view = self._views.get(w)
        if view is None:
            posting = self._postings.get(w)
            if not posting:
                return None
            slots = np.fromiter(posting.keys(), dtype=np.int64, count=len(posting))
            tfs = np.array(list(posting.values()), dtype=np.float32)
            view = self._views[w] = (slots, tfs)
        return view

    def scores(self, query: str, mask: FloatArray, n_slots: int) -> tuple[FloatArray, list[str]]:
        """BM25 over the facets selected by ``mask`` (0/1 per facet), normalized to
        [0, 1], for slots [0, n_slots); and the query words that were scored."""
        out = np.zeros(n_slots, dtype=np.float32)
        qwords = sorted(set(words(query)))
        n_docs = len(self._doc_words)
        if not qwords or n_docs == 0:
            return out, qwords
        lengths = self._lengths[:n_slots] @ mask
        avg = max(float(self._total @ mask) / n_docs, 1e-9)
        unseen_idf = math.log(1.0 + (n_docs + 0.5) / 0.5)
        max_total = 0.0
        for w in qwords:
            view = self._view(w)
            df = 0 if view is None else len(view[0])
            idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5)) if df else unseen_idf
            max_total += idf * (K1 + 1.0)
            if view is None:
                continue
            slots, tfs = view
            f = tfs @ mask
            nz = f > 0
            if not np.any(nz):
                continue
            s, f = slots[nz], f[nz]
            norm = K1 * (1.0 - B + B * lengths[s] / avg)
            out[s] += (idf * f * (K1 + 1.0) / (f + norm)).astype(np.float32)
        if max_total > 0:
            out /= np.float32(max_total)
        return out, qwords
