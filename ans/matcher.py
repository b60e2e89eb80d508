"""Capability matching: which agents can do what the intent asks.

Following the efficient-discovery profile (sections 4.4, 4.5, 7), every
registration feeds complementary indices, all built from the same ACTIVATE:

* **tag index** — an inverted index from normalized tag to agents. Query tags
  are the 1..3-word n-grams of the intent that are in the tag vocabulary.
* **context index** — embeddings of the job description (with the agent
  label split into words: ``HousePurchasingTool`` -> "House Purchasing Tool")
  and of the whole capability document. Per facet we keep the *sum* of token
  embeddings and the token count, so the capability vector for any subset of
  capability domains is exact (it equals embedding the concatenated text).
* **example index** — one vector per published example task, in a FAISS
  inner-product index; an agent's example score is its *best* example (never
  an average), so one matching capability of a multi-purpose agent counts.
* **lexical index** — BM25 over the same text (:mod:`ans.lexical`).

Fusion into ``capability_match_score`` is a weighted mean of the components
that apply to the agent (example only when it published examples, tag only
when the intent names a known tag and the agent has tags), clamped to [0, 1]
and rounded to six decimals. A compound intent ("latest news about Tesla and
how it moved the stock") is also scored part by part; the final score is the
mean of the whole-intent score and the best part score, so an agent that does
one part well is found. Weights are fixed in :data:`WEIGHTS`; the README says
how they were chosen (leave-one-out over the published example tasks only).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from .examples_index import ExampleBlocks
from .lexical import LexicalIndex
from .ranking import PRECISION
from .text import candidate_tags, content_text, normalize_tag, segments, split_label

Vectors = npt.NDArray[np.float32]

FACETS = ("description", "methods", "modalities", "tools", "zones", "tags", "examples")
_F = {name: i for i, name in enumerate(FACETS)}
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
ALL_DOMAINS: tuple[str, ...] = tuple(sorted(DOMAIN_FACETS))

# Fusion weights. context/capability/example/lexical were fitted by
# leave-one-out over the MetaTool *example tasks* only (never the evaluation
# queries); tag is fixed a priori (MetaTool has no tags). See README.
WEIGHTS: dict[str, float] = {
    "context": 0.2,
    "capability": 0.2,
    "example": 0.2,
    "lexical": 0.4,
    "tag": 0.2,
}
COMPONENTS = ("tag", "context", "capability", "example", "lexical")
# Example similarities at or below this are "no match" (0) — a priori.
EXAMPLE_FLOOR = 0.2
# Weight of the whole intent vs its best part for compound intents — a priori.
SEGMENT_MIX = 0.5
MAX_EVIDENCE_EXAMPLES = 3
# Equivalence of two agents' capability profiles (routing alternatives,
# discovery draft 6.1) — a priori, mirroring the fusion weights above:
# description and whole-document vectors weigh equally, tags and examples
# count only when both agents publish them.
EQUIVALENCE_WEIGHTS: dict[str, float] = {
    "description": 0.4,
    "capability": 0.4,
    "tag": 0.2,
    "example": 0.2,
}


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
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    out = np.zeros_like(v)
    np.divide(v, norms, out=out, where=norms > 1e-12)
    return out


class WordLlamaEmbedder:
    """The default embedder: wordllama's bundled 256-d weights, never downloaded.

    wordllama embeds by averaging static token vectors; we pool ourselves so
    that the per-text token sum and count are available (exact embeddings of
    concatenated facets) and empty texts give a zero vector instead of NaN."""

    def __init__(self, dim: int = 256) -> None:
        import wordllama
        from wordllama import WordLlama

        wl = WordLlama.load(
            dim=dim, cache_dir=Path(wordllama.__file__).parent, disable_download=True
        )
        self._table = np.ascontiguousarray(wl.embedding, dtype=np.float32)
        self._tok = wl.tokenizer
        self.dim = int(self._table.shape[1])
        # wordllama is Matryoshka-trained: its leading 128 dims are an embedding too
        self.prefix_dims = min(128, self.dim)

    def embed_sums(self, texts: Sequence[str]) -> tuple[Vectors, Vectors]:
        sums = np.zeros((len(texts), self.dim), dtype=np.float32)
        counts = np.zeros(len(texts), dtype=np.float32)
        if not texts:
            return sums, counts
        encoded = self._tok.encode_batch(list(texts), add_special_tokens=False)
        top = self._table.shape[0] - 1
        for i, enc in enumerate(encoded):
            ids = [t for t, m in zip(enc.ids, enc.attention_mask, strict=True) if m]
            if ids:
                sums[i] = self._table[np.clip(ids, 0, top)].sum(axis=0)
                counts[i] = len(ids)
        return sums, counts

    def embed(self, texts: Sequence[str]) -> Vectors:
        return normalize_rows(self.embed_sums(texts)[0])


# -- what an agent is matched on ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Example:
    id: str
    text: str


@dataclass(frozen=True, slots=True)
class CapabilityProfile:
    """The text an agent is matched on: facet texts, normalized tags, examples."""

    canonical_id: str
    facets: Mapping[str, str]
    tags: tuple[str, ...] = ()
    examples: tuple[Example, ...] = ()


def _flatten(items: Any) -> str:
    if not isinstance(items, list):
        return ""
    parts = []
    for it in items:
        if isinstance(it, dict):
            parts.append(" ".join(str(it.get(k, "")) for k in ("name", "description", "text")))
        else:
            parts.append(str(it))
    return ". ".join(split_label(p) for p in parts if p.strip())


def profile_from(manifest: Mapping[str, Any], capabilities: Mapping[str, Any]) -> CapabilityProfile:
    raw_examples = capabilities.get("examples")
    examples = tuple(
        Example(str(ex.get("id", f"ex-{i + 1}")), str(ex["text"]))
        for i, ex in enumerate(raw_examples if isinstance(raw_examples, list) else [])
        if isinstance(ex, dict) and isinstance(ex.get("text"), str)
    )
    raw_tags = capabilities.get("tags")
    tags = tuple(
        sorted({t for t in (normalize_tag(str(x)) for x in raw_tags or []) if t})
        if isinstance(raw_tags, list)
        else ()
    )
    methods = capabilities.get("supported_methods") or manifest.get("supported_methods")
    zones = [
        z.removeprefix("zone:")
        for z in capabilities.get("zones_accepted", [])
        if isinstance(z, str)
    ]
    label = split_label(str(manifest.get("agent_label", "")))
    return CapabilityProfile(
        canonical_id=str(manifest["canonical_id"]),
        facets={
            "description": f"{label}. {manifest.get('job_description', '')}",
            "methods": _flatten(methods).lower(),
            "modalities": _flatten(capabilities.get("modalities")),
            "tools": _flatten(capabilities.get("tools")),
            "zones": _flatten(zones),
            "tags": ". ".join(t.replace("-", " ") for t in tags),
            "examples": ". ".join(ex.text for ex in examples),
        },
        tags=tags,
        examples=examples,
    )


@dataclass(frozen=True, slots=True)
class ProfileVectors:
    """The expensive part of an upsert, computed before any lock is taken."""

    facet_sums: Vectors  # (len(FACETS), dim): token-vector sums
    facet_counts: Vectors  # (len(FACETS),)
    examples: Vectors  # (n_examples, dim), normalized


# -- a query's scores --------------------------------------------------------------


@dataclass(slots=True)
class _Pass:
    """Component arrays of one text (the whole intent or one part) over all slots."""

    components: dict[str, Vectors]
    fused: Vectors
    example_sims: Vectors  # similarity of every example row to this text
    tags: dict[int, list[str]]  # slot -> matched tags


@dataclass(slots=True)
class QueryScores:
    """The scores of one intent over every indexed agent, with their evidence."""

    final: Vectors
    ids: list[str | None]
    whole: _Pass
    parts: list[_Pass] = field(default_factory=list)
    part_best: Vectors | None = None
    examples_of: dict[int, tuple[tuple[Example, ...], int]] = field(default_factory=dict)

    def above(self, floor: float) -> dict[str, float]:
        """capability_match_score of every agent scoring at least ``floor``."""
        out: dict[str, float] = {}
        for slot in np.nonzero(self.final >= floor - 1e-7)[0].tolist():
            cid = self.ids[slot]
            score = round(min(1.0, max(0.0, float(self.final[slot]))), PRECISION)
            if cid is not None and score >= floor:
                out[cid] = score
        return out

    def score(self, canonical_id: str) -> float:
        """capability_match_score of one indexed agent whatever the floor (0 if absent)."""
        try:
            slot = self.ids.index(canonical_id)
        except ValueError:
            return 0.0
        return round(min(1.0, max(0.0, float(self.final[slot]))), PRECISION)

    def evidence(self, canonical_id: str) -> dict[str, Any]:
        """score_components, matched_tags, matched_examples of one scored agent."""
        try:
            slot = self.ids.index(canonical_id)
        except ValueError:
            return {"score_components": {}, "matched_tags": [], "matched_examples": []}
        comps = {
            name: round(float(arr[slot]), PRECISION)
            for name in COMPONENTS
            if (arr := self.whole.components.get(name)) is not None and not np.isnan(arr[slot])
        }
        if self.part_best is not None:
            comps["segment"] = round(float(self.part_best[slot]), PRECISION)
        tags: set[str] = set()
        examples, start = self.examples_of.get(slot, ((), 0))
        best = np.zeros(len(examples), dtype=np.float32)
        for p in (self.whole, *self.parts):
            tags.update(p.tags.get(slot, []))
            if len(examples) and len(p.example_sims):
                best = np.maximum(best, p.example_sims[start : start + len(examples)])
        order = sorted(range(len(examples)), key=lambda k: (-float(best[k]), k))
        return {
            "score_components": comps,
            "matched_tags": sorted(tags),
            "matched_examples": [
                {
                    "id": examples[k].id,
                    "text": examples[k].text,
                    "score": round(min(1.0, float(best[k])), PRECISION),
                }
                for k in order[:MAX_EVIDENCE_EXAMPLES]
                if best[k] > EXAMPLE_FLOOR
            ],
        }


class CapabilityMatcher(Protocol):
    def embed_profile(self, profile: CapabilityProfile) -> ProfileVectors: ...
    def upsert(self, profile: CapabilityProfile, vectors: ProfileVectors | None = None) -> None: ...
    def remove(self, canonical_id: str) -> None: ...
    def query(
        self, intent: str, domains: tuple[str, ...] | None, *, evidence: bool = False
    ) -> QueryScores: ...
    def scores(
        self, intent: str, domains: tuple[str, ...] | None, floor: float
    ) -> dict[str, float]: ...
    def equivalence(
        self, profile: CapabilityProfile, vectors: ProfileVectors | None = None
    ) -> dict[str, float]: ...
    def __len__(self) -> int: ...


# -- the index ---------------------------------------------------------------------


class CapabilityIndex:
    """Tag, context, example and lexical indices over every Active agent (thread-safe)."""

    def __init__(self, embedder: Embedder, query_cache: int = 1024) -> None:
        self._emb = embedder
        self._dim = embedder.dim
        self._lock = threading.RLock()
        nf = len(FACETS)
        self._sums = np.zeros((0, nf, self._dim), dtype=np.float32)
        self._counts = np.zeros((0, nf), dtype=np.float32)
        self._context = np.zeros((0, self._dim), dtype=np.float32)
        self._capability = np.zeros((0, self._dim), dtype=np.float32)
        self._has_examples = np.zeros(0, dtype=bool)
        self._has_tags = np.zeros(0, dtype=bool)
        self._slot_of: dict[str, int] = {}
        self._id_of: list[str | None] = []
        self._free: list[int] = []
        self._profiles: dict[int, CapabilityProfile] = {}
        self._examples = ExampleBlocks(min(self._dim, getattr(embedder, "prefix_dims", self._dim)))
        self._tag_index: dict[str, set[int]] = {}
        self._lexical = LexicalIndex(nf)
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._cache_size = query_cache

    def __len__(self) -> int:
        return len(self._slot_of)

    # -- mutation --------------------------------------------------------------------
    def embed_profile(self, profile: CapabilityProfile) -> ProfileVectors:
        sums, counts = self._emb.embed_sums(
            [content_text(profile.facets.get(f, "")) for f in FACETS]
        )
        examples = self._emb.embed([content_text(ex.text) for ex in profile.examples])
        return ProfileVectors(sums, counts, examples)

    def upsert(self, profile: CapabilityProfile, vectors: ProfileVectors | None = None) -> None:
        vecs = vectors if vectors is not None else self.embed_profile(profile)
        with self._lock:
            slot = self._slot_of.get(profile.canonical_id)
            if slot is None:
                slot = self._free.pop() if self._free else self._grow()
                self._slot_of[profile.canonical_id] = slot
                self._id_of[slot] = profile.canonical_id
            else:
                self._clear(slot)
            self._profiles[slot] = profile
            self._sums[slot] = vecs.facet_sums
            self._counts[slot] = vecs.facet_counts
            self._context[slot] = normalize_rows(vecs.facet_sums[_F["description"]])
            self._capability[slot] = normalize_rows(vecs.facet_sums.sum(axis=0))
            self._has_examples[slot] = len(profile.examples) > 0
            self._has_tags[slot] = len(profile.tags) > 0
            for tag in profile.tags:
                self._tag_index.setdefault(tag, set()).add(slot)
            self._lexical.upsert(slot, [profile.facets.get(f, "") for f in FACETS])
            self._examples.put(slot, vecs.examples)

    def _grow(self) -> int:
        slot = len(self._id_of)
        if slot >= self._sums.shape[0]:
            cap = max(64, self._sums.shape[0] * 2)

            def grow(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
                out = np.zeros((cap, *a.shape[1:]), dtype=a.dtype)
                out[: a.shape[0]] = a
                return out

            self._sums, self._counts = grow(self._sums), grow(self._counts)
            self._context, self._capability = grow(self._context), grow(self._capability)
            self._has_examples, self._has_tags = grow(self._has_examples), grow(self._has_tags)
        self._id_of.append(None)
        return slot

    def _clear(self, slot: int) -> None:
        profile = self._profiles.pop(slot, None)
        if profile is not None:
            for tag in profile.tags:
                holders = self._tag_index.get(tag)
                if holders is not None:
                    holders.discard(slot)
                    if not holders:
                        del self._tag_index[tag]
        self._examples.drop(slot)
        self._lexical.remove(slot)
        self._sums[slot] = 0.0
        self._counts[slot] = 0.0
        self._context[slot] = 0.0
        self._capability[slot] = 0.0
        self._has_examples[slot] = False
        self._has_tags[slot] = False

    def remove(self, canonical_id: str) -> None:
        with self._lock:
            slot = self._slot_of.pop(canonical_id, None)
            if slot is None:
                return
            self._clear(slot)
            self._id_of[slot] = None
            self._free.append(slot)

    # -- query -----------------------------------------------------------------------
    def query_vectors(self, texts: Sequence[str]) -> Vectors:
        """Normalized embeddings of the texts (an LRU cache keyed by text)."""
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
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
                    if self._cache_size > 0:
                        self._cache[texts[i]] = v
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return out

    def scores(
        self, intent: str, domains: tuple[str, ...] | None, floor: float
    ) -> dict[str, float]:
        return self.query(intent, domains).above(floor)

    def query(
        self, intent: str, domains: tuple[str, ...] | None, *, evidence: bool = False
    ) -> QueryScores:
        texts = [intent, *segments(intent)]
        q = self.query_vectors(texts)
        allowed = set(ALL_DOMAINS if domains is None else domains)
        mask = np.array([f == "description" or f in allowed for f in FACETS], dtype=np.float32)
        with self._lock:
            n = len(self._id_of)
            if domains is None:
                capability = self._capability[:n]
            else:
                capability = normalize_rows(np.einsum("nfd,f->nd", self._sums[:n], mask))
            ctx_all = self._context[:n] @ q.T  # (n, P)
            cap_all = capability @ q.T
            use_examples = "examples" in allowed and self._examples.total > 0
            if use_examples:
                ex_all, ex_sims = self._examples.best(q, n)
            else:
                ex_all = np.zeros((n, len(texts)), dtype=np.float32)
                ex_sims = np.zeros((0, len(texts)), dtype=np.float32)
            has_ex = self._has_examples[:n] & use_examples
            has_tags = self._has_tags[:n].copy()
            passes = []
            for i, text in enumerate(texts):
                lexical = self._lexical.scores(text, mask, n)[0]
                tag, tags = self._tag_scores(text, n) if "tags" in allowed else (None, {})
                passes.append(
                    self._fuse(
                        ctx_all[:, i],
                        cap_all[:, i],
                        lexical,
                        ex_all[:, i],
                        has_ex,
                        tag,
                        has_tags,
                        ex_sims[:, i],
                        tags,
                        not np.any(q[i]),
                    )
                )
            ids = list(self._id_of[:n])
            examples_of = (
                {s: (p.examples, self._examples.block(s)[0]) for s, p in self._profiles.items()}
                if evidence
                else {}
            )
        whole = passes[0]
        if len(passes) > 1:
            part_best = np.max(np.stack([p.fused for p in passes[1:]]), axis=0)
            final = (1.0 - SEGMENT_MIX) * whole.fused + SEGMENT_MIX * part_best
            return QueryScores(final, ids, whole, passes[1:], part_best, examples_of)
        return QueryScores(whole.fused, ids, whole, examples_of=examples_of)

    def equivalence(
        self, profile: CapabilityProfile, vectors: ProfileVectors | None = None
    ) -> dict[str, float]:
        """How closely every indexed agent's capabilities match ``profile``
        (which need not be indexed itself), in [0, 1], six decimals.

        A weighted mean (:data:`EQUIVALENCE_WEIGHTS`) of the cosine of the
        description vectors, the cosine of the whole capability-document
        vectors (both clipped at 0), the Jaccard overlap of the normalized tags
        (when both have tags) and, per example of ``profile``, the best matching
        example of the other agent, averaged (when both have examples; at or
        below :data:`EXAMPLE_FLOOR` counts as 0). Symmetric in the texts and
        deterministic for identical index contents."""
        vecs = vectors if vectors is not None else self.embed_profile(profile)
        w = EQUIVALENCE_WEIGHTS
        context = normalize_rows(vecs.facet_sums[_F["description"]])
        capability = normalize_rows(vecs.facet_sums.sum(axis=0))
        mine = set(profile.tags)
        with self._lock:
            n = len(self._id_of)
            total = w["description"] * np.clip(self._context[:n] @ context, 0.0, 1.0)
            total += w["capability"] * np.clip(self._capability[:n] @ capability, 0.0, 1.0)
            weight_sum = np.full(n, w["description"] + w["capability"], dtype=np.float32)
            if mine:
                shared = np.zeros(n, dtype=np.float32)
                for tag in mine:
                    for slot in self._tag_index.get(tag, ()):
                        shared[slot] += 1.0
                sizes = np.array(
                    [len(p.tags) if (p := self._profiles.get(s)) else 0 for s in range(n)],
                    dtype=np.float32,
                )
                has_tags = self._has_tags[:n]
                union = np.where(has_tags, len(mine) + sizes - shared, 1.0)
                total += w["tag"] * np.where(has_tags, shared / union, 0.0)
                weight_sum += w["tag"] * has_tags
            if len(vecs.examples) and self._examples.total > 0:
                best, _ = self._examples.best(vecs.examples, n)  # (n, examples of profile)
                example = np.where(best > EXAMPLE_FLOOR, np.minimum(best, 1.0), 0.0).mean(axis=1)
                has_examples = self._has_examples[:n]
                total += w["example"] * np.where(has_examples, example, 0.0)
                weight_sum += w["example"] * has_examples
            ids = list(self._id_of[:n])
        score = np.clip(total / weight_sum, 0.0, 1.0)
        return {
            cid: round(float(s), PRECISION)
            for cid, s in zip(ids, score.tolist(), strict=True)
            if cid is not None
        }

    @staticmethod
    def _fuse(
        ctx: Vectors,
        cap: Vectors,
        lexical: Vectors,
        ex: Vectors,
        has_ex: npt.NDArray[np.bool_],
        tag: Vectors | None,
        has_tags: npt.NDArray[np.bool_],
        ex_sims: Vectors,
        tags: dict[int, list[str]],
        empty: bool,
    ) -> _Pass:
        n = len(ctx)
        if empty:
            return _Pass({}, np.zeros(n, dtype=np.float32), ex_sims, {})
        comps: dict[str, Vectors] = {
            "context": np.clip(ctx, 0.0, 1.0),
            "capability": np.clip(cap, 0.0, 1.0),
            "lexical": lexical,
        }
        total = (
            WEIGHTS["context"] * comps["context"]
            + WEIGHTS["capability"] * comps["capability"]
            + WEIGHTS["lexical"] * lexical
        )
        weight_sum = np.full(
            n, WEIGHTS["context"] + WEIGHTS["capability"] + WEIGHTS["lexical"], dtype=np.float32
        )
        if np.any(has_ex):
            ex = np.where(ex > EXAMPLE_FLOOR, np.minimum(ex, 1.0), 0.0)
            comps["example"] = np.where(has_ex, ex, np.nan).astype(np.float32)
            total += WEIGHTS["example"] * np.where(has_ex, ex, 0.0)
            weight_sum += WEIGHTS["example"] * has_ex
        if tag is not None:
            comps["tag"] = np.where(has_tags, tag, np.nan).astype(np.float32)
            total += WEIGHTS["tag"] * np.where(has_tags, tag, 0.0)
            weight_sum += WEIGHTS["tag"] * has_tags
        fused = np.clip(total / weight_sum, 0.0, 1.0).astype(np.float32)
        return _Pass(comps, fused, ex_sims, tags)

    def _tag_scores(self, text: str, n: int) -> tuple[Vectors | None, dict[int, list[str]]]:
        """IDF-weighted share of the intent's known tags that each agent carries."""
        if not self._tag_index:
            return None, {}
        query_tags = sorted(t for t in candidate_tags(text) if t in self._tag_index)
        if not query_tags:
            return None, {}
        n_agents = max(len(self._slot_of), 1)
        idf = {t: float(np.log(1.0 + n_agents / len(self._tag_index[t]))) for t in query_tags}
        denom = sum(idf.values())
        out = np.zeros(n, dtype=np.float32)
        matched: dict[int, list[str]] = {}
        for t in query_tags:
            for slot in self._tag_index[t]:
                if slot < n:
                    out[slot] += idf[t] / denom
                    matched.setdefault(slot, []).append(t)
        return np.minimum(out, 1.0), matched
