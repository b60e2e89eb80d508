"""Text embedders: the :class:`Embedder` protocol the index is built on, the
default :class:`WordLlamaEmbedder` (bundled weights, never downloaded), and the
fingerprint that ties a snapshot to the model that wrote it.

Owns turning text into vectors (and the LRU cache of query-text vectors);
knows nothing about agents or the index.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..text import content_text

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    dim: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """float32 (len(texts), dim), each row L2-normalized (zero for empty text)."""
        ...

    def embed_sums(self, texts: Sequence[str]) -> tuple[Vectors, Vectors]:
        """(sum of token vectors, token count) per text: (n, dim) and (n,)."""
        ...


def normalize_rows(v: npt.NDArray[Any]) -> Vectors:
    v = np.asarray(v, dtype=np.float32)
    # np.linalg.norm's own operations for real rows, without its dispatch
    norms = np.sqrt(np.add.reduce(v * v, axis=-1, keepdims=True))
    out = np.zeros_like(v)
    np.divide(v, norms, out=out, where=norms > 1e-12)
    return out


# Texts embedded per gather (profiles at ACTIVATE/import come in thousands): a
# chunk's temporary is tokens x dim floats, ~3 MB for 256 profile texts.
CHUNK_TEXTS = 256


WORDLLAMA_FINGERPRINT = "wordllama-"  # how the bundled embedder's fingerprints begin
# Widths the bundled embedder serves ([index] embedding_dims): the 256-d weights
# as shipped, or their leading 128 columns (wordllama is Matryoshka-trained, so
# the prefix is a model of its own; docs/query-profile.md, twenty-first round).
EMBEDDING_DIMS = (128, 256)
BUNDLED_DIM = 256


class WordLlamaEmbedder:
    """The default embedder: wordllama's bundled 256-d weights, never downloaded,
    used whole or as their 128-d Matryoshka prefix (``dim``).

    wordllama embeds by averaging static token vectors; we pool ourselves so
    that the per-text token sum and count are available (exact embeddings of
    concatenated facets) and empty texts give a zero vector instead of NaN."""

    def __init__(self, dim: int = BUNDLED_DIM) -> None:
        if dim not in EMBEDDING_DIMS:
            raise ValueError(f"the bundled embedder serves {EMBEDDING_DIMS} dimensions, not {dim}")
        # The tokenizer's batch call otherwise hands even a 3-text query to a
        # thread pool whose spinning doubles its CPU (130 vs 62 us measured);
        # a request is one core here, and import already runs one process per
        # core. Set before the tokenizer is first used; an explicit setting wins.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import wordllama
        from wordllama import WordLlama

        wl = WordLlama.load(
            dim=BUNDLED_DIM, cache_dir=Path(wordllama.__file__).parent, disable_download=True
        )
        # The token rows (vocab x dim, 32 MB). A batch's tokens are gathered as
        # contiguous rows, then transposed (dim x tokens) so that each text's
        # sum runs along contiguous memory: the same additions in the same
        # order as summing its token rows, ~6x faster. A transposed copy of the
        # table (gathering columns directly) read one float per cache line:
        # ~150 -> ~70 us for a query's 3 texts, 717 -> 547 us a profile at import.
        # A narrower width keeps the leading columns (the Matryoshka prefix).
        table = np.ascontiguousarray(wl.embedding[:, :dim], dtype=np.float32)
        self._table = table
        self._vocab = int(table.shape[0])
        self._tok = wl.tokenizer
        self._encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        self.dim = int(table.shape[1])
        # no padding: we pool per text ourselves (padding to the longest text in a
        # batch would tokenize and gather pad tokens for nothing)
        self._tok.no_padding()
        self._tok.no_truncation()
        digest = hashlib.sha256(table[:64].tobytes()).hexdigest()[:16]
        self.fingerprint = f"{WORDLLAMA_FINGERPRINT}{self.dim}-{self._vocab}-{digest}"
        # wordllama is Matryoshka-trained: its leading 128 dims are an embedding too
        self.prefix_dims = min(128, self.dim)

    def embed_sums(self, texts: Sequence[str]) -> tuple[Vectors, Vectors]:
        sums = np.zeros((len(texts), self.dim), dtype=np.float32)
        counts = np.zeros(len(texts), dtype=np.float32)
        if not texts:
            return sums, counts
        # The ids alone: the fast batch call skips the offsets and masks an
        # Encoding otherwise computes (the same ids; ~33 -> ~23 us a query).
        encoded = self._encode(list(texts), add_special_tokens=False)
        top = self._vocab - 1
        ids = [enc.ids for enc in encoded]
        lens = np.array([len(i) for i in ids], dtype=np.int64)
        flat = np.array(list(chain.from_iterable(ids)), dtype=np.int64)
        np.minimum(flat, top, out=flat)  # token ids are never negative
        counts[:] = lens
        ends = np.cumsum(lens)
        for a in range(0, len(texts), CHUNK_TEXTS):  # a bounded temporary per chunk
            b = min(len(texts), a + CHUNK_TEXTS)
            lo = int(ends[a - 1]) if a else 0
            hi = int(ends[b - 1])
            nz = np.nonzero(lens[a:b])[0]
            if not len(nz):
                continue
            starts = (ends[a:b] - lens[a:b])[nz] - lo
            columns = np.ascontiguousarray(self._table.take(flat[lo:hi], axis=0).T)
            sums[a + nz] = np.add.reduceat(columns, starts, axis=1).T
        return sums, counts

    def embed(self, texts: Sequence[str]) -> Vectors:
        return normalize_rows(self.embed_sums(texts)[0])


def embedder_fingerprint(embedder: Embedder) -> str:
    """Identifies the embedding model, so a snapshot is never read with another one."""
    fp = getattr(embedder, "fingerprint", None)
    if isinstance(fp, str):
        return fp
    return f"{type(embedder).__module__}.{type(embedder).__qualname__}/{embedder.dim}"


class QueryVectors:
    """Normalized embeddings of query texts (of their content words), with an
    LRU cache of ``size`` texts (0: none). Thread-safe; the embedder runs
    outside the lock."""

    def __init__(self, embedder: Embedder, size: int) -> None:
        self._emb = embedder
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._size = size

    def vectors(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self._emb.dim), dtype=np.float32)
        missing: list[int] = []
        with self._lock:
            for i, t in enumerate(texts):
                hit = self._cache.get(t)
                if hit is None:
                    missing.append(i)
                else:
                    self._cache.move_to_end(t)
                    out[i] = hit
        if missing:
            vecs = self._emb.embed([content_text(texts[i]) for i in missing])
            with self._lock:
                for i, v in zip(missing, vecs, strict=True):
                    out[i] = v
                    if self._size > 0:
                        self._cache[texts[i]] = v
                while len(self._cache) > self._size:
                    self._cache.popitem(last=False)
        return out
