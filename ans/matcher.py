"""Capability matching: embeddings of each agent's job description and
capability data in a FAISS inner-product index over normalized vectors.

The matcher sits behind :class:`CapabilityMatcher` so its internals can be
replaced (the capability-matching issue will). This version keeps, per
agent, one vector per *facet* (description, methods, modalities, tools,
zones, tags, examples) and a *profile* vector — the normalized weighted sum
of the facet vectors — in a FAISS ``IndexFlatIP``:

* a DISCOVER without ``capability_domains`` scores every agent by the cosine
  between the intent and its profile (FAISS ``range_search`` above a floor);
* with ``capability_domains``, the profile is rebuilt from the description
  plus only the named domains' facets, and scored exactly with NumPy.

``capability_match_score = clamp(cosine, 0, 1)`` rounded to six decimals:
deterministic for identical inputs and index contents.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import faiss
import numpy as np
import numpy.typing as npt

from .ranking import PRECISION

Vectors = npt.NDArray[np.float32]

FACETS = ("description", "methods", "modalities", "tools", "zones", "tags", "examples")
# A priori facet weights (not fitted on any evaluation data): the description
# carries the most signal, tools/tags/examples are specific, the rest is context.
FACET_WEIGHTS = np.array([2.0, 0.5, 0.5, 1.0, 0.5, 1.0, 1.0], dtype=np.float32)
# DISCOVER capability_domains name -> facet (version and budget carry no text).
DOMAIN_FACETS: dict[str, str | None] = {
    "methods": "methods",
    "modalities": "modalities",
    "tools": "tools",
    "zones": "zones",
    "tags": "tags",
    "examples": "examples",
    "version": None,
    "budget": None,
}


class Embedder(Protocol):
    dim: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """float32 (len(texts), dim), each row L2-normalized (zero for empty text)."""
        ...


def normalize_rows(v: npt.NDArray[Any]) -> Vectors:
    v = np.asarray(v, dtype=np.float32)
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    out = np.zeros_like(v)
    np.divide(v, norms, out=out, where=norms > 1e-12)
    return out


class WordLlamaEmbedder:
    """The default embedder: wordllama's bundled 256-d weights, never downloaded."""

    def __init__(self, dim: int = 256) -> None:
        import wordllama
        from wordllama import WordLlama

        self._wl = WordLlama.load(
            dim=dim, cache_dir=Path(wordllama.__file__).parent, disable_download=True
        )
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        safe = [t if t.strip() else "" for t in texts]
        raw = self._wl.embed(list(safe), norm=False)
        vecs = normalize_rows(np.nan_to_num(raw))
        for i, t in enumerate(safe):
            if not t:
                vecs[i] = 0.0
        return vecs


@dataclass(frozen=True, slots=True)
class CapabilityProfile:
    """The text an agent is matched on, by facet."""

    canonical_id: str
    facets: Mapping[str, str]


def profile_from(manifest: Mapping[str, Any], capabilities: Mapping[str, Any]) -> CapabilityProfile:
    def words(items: Any) -> str:
        if not isinstance(items, list):
            return ""
        parts = []
        for it in items:
            if isinstance(it, dict):
                parts.append(" ".join(str(it.get(k, "")) for k in ("name", "description", "text")))
            else:
                parts.append(str(it))
        return ". ".join(p.replace("_", " ").replace("-", " ") for p in parts if p.strip())

    label = str(manifest.get("agent_label", "")).replace("-", " ")
    methods = capabilities.get("supported_methods") or manifest.get("supported_methods")
    return CapabilityProfile(
        canonical_id=str(manifest["canonical_id"]),
        facets={
            "description": f"{label}. {manifest.get('job_description', '')}",
            "methods": words(methods).lower(),
            "modalities": words(capabilities.get("modalities")),
            "tools": words(capabilities.get("tools")),
            "zones": words(
                [
                    z.removeprefix("zone:")
                    for z in capabilities.get("zones_accepted", [])
                    if isinstance(z, str)
                ]
            ),
            "tags": words(capabilities.get("tags")),
            "examples": words(capabilities.get("examples")),
        },
    )


class CapabilityMatcher(Protocol):
    def embed_profile(self, profile: CapabilityProfile) -> Vectors:
        """The expensive part of an upsert, done before any lock is taken."""
        ...

    def upsert(self, profile: CapabilityProfile, facet_vectors: Vectors | None = None) -> None: ...
    def remove(self, canonical_id: str) -> None: ...
    def scores(
        self, intent: str, domains: tuple[str, ...] | None, floor: float
    ) -> dict[str, float]:
        """capability_match_score of every agent scoring at least ``floor``."""
        ...

    def __len__(self) -> int: ...


class FaissMatcher:
    """Facet vectors in NumPy, profile vectors in a FAISS IndexFlatIP (thread-safe)."""

    def __init__(self, embedder: Embedder, query_cache: int = 1024) -> None:
        self._emb = embedder
        self._dim = embedder.dim
        self._lock = threading.RLock()
        self._index = faiss.IndexIDMap2(faiss.IndexFlatIP(self._dim))
        self._facets = np.zeros((0, len(FACETS), self._dim), dtype=np.float32)
        self._slot_of: dict[str, int] = {}
        self._id_of: list[str | None] = []
        self._free: list[int] = []
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._cache_size = query_cache

    def __len__(self) -> int:
        return len(self._slot_of)

    # -- mutation ------------------------------------------------------------------
    def embed_profile(self, profile: CapabilityProfile) -> Vectors:
        return self._emb.embed([profile.facets.get(f, "") for f in FACETS])

    def upsert(self, profile: CapabilityProfile, facet_vectors: Vectors | None = None) -> None:
        vecs = facet_vectors if facet_vectors is not None else self.embed_profile(profile)
        profile_vec = normalize_rows((FACET_WEIGHTS[:, None] * vecs).sum(axis=0, keepdims=True))
        with self._lock:
            slot = self._slot_of.get(profile.canonical_id)
            if slot is None:
                slot = self._free.pop() if self._free else self._grow()
                self._slot_of[profile.canonical_id] = slot
                self._id_of[slot] = profile.canonical_id
            else:
                self._index.remove_ids(np.array([slot], dtype=np.int64))  # type: ignore[arg-type]
            self._facets[slot] = vecs
            self._index.add_with_ids(profile_vec, np.array([slot], dtype=np.int64))

    def _grow(self) -> int:
        slot = len(self._id_of)
        if slot >= self._facets.shape[0]:
            cap = max(64, self._facets.shape[0] * 2)
            grown = np.zeros((cap, len(FACETS), self._dim), dtype=np.float32)
            grown[: self._facets.shape[0]] = self._facets
            self._facets = grown
        self._id_of.append(None)
        return slot

    def remove(self, canonical_id: str) -> None:
        with self._lock:
            slot = self._slot_of.pop(canonical_id, None)
            if slot is None:
                return
            self._index.remove_ids(np.array([slot], dtype=np.int64))  # type: ignore[arg-type]
            self._facets[slot] = 0.0
            self._id_of[slot] = None
            self._free.append(slot)

    # -- query -------------------------------------------------------------------------
    def query_vector(self, intent: str) -> Vectors:
        with self._lock:
            hit = self._cache.get(intent)
            if hit is not None:
                self._cache.move_to_end(intent)
                return hit
        vec = self._emb.embed([intent])
        with self._lock:
            self._cache[intent] = vec
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return vec

    def scores(
        self, intent: str, domains: tuple[str, ...] | None, floor: float
    ) -> dict[str, float]:
        q = self.query_vector(intent)
        if not np.any(q):
            return {}
        with self._lock:
            if domains is None:
                return self._profile_scores(q, floor)
            return self._facet_scores(q, domains, floor)

    def _profile_scores(self, q: Vectors, floor: float) -> dict[str, float]:
        if self._index.ntotal == 0:
            return {}
        # range_search returns inner products > radius; nudge so that == floor counts.
        _, sims, ids = self._index.range_search(q, float(floor) - 1e-7)
        out: dict[str, float] = {}
        for slot, sim in zip(ids.tolist(), sims.tolist(), strict=True):
            score = round(min(1.0, max(0.0, sim)), PRECISION)
            cid = self._id_of[slot]
            if cid is not None and score >= floor:
                out[cid] = score
        return out

    def _facet_scores(self, q: Vectors, domains: tuple[str, ...], floor: float) -> dict[str, float]:
        chosen = {"description"} | {f for d in domains if (f := DOMAIN_FACETS.get(d))}
        mask = np.array([f in chosen for f in FACETS], dtype=np.float32)
        n = len(self._id_of)
        if n == 0:
            return {}
        combined = np.einsum("nfd,f->nd", self._facets[:n], FACET_WEIGHTS * mask)
        sims = normalize_rows(combined) @ q[0]
        out: dict[str, float] = {}
        for slot in np.nonzero(sims >= floor - 1e-7)[0].tolist():
            cid = self._id_of[slot]
            score = round(min(1.0, max(0.0, float(sims[slot]))), PRECISION)
            if cid is not None and score >= floor:
                out[cid] = score
        return out
