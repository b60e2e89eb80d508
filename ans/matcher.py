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

import hashlib
import operator
import os
import shutil
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import orjson

from .ann import AnnIndex, AnnSettings
from .examples_index import ExampleBlocks
from .lexical import LexicalIndex
from .postings import SlotPostings
from .qrows import QRows, query_codes, similarities
from .ranking import PRECISION
from .relevance import RelevanceGate, maxima, whole_components
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


def example_value(sims: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Example similarities as the example component counts them: at or below
    :data:`EXAMPLE_FLOOR` 0, else capped at 1."""
    return np.where(sims > EXAMPLE_FLOOR, np.minimum(sims, 1.0), 0.0).astype(np.float32)


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
        # The tokenizer's batch call otherwise hands even a 3-text query to a
        # thread pool whose spinning doubles its CPU (130 vs 62 us measured);
        # a request is one core here, and import already runs one process per
        # core. Set before the tokenizer is first used; an explicit setting wins.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import wordllama
        from wordllama import WordLlama

        wl = WordLlama.load(
            dim=dim, cache_dir=Path(wordllama.__file__).parent, disable_download=True
        )
        table = np.ascontiguousarray(wl.embedding, dtype=np.float32)
        # Kept transposed (dim x vocab): a text's token columns are gathered with
        # one take() and summed along contiguous rows -- the same additions in
        # the same order as summing token rows, ~6x faster for a batch.
        self._table_t = np.ascontiguousarray(table.T)
        self._vocab = int(table.shape[0])
        self._tok = wl.tokenizer
        self.dim = int(table.shape[1])
        # no padding: we pool per text ourselves (padding to the longest text in a
        # batch would tokenize and gather pad tokens for nothing)
        self._tok.no_padding()
        self._tok.no_truncation()
        digest = hashlib.sha256(table[:64].tobytes()).hexdigest()[:16]
        self.fingerprint = f"wordllama-{self.dim}-{self._vocab}-{digest}"
        # wordllama is Matryoshka-trained: its leading 128 dims are an embedding too
        self.prefix_dims = min(128, self.dim)

    def embed_sums(self, texts: Sequence[str]) -> tuple[Vectors, Vectors]:
        sums = np.zeros((len(texts), self.dim), dtype=np.float32)
        counts = np.zeros(len(texts), dtype=np.float32)
        if not texts:
            return sums, counts
        encoded = self._tok.encode_batch(list(texts), add_special_tokens=False)
        top = self._vocab - 1
        ids = [enc.ids for enc in encoded]
        lens = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter((t for i in ids for t in i), dtype=np.int64, count=int(lens.sum()))
        np.minimum(flat, top, out=flat)  # token ids are never negative
        counts[:] = lens
        ends = np.cumsum(lens)
        chunk = 256  # bounded temporary: chunk x tokens x dim floats
        for a in range(0, len(texts), chunk):
            b = min(len(texts), a + chunk)
            lo = int(ends[a - 1]) if a else 0
            hi = int(ends[b - 1])
            nz = np.nonzero(lens[a:b])[0]
            if not len(nz):
                continue
            starts = (ends[a:b] - lens[a:b])[nz] - lo
            columns = self._table_t.take(flat[lo:hi], axis=1)  # dim x tokens
            sums[a + nz] = np.add.reduceat(columns, starts, axis=1).T
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

Slots = npt.NDArray[np.int64]
ProfileSource = Callable[[Sequence[str]], Mapping[str, CapabilityProfile]]


@dataclass(slots=True)
class _Pass:
    """One text (the whole intent or one part) over the candidates: the fused
    score, and the inputs it was fused from, to explain any one agent."""

    fused: Vectors
    tags: list[tuple[str, npt.NDArray[np.int32]]]  # matched query tags and their holders
    ctx: Vectors | None = None  # None: an empty text, nothing scored
    cap: Vectors | None = None
    lexical: Vectors | None = None
    ex: Vectors | None = None
    has_ex: npt.NDArray[np.bool_] | None = None
    tag: Vectors | None = None
    has_tags: npt.NDArray[np.bool_] | None = None

    def components_at(self, i: int) -> dict[str, float]:
        """The components of candidate ``i`` (unrounded), as :meth:`CapabilityIndex._fuse`
        weighed them; a component the agent does not publish is absent."""
        if self.ctx is None or self.cap is None or self.lexical is None:
            return {}
        out = {
            "context": float(np.clip(self.ctx[i], 0.0, 1.0)),
            "capability": float(np.clip(self.cap[i], 0.0, 1.0)),
            "lexical": float(self.lexical[i]),
        }
        if self.ex is not None and self.has_ex is not None and self.has_ex[i]:
            out["example"] = float(example_value(self.ex[i : i + 1])[0])
        if self.tag is not None and self.has_tags is not None and self.has_tags[i]:
            out["tag"] = float(self.tag[i])
        return out


@dataclass(slots=True)
class QueryScores:
    """The scores of one intent over its candidate agents (every indexed agent
    in exact mode), with what is needed to explain any of them."""

    final: Vectors
    ids: list[str | None]
    whole: _Pass
    parts: list[_Pass] = field(default_factory=list)
    part_best: Vectors | None = None
    exhaustive: bool = True
    slots: Slots = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    vectors: Vectors = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    index: CapabilityIndex | None = None
    domains: tuple[str, ...] | None = None
    texts: tuple[str, ...] = ()
    # Margins are measured to these maxima instead of the candidates' own (one agent scored alone).
    reference: npt.NDArray[np.float64] | None = None
    _pos: dict[str, int] | None = None
    _cms: npt.NDArray[np.float64] | None = None
    _gate: RelevanceGate | None = None

    def _position(self, canonical_id: str) -> int | None:
        if self._pos is None:
            self._pos = {cid: i for i, cid in enumerate(self.ids) if cid is not None}
        return self._pos.get(canonical_id)

    def above(self, floor: float) -> dict[str, float]:
        """capability_match_score of every candidate scoring at least ``floor``."""
        ids, values = self.above_arrays(floor)
        return {c: round(v, PRECISION) for c, v in zip(ids, values.tolist(), strict=True)}

    def above_arrays(self, floor: float) -> tuple[list[str], npt.NDArray[np.float64]]:
        """The candidates whose capability_match_score is at least ``floor``, as
        (canonical ids, unrounded scores clipped to [0, 1]); ``round(score, 6)``
        of an entry is its capability_match_score."""
        scores = np.clip(self.final, 0.0, 1.0).astype(np.float64)
        return self._picked(_at_least(scores, floor), scores)

    def matches(self, gate: RelevanceGate) -> tuple[list[str], npt.NDArray[np.float64]]:
        """The candidates the relevance gate admits (:mod:`ans.relevance`), as
        (canonical ids, unrounded capability_match_scores)."""
        if gate.kind == "floor":
            return self.above_arrays(gate.min_capability_match)
        cms = self.calibrated(gate)
        raw = np.clip(self.final, 0.0, 1.0).astype(np.float64)
        keep = _at_least(raw, gate.min_capability_match) & _at_least(cms, gate.min_relevance)
        return self._picked(keep, cms)

    def calibrated(self, gate: RelevanceGate) -> npt.NDArray[np.float64]:
        """capability_match_score of every candidate under ``gate`` (cached)."""
        if gate.kind == "floor":
            return np.clip(self.final, 0.0, 1.0).astype(np.float64)
        if self._cms is None or self._gate != gate:
            self._cms = gate.scores(
                self.final.astype(np.float64), self.whole, self.parts, self.reference
            )
            self._gate = gate
        return self._cms

    def _picked(
        self, keep: npt.NDArray[np.bool_], values: npt.NDArray[np.float64]
    ) -> tuple[list[str], npt.NDArray[np.float64]]:
        picked = np.nonzero(keep)[0]
        values = values[picked]
        if len(picked) == 0:
            return [], values
        ids: list[str | None] = (
            list(operator.itemgetter(*picked.tolist())(self.ids))
            if len(picked) > 1
            else [self.ids[int(picked[0])]]
        )
        if None in ids:  # a slot freed while the query ran
            live = np.array([c is not None for c in ids], dtype=bool)
            return [c for c in ids if c is not None], values[live]
        return ids, values  # type: ignore[return-value]  # no None left

    def score(self, canonical_id: str, gate: RelevanceGate | None = None) -> float:
        """capability_match_score of one indexed agent whatever the gate (0 if
        absent): calibrated under ``gate`` (margins to this query's best), else
        the fused score."""
        i = self._position(canonical_id)
        if i is not None:
            values = self.calibrated(gate) if gate is not None else self.final
            return round(min(1.0, max(0.0, float(values[i]))), PRECISION)
        if self.index is None:
            return 0.0
        extra = self.index.query(
            self.texts[0] if self.texts else "", self.domains, only=[canonical_id]
        )
        if gate is not None and gate.kind == "calibrated":
            extra.reference = self.best_values()
        return extra.score(canonical_id, gate) if extra.ids else 0.0

    def best_values(self) -> npt.NDArray[np.float64]:
        """The best fused score and components of this query (margins are measured to them)."""
        if self.reference is not None:
            return self.reference
        n = len(self.final)
        return maxima(self.final.astype(np.float64), whole_components(self.whole, n))

    def evidence(self, canonical_id: str) -> dict[str, Any]:
        """score_components, matched_tags, matched_examples of one scored agent."""
        i = self._position(canonical_id)
        if i is None or self.index is None:
            return {"score_components": {}, "matched_tags": [], "matched_examples": []}
        raw = self.whole.components_at(i)
        comps = {name: round(raw[name], PRECISION) for name in COMPONENTS if name in raw}
        comps["fused"] = round(min(1.0, max(0.0, float(self.final[i]))), PRECISION)
        if self.part_best is not None:
            comps["segment"] = round(float(self.part_best[i]), PRECISION)
        slot = int(self.slots[i])
        tags: set[str] = set()
        for p in (self.whole, *self.parts):
            for tag, holders in p.tags:
                if np.any(holders == slot):
                    tags.add(tag)
        examples_allowed = self.domains is None or "examples" in self.domains
        return {
            "score_components": comps,
            "matched_tags": sorted(tags),
            "matched_examples": self.index.matched_examples(canonical_id, slot, self.vectors)
            if examples_allowed
            else [],
        }


class CapabilityMatcher(Protocol):
    def embed_profile(self, profile: CapabilityProfile) -> ProfileVectors: ...
    def embed_profiles(self, profiles: Sequence[CapabilityProfile]) -> list[ProfileVectors]: ...
    def upsert(self, profile: CapabilityProfile, vectors: ProfileVectors | None = None) -> None: ...
    def upsert_many(self, items: Sequence[tuple[CapabilityProfile, ProfileVectors]]) -> None: ...
    def remove(self, canonical_id: str) -> None: ...
    def query(
        self, intent: str, domains: tuple[str, ...] | None, *, evidence: bool = False
    ) -> QueryScores: ...
    def scores(
        self, intent: str, domains: tuple[str, ...] | None, floor: float
    ) -> dict[str, float]: ...
    def equivalence(
        self,
        profile: CapabilityProfile,
        vectors: ProfileVectors | None = None,
        among: Sequence[str] | None = None,
    ) -> dict[str, float]: ...
    def ids(self) -> list[str]: ...
    def save(self, directory: Path, meta: Mapping[str, Any]) -> None: ...
    def __len__(self) -> int: ...


def _at_least(values: npt.NDArray[np.float64], floor: float) -> npt.NDArray[np.bool_]:
    """``round(value, 6) >= floor`` for every value, with Python's rounding
    deciding the values within rounding distance of the floor."""
    ok = values >= floor - 1e-7
    for i in np.nonzero(np.abs(values - floor) <= 2e-6)[0].tolist():
        ok[i] = round(float(values[i]), PRECISION) >= floor
    return ok


def _ids_at(table: list[str | None], slots: Slots, full: bool) -> list[str | None]:
    """The ids of ``slots`` (all of ``table``'s first len(slots) when ``full``),
    copied under the caller's lock: C-level copies instead of a Python loop
    (10k slots cost 1.1 ms that way)."""
    if full:
        return table[: len(slots)]
    if len(slots) > 1:
        return list(operator.itemgetter(*slots.tolist())(table))
    return [table[int(s)] for s in slots]


# -- the index ---------------------------------------------------------------------

EXAMPLE_STRIDE = 64  # ANN id of example k of a slot: slot * EXAMPLE_STRIDE + k (k < 64)
SNAPSHOT_FORMAT = 1
DOMAIN_CACHE = 4096  # per-agent facet sums kept for capability_domains queries
# A capability_domains query re-embeds the allowed facets of this many of its
# best candidates (by the all-facet score); the rest are not scored.
RESTRICTED_RERANK = 64


class CapabilityIndex:
    """Tag, context, example and lexical indices over every Active agent (thread-safe).

    Up to ``settings.exact_max`` agents a query scores every agent (exact).
    Above it, candidates come from FAISS (capability and example vectors),
    the BM25 postings and the tag postings, ``settings.candidates_at(n)`` per
    source and query text, and only they are scored - with the same formulas. A
    ``capability_domains`` query always scores candidates: it re-embeds their
    allowed facets (from ``profile_source``, e.g. the store) on the fly, since
    per-facet vectors of a million agents would not fit in memory.

    Without a ``profile_source`` the index keeps every profile in memory (fine
    for small catalogs and tests); the server passes one backed by its store.
    """

    def __init__(
        self,
        embedder: Embedder,
        query_cache: int = 1024,
        *,
        settings: AnnSettings | None = None,
        profile_source: ProfileSource | None = None,
    ) -> None:
        self._emb = embedder
        self._dim = embedder.dim
        self.settings = settings or AnnSettings()
        self._lock = threading.RLock()
        self._ctx = QRows(self._dim)
        self._cap = QRows(self._dim)
        self._has_examples = np.zeros(0, dtype=bool)
        self._n_tags = np.zeros(0, dtype=np.int16)
        self._alive = np.zeros(0, dtype=bool)  # slot holds an indexed agent
        self._slot_of: dict[str, int] = {}
        self._id_of: list[str | None] = []
        self._free: list[int] = []
        self._examples = ExampleBlocks(min(self._dim, getattr(embedder, "prefix_dims", self._dim)))
        self._tags = SlotPostings(0)
        self._lexical = LexicalIndex(len(FACETS))
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._cache_size = query_cache
        self._source = profile_source
        self._profiles: dict[str, CapabilityProfile] | None = {} if profile_source is None else None
        self._facet_cache: OrderedDict[tuple[str, int], Vectors] = OrderedDict()
        self._generation: dict[int, int] = {}
        self._ann_cap: AnnIndex | None = None
        self._ann_ex: AnnIndex | None = None
        self._ann_built_for = 0  # agents the approximate index was sized for
        self.dirty = False  # changed since the last save()/load()

    def __len__(self) -> int:
        return len(self._slot_of)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._slot_of)

    @property
    def approximate(self) -> bool:
        return self._ann_cap is not None

    def describe(self) -> dict[str, Any]:
        """What search the index uses now (health endpoint, benchmarks)."""
        with self._lock:
            return {
                "agents": len(self._slot_of),
                "mode": "approximate" if self._ann_cap is not None else "exact",
                "index": "IVF-SQ8 (FAISS)" if self._ann_cap is not None else "flat scan",
                "exact_max": self.settings.exact_max,
                "nprobe": self.settings.nprobe if self._ann_cap is not None else None,
                "candidates": self.settings.candidates_at(len(self._slot_of)),
            }

    # -- embedding -------------------------------------------------------------------
    def embed_profile(self, profile: CapabilityProfile) -> ProfileVectors:
        return self.embed_profiles([profile])[0]

    def embed_profiles(self, profiles: Sequence[CapabilityProfile]) -> list[ProfileVectors]:
        """Embed many profiles in one embedder call.

        The "examples" facet is the examples joined, and a facet vector is a
        sum of token vectors over content words (which the tokenizer splits
        word by word), so its sum is the sum of the examples' own sums: each
        example text is tokenized once, not twice."""
        nf = len(FACETS)
        ex_f = _F["examples"]
        texts: list[str] = []
        for p in profiles:
            texts.extend(
                content_text(p.facets.get(f, "")) if f != "examples" else "" for f in FACETS
            )
        n_facet_texts = len(texts)
        texts.extend(content_text(ex.text) for p in profiles for ex in p.examples)
        sums, counts = self._emb.embed_sums(texts)
        ex_sums, ex_counts = sums[n_facet_texts:], counts[n_facet_texts:]
        ex_vecs = normalize_rows(ex_sums)
        out, at = [], 0
        for i, p in enumerate(profiles):
            k = len(p.examples)
            f_sums = sums[i * nf : (i + 1) * nf]
            f_counts = counts[i * nf : (i + 1) * nf]
            if k:
                f_sums[ex_f] = ex_sums[at : at + k].sum(axis=0)
                f_counts[ex_f] = ex_counts[at : at + k].sum()
            elif p.facets.get("examples"):
                one = self._emb.embed_sums([content_text(p.facets["examples"])])
                f_sums[ex_f], f_counts[ex_f] = one[0][0], one[1][0]
            out.append(ProfileVectors(f_sums, f_counts, ex_vecs[at : at + k]))
            at += k
        return out

    # -- mutation --------------------------------------------------------------------
    def _slot_for(self, cid: str) -> int:
        slot = self._slot_of.get(cid)
        if slot is None:
            slot = self._free.pop() if self._free else self._grow()
            self._slot_of[cid] = slot
            self._id_of[slot] = cid
            self._alive[slot] = True
        else:
            self._clear(slot)
        self._generation[slot] = self._generation.get(slot, 0) + 1
        return slot

    def _place(self, slot: int, profile: CapabilityProfile, vecs: ProfileVectors) -> None:
        """Vectors and flags of one slot (not lexical/tags: callers batch those)."""
        self._ctx.set(slot, normalize_rows(vecs.facet_sums[_F["description"]]))
        self._cap.set(slot, normalize_rows(vecs.facet_sums.sum(axis=0)))
        self._has_examples[slot] = len(profile.examples) > 0
        self._n_tags[slot] = min(len(profile.tags), 32767)
        self._examples.put(slot, vecs.examples[:EXAMPLE_STRIDE])
        if self._profiles is not None:
            self._profiles[profile.canonical_id] = profile

    def _ann_add(self, slots: Sequence[int]) -> None:
        if self._ann_cap is None or self._ann_ex is None or not slots:
            return
        arr = np.asarray(slots, dtype=np.int64)
        self._ann_cap.add(self._cap.get(arr), arr)
        ids, vecs = [], []
        for s in slots:
            ex = self._examples.vectors_of(s)
            if len(ex):
                ids.append(s * EXAMPLE_STRIDE + np.arange(len(ex), dtype=np.int64))
                vecs.append(ex)
        if ids:
            self._ann_ex.add(np.concatenate(vecs), np.concatenate(ids))

    def _tag_postings(self, profile: CapabilityProfile) -> dict[int, bytes]:
        return {self._tags.intern(t): b"" for t in profile.tags}

    def upsert(self, profile: CapabilityProfile, vectors: ProfileVectors | None = None) -> None:
        vecs = vectors if vectors is not None else self.embed_profile(profile)
        with self._lock:
            slot = self._slot_for(profile.canonical_id)
            self._place(slot, profile, vecs)
            self._tags.put(slot, self._tag_postings(profile))
            self._lexical.upsert(slot, [profile.facets.get(f, "") for f in FACETS])
            self._ann_add([slot])
            self.dirty = True
            self._maybe_switch_mode()

    def upsert_many(self, items: Sequence[tuple[CapabilityProfile, ProfileVectors]]) -> None:
        """Many agents at once (bulk import, cold start): postings are merged in one
        sort, and the approximate index, if needed, is built once at the end."""
        if not items:
            return
        with self._lock:
            slots = [self._slot_for(p.canonical_id) for p, _ in items]
            arr = np.asarray(slots, dtype=np.int64)
            facet_sums = np.stack([v.facet_sums for _, v in items])
            self._ctx.set(arr, normalize_rows(facet_sums[:, _F["description"]]))
            self._cap.set(arr, normalize_rows(facet_sums.sum(axis=1)))
            for slot, (profile, vecs) in zip(slots, items, strict=True):
                self._has_examples[slot] = len(profile.examples) > 0
                self._n_tags[slot] = min(len(profile.tags), 32767)
                self._examples.put(slot, vecs.examples[:EXAMPLE_STRIDE])
                if self._profiles is not None:
                    self._profiles[profile.canonical_id] = profile
            self._tags.add_many(slots, [self._tag_postings(p) for p, _ in items])
            self._lexical.upsert_many(
                slots, [[p.facets.get(f, "") for f in FACETS] for p, _ in items]
            )
            self._ann_add(slots)
            self.dirty = True
            self._maybe_switch_mode()

    def _grow(self) -> int:
        slot = len(self._id_of)
        if slot >= len(self._has_examples):
            cap = max(64, 2 * len(self._has_examples))
            self._ctx.reserve(cap)
            self._cap.reserve(cap)
            has = np.zeros(cap, dtype=bool)
            has[: len(self._has_examples)] = self._has_examples
            tags = np.zeros(cap, dtype=np.int16)
            tags[: len(self._n_tags)] = self._n_tags
            alive = np.zeros(cap, dtype=bool)
            alive[: len(self._alive)] = self._alive
            self._has_examples, self._n_tags, self._alive = has, tags, alive
        self._id_of.append(None)
        return slot

    def _clear(self, slot: int) -> None:
        if self._ann_cap is not None and self._ann_ex is not None:
            self._ann_cap.remove(np.array([slot], dtype=np.int64))
            k = self._examples.count(slot)
            if k:
                self._ann_ex.remove(slot * EXAMPLE_STRIDE + np.arange(k, dtype=np.int64))
        self._examples.drop(slot)
        self._lexical.remove(slot)
        self._tags.remove(slot)
        self._ctx.clear(slot)
        self._cap.clear(slot)
        self._has_examples[slot] = False
        self._n_tags[slot] = 0

    def remove(self, canonical_id: str) -> None:
        with self._lock:
            slot = self._slot_of.pop(canonical_id, None)
            if slot is None:
                return
            self._clear(slot)
            self._id_of[slot] = None
            self._alive[slot] = False
            self._free.append(slot)
            if self._profiles is not None:
                self._profiles.pop(canonical_id, None)
            self.dirty = True

    # -- exact or approximate --------------------------------------------------------
    def _maybe_switch_mode(self) -> None:
        n = len(self._slot_of)
        if self._ann_cap is None and n > self.settings.exact_max:
            self.build_ann()
        elif self._ann_cap is not None and n > 4 * self._ann_built_for:
            self.build_ann()  # the inverted lists were sized for a quarter of this
        elif self._ann_cap is not None and n <= self.settings.exact_max // 2:
            self._ann_cap = self._ann_ex = None  # back to exhaustive (with hysteresis)

    def build_ann(self) -> None:
        """(Re)build the approximate indices over every indexed agent."""
        with self._lock:
            self._tags.compact()
            slots = np.array(sorted(self._slot_of.values()), dtype=np.int64)
            if not len(slots):
                return
            self._ann_built_for = len(slots)
            self._ann_cap = AnnIndex.build(self._dim, self._cap.get(slots), slots, self.settings)
            ids, vecs = [], []
            has = slots[self._has_examples[slots]]
            for s in has.tolist():
                ex = self._examples.vectors_of(s)
                ids.append(s * EXAMPLE_STRIDE + np.arange(len(ex), dtype=np.int64))
                vecs.append(ex)
            ex_dim = self._examples.dims
            self._ann_ex = AnnIndex.build(
                ex_dim,
                np.concatenate(vecs) if vecs else np.zeros((1, ex_dim), np.float32),
                np.concatenate(ids) if ids else np.zeros(0, np.int64),
                self.settings,
            )
            # the packed copies for exhaustive scans are not needed any more
            self._ctx.drop_packed()
            self._cap.drop_packed()
            self._examples.rows.drop_packed()

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
        self,
        intent: str,
        domains: tuple[str, ...] | None,
        *,
        evidence: bool = False,
        exhaustive: bool | None = None,
        only: Sequence[str] | None = None,
    ) -> QueryScores:
        """Score the intent. ``exhaustive`` forces (True) or forbids (False) scoring
        every agent (default: by catalog size); ``only`` scores just those ids."""
        texts = [intent, *segments(intent)]
        q = self.query_vectors(texts)
        allowed = set(ALL_DOMAINS if domains is None else domains)
        mask = np.array([f == "description" or f in allowed for f in FACETS], dtype=np.float32)
        restricted = domains is not None and not all(
            DOMAIN_FACETS[d] is None or d in allowed for d in ALL_DOMAINS
        )
        use_examples = "examples" in allowed
        with self._lock:
            n = len(self._id_of)
            lex = self._lexical.accumulate_many(texts, mask, n)
            tag_passes = [
                self._tag_scores(t, n) if "tags" in allowed else (None, []) for t in texts
            ]
            if only is not None:
                cand = np.array(
                    sorted(s for c in only if (s := self._slot_of.get(c)) is not None),
                    dtype=np.int64,
                )
                full = False
            else:
                full = (
                    exhaustive
                    if exhaustive is not None
                    else (self._ann_cap is None and not restricted)
                )
                cand = (
                    np.arange(n, dtype=np.int64)
                    if full
                    else self._candidates(q, lex, tag_passes, use_examples, n, restricted)
                )
            qc = query_codes(q)  # context and capability rows share the query codes
            if full:
                ctx_all = self._ctx.scan(qc, n)
                cap_all = (
                    similarities(self._restricted_capability(cand, allowed), q)
                    if restricted
                    else self._cap.scan(qc, n)
                )
                ex_all = (
                    self._examples.best(q, n)[0]
                    if use_examples and self._examples.total
                    else np.zeros((n, len(texts)), np.float32)
                )
            else:
                if restricted and len(cand) > RESTRICTED_RERANK:
                    cand = self._narrow(cand, q, lex, tag_passes, use_examples)
                ctx_all = self._ctx.scan_rows(qc, cand)
                cap_all = (
                    similarities(self._restricted_capability(cand, allowed), q)
                    if restricted
                    else self._cap.scan_rows(qc, cand)
                )
                ex_all = (
                    self._examples.best_of(q, cand)
                    if use_examples and self._examples.total
                    else np.zeros((len(cand), len(texts)), np.float32)
                )
            pick = slice(0, n) if full else cand  # every slot: no gather
            has_ex = self._has_examples[pick] & use_examples
            has_tags = self._n_tags[pick] > 0
            ids = _ids_at(self._id_of, cand, full)
        weight_sums = self._weight_sums(has_ex, has_tags)
        passes = []
        for i in range(len(texts)):
            tag_dense, tag_list = tag_passes[i]
            passes.append(
                self._fuse(
                    ctx_all[:, i],
                    cap_all[:, i],
                    lex[i][0][pick],
                    ex_all[:, i],
                    has_ex,
                    tag_dense[pick] if tag_dense is not None else None,
                    has_tags,
                    tag_list,
                    not np.any(q[i]),
                    weight_sums,
                )
            )
        whole = passes[0]
        common: dict[str, Any] = {
            "exhaustive": full,
            "slots": cand,
            "vectors": q,
            "index": self,
            "domains": domains,
            "texts": tuple(texts),
        }
        if len(passes) > 1:
            part_best = np.max(np.stack([p.fused for p in passes[1:]]), axis=0)
            final = (1.0 - SEGMENT_MIX) * whole.fused + SEGMENT_MIX * part_best
            return QueryScores(final, ids, whole, passes[1:], part_best, **common)
        return QueryScores(whole.fused, ids, whole, **common)

    def _candidates(
        self,
        q: Vectors,
        lex: list[tuple[Vectors, npt.NDArray[np.int32]]],
        tag_passes: list[tuple[Vectors | None, list[tuple[str, npt.NDArray[np.int32]]]]],
        use_examples: bool,
        n: int,
        restricted: bool,
    ) -> Slots:
        """The union of each source's best ``candidates_at(live)`` per query text."""
        live = len(self._slot_of)
        k = self.settings.candidates_at(live)
        parts: list[npt.NDArray[np.integer]] = []
        if live <= k:
            return np.array(sorted(self._slot_of.values()), dtype=np.int64)
        nonzero = np.array([bool(np.any(v)) for v in q])
        qv = q[nonzero]
        if len(qv):
            if self._ann_cap is not None:
                parts.append(self._ann_cap.search(qv, k))
                if use_examples and self._ann_ex is not None:
                    hits = self._ann_ex.search(self._examples.project(qv), k)
                    parts.append(hits // EXAMPLE_STRIDE)
            else:  # exact mode, capability_domains query: exact top-k by flat scan
                sims = self._cap.scan(qv, n)
                if use_examples and self._examples.total:
                    sims = np.maximum(sims, self._examples.best(qv, n)[0])
                for col in sims.T:
                    parts.append(np.argpartition(-col, min(k, n - 1))[:k])
        for dense, touched in lex:
            parts.append(_top_touched(dense, touched, k))
        for tag_dense, tag_list in tag_passes:
            if tag_dense is not None and tag_list:
                touched = np.concatenate([h for _, h in tag_list])
                parts.append(_top_touched(tag_dense, touched, k))
        if not parts:
            return np.zeros(0, dtype=np.int64)
        cand: Slots = np.unique(np.concatenate(parts).astype(np.int64))
        cand = cand[(cand >= 0) & (cand < n)]
        out: Slots = cand[self._alive[cand]]
        return out

    def _narrow(
        self,
        cand: Slots,
        q: Vectors,
        lex: list[tuple[Vectors, npt.NDArray[np.int32]]],
        tag_passes: list[tuple[Vectors | None, list[tuple[str, npt.NDArray[np.int32]]]]],
        use_examples: bool,
    ) -> Slots:
        """The RESTRICTED_RERANK candidates that score best with every facet
        (the whole intent only): a capability_domains query re-embeds just these."""
        q0 = q[:1]
        tag_dense, tag_list = tag_passes[0]
        ex = (
            self._examples.best_of(q0, cand)[:, 0]
            if use_examples and self._examples.total
            else np.zeros(len(cand), np.float32)
        )
        has_ex = self._has_examples[cand] & use_examples
        has_tags = self._n_tags[cand] > 0
        prelim = self._fuse(
            self._ctx.scan_rows(q0, cand)[:, 0],
            self._cap.scan_rows(q0, cand)[:, 0],
            lex[0][0][cand],
            ex,
            has_ex,
            tag_dense[cand] if tag_dense is not None else None,
            has_tags,
            tag_list,
            not np.any(q0),
            self._weight_sums(has_ex, has_tags),
        ).fused
        keep = np.argpartition(-prelim, RESTRICTED_RERANK - 1)[:RESTRICTED_RERANK]
        out: Slots = np.sort(cand[keep])
        return out

    def _restricted_capability(self, slots: Slots, allowed: set[str]) -> Vectors:
        """Unit capability vectors of the slots over the description and the allowed
        facets only, re-embedded from the agents' profiles (cached per agent)."""
        nf = len(FACETS)
        keep = np.array([f == "description" or f in allowed for f in FACETS], dtype=np.float32)
        sums = np.zeros((len(slots), nf, self._dim), dtype=np.float32)
        need: list[tuple[int, str]] = []
        for i, s in enumerate(slots.tolist()):
            cid = self._id_of[s]
            if cid is None:
                continue
            hit = self._facet_cache.get((cid, self._generation.get(s, 0)))
            if hit is None:
                need.append((i, cid))
            else:
                sums[i] = hit
        if need:
            profiles = self._profiles_of([cid for _, cid in need])
            got = [(i, cid, profiles[cid]) for i, cid in need if cid in profiles]
            if got:
                vecs = self.embed_profiles([p for _, _, p in got])
                for (i, cid, _), v in zip(got, vecs, strict=True):
                    sums[i] = v.facet_sums
                    key = (cid, self._generation.get(self._slot_of.get(cid, -1), 0))
                    self._facet_cache[key] = v.facet_sums
                while len(self._facet_cache) > DOMAIN_CACHE:
                    self._facet_cache.popitem(last=False)
        return normalize_rows(np.einsum("nfd,f->nd", sums, keep))

    def _profiles_of(self, ids: Sequence[str]) -> Mapping[str, CapabilityProfile]:
        if self._profiles is not None:
            return {c: p for c in ids if (p := self._profiles.get(c)) is not None}
        assert self._source is not None
        return self._source(ids)

    def matched_examples(self, canonical_id: str, slot: int, q: Vectors) -> list[dict[str, Any]]:
        """The agent's best-matching published examples for the query vectors
        (each scored exactly as the example component scores it)."""
        with self._lock:
            if self._slot_of.get(canonical_id) != slot:
                return []
            sims = self._examples.sims_of(slot, q)
        if not len(sims):
            return []
        profile = self._profiles_of([canonical_id]).get(canonical_id)
        if profile is None:
            return []
        best = sims.max(axis=1)
        examples = profile.examples[: len(sims)]
        order = sorted(range(len(examples)), key=lambda k: (-float(best[k]), k))
        return [
            {
                "id": examples[k].id,
                "text": examples[k].text,
                "score": round(min(1.0, float(best[k])), PRECISION),
            }
            for k in order[:MAX_EVIDENCE_EXAMPLES]
            if best[k] > EXAMPLE_FLOOR
        ]

    def equivalence(
        self,
        profile: CapabilityProfile,
        vectors: ProfileVectors | None = None,
        among: Sequence[str] | None = None,
    ) -> dict[str, float]:
        """How closely indexed agents' capabilities match ``profile`` (which need
        not be indexed itself), in [0, 1], six decimals: every agent, or those
        in ``among``; in approximate mode without ``among``, the nearest
        candidates by capability vector.

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
            if among is not None:
                slots = np.array(
                    sorted(s for c in among if (s := self._slot_of.get(c)) is not None),
                    dtype=np.int64,
                )
            elif self._ann_cap is not None:
                slots = np.unique(
                    self._ann_cap.search(capability[None, :], 4 * self.settings.candidates)
                )
            else:
                slots = np.array(sorted(self._slot_of.values()), dtype=np.int64)
            n = len(slots)
            total = w["description"] * np.clip(self._ctx.get(slots) @ context, 0.0, 1.0)
            total += w["capability"] * np.clip(self._cap.get(slots) @ capability, 0.0, 1.0)
            weight_sum = np.full(n, w["description"] + w["capability"], dtype=np.float32)
            if mine:
                shared = np.zeros(n, dtype=np.float32)
                for tag in mine:
                    kid = self._tags.key_id.get(tag)
                    if kid is not None:
                        shared += np.isin(slots, self._tags.postings(kid)[0])
                sizes = self._n_tags[slots].astype(np.float32)
                has_tags = sizes > 0
                union = np.where(has_tags, len(mine) + sizes - shared, 1.0)
                total += w["tag"] * np.where(has_tags, shared / union, 0.0)
                weight_sum += w["tag"] * has_tags
            if len(vecs.examples) and self._examples.total > 0:
                best = self._examples.best_of(vecs.examples, slots)  # (n, examples of profile)
                example = example_value(best).mean(axis=1)
                has_examples = self._has_examples[slots]
                total += w["example"] * np.where(has_examples, example, 0.0)
                weight_sum += w["example"] * has_examples
            ids = [self._id_of[s] for s in slots.tolist()]
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
        tags: list[tuple[str, npt.NDArray[np.int32]]],
        empty: bool,
        weight_sums: tuple[Vectors, Vectors],
    ) -> _Pass:
        """The weighted mean of the components over the weights of the components
        each agent has (``weight_sums``: :meth:`_weight_sums`, without and with
        the tag component)."""
        n = len(ctx)
        if empty:
            return _Pass(np.zeros(n, dtype=np.float32), [])
        total = WEIGHTS["context"] * np.clip(ctx, 0.0, 1.0)
        total += WEIGHTS["capability"] * np.clip(cap, 0.0, 1.0)
        total += WEIGHTS["lexical"] * lexical
        any_ex = bool(has_ex.any())
        if any_ex:
            total += WEIGHTS["example"] * np.where(has_ex, example_value(ex), 0.0)
        if tag is not None:
            total += WEIGHTS["tag"] * np.where(has_tags, tag, 0.0)
        total /= weight_sums[tag is not None]
        fused = np.clip(total, 0.0, 1.0, out=total).astype(np.float32, copy=False)
        return _Pass(
            fused,
            tags,
            ctx,
            cap,
            lexical,
            ex if any_ex else None,
            has_ex,
            tag,
            has_tags,
        )

    @staticmethod
    def _weight_sums(
        has_ex: npt.NDArray[np.bool_], has_tags: npt.NDArray[np.bool_]
    ) -> tuple[Vectors, Vectors]:
        """Per candidate, the sum of the weights of the components it has: without
        and with the tag component (a text names a known tag or not)."""
        base = np.full(
            len(has_ex),
            WEIGHTS["context"] + WEIGHTS["capability"] + WEIGHTS["lexical"],
            dtype=np.float32,
        )
        base += WEIGHTS["example"] * has_ex
        with_tag = base.copy()
        with_tag += WEIGHTS["tag"] * has_tags
        return base, with_tag

    def _tag_scores(
        self, text: str, n: int
    ) -> tuple[Vectors | None, list[tuple[str, npt.NDArray[np.int32]]]]:
        """IDF-weighted share of the intent's known tags that each agent carries
        (dense over slots), and the matched tags with their holders."""
        held = []
        for t in sorted(candidate_tags(text)):
            kid = self._tags.key_id.get(t)
            if kid is not None:
                holders = self._tags.postings(kid)[0]
                if len(holders):
                    held.append((t, holders))
        if not held:
            return None, []
        n_agents = max(len(self._slot_of), 1)
        idf = {t: float(np.log(1.0 + n_agents / len(h))) for t, h in held}
        denom = sum(idf.values())
        out = np.zeros(n, dtype=np.float32)
        for t, holders in held:
            out[holders[holders < n]] += idf[t] / denom
        return np.minimum(out, 1.0), held

    # -- snapshot --------------------------------------------------------------------
    def save(self, directory: Path, meta: Mapping[str, Any]) -> None:
        """Write the whole index to ``directory`` atomically (a sibling temporary
        directory renamed into place), with the caller's ``meta``."""
        with self._lock:
            self._tags.compact()
            self._lexical.postings.compact()
            n = len(self._id_of)
            arrays: dict[str, npt.NDArray[np.generic]] = {
                **self._ctx.state("ctx", n),
                **self._cap.state("cap", n),
                "has_examples": self._has_examples[:n],
                "n_tags": self._n_tags[:n],
                **{f"tag_{k}": v for k, v in self._tags.state().items()},
                **{f"lex_{k}": v for k, v in self._lexical.state().items()},
                **self._examples.state(),
            }
            doc = {
                "format": SNAPSHOT_FORMAT,
                "dim": self._dim,
                "example_dims": self._examples.dims,
                "embedder": embedder_fingerprint(self._emb),
                "ids": self._id_of,
                "tag_keys": self._tags.keys,
                "lex_keys": self._lexical.postings.keys,
                "approximate": self._ann_cap is not None,
                "ann_built_for": self._ann_built_for,
                "meta": dict(meta),
            }
            directory = Path(directory)
            tmp = directory.with_name(f"{directory.name}.tmp-{uuid.uuid4().hex[:8]}")
            tmp.mkdir(parents=True)
            try:
                with open(tmp / "arrays.npz", "wb") as fh:
                    np.savez(fh, **arrays)  # type: ignore[arg-type]
                if self._ann_cap is not None and self._ann_ex is not None:
                    self._ann_cap.save(tmp / "capability.faiss")
                    self._ann_ex.save(tmp / "examples.faiss")
                (tmp / "index.json").write_bytes(orjson.dumps(doc))
                for f in tmp.iterdir():
                    with open(f, "rb") as fh:
                        os.fsync(fh.fileno())
                old = directory.with_name(f"{directory.name}.old-{uuid.uuid4().hex[:8]}")
                if directory.exists():
                    directory.rename(old)
                tmp.rename(directory)
                if old.exists():
                    shutil.rmtree(old, ignore_errors=True)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            self.dirty = False

    @classmethod
    def load(
        cls,
        directory: Path,
        embedder: Embedder,
        *,
        settings: AnnSettings | None = None,
        profile_source: ProfileSource | None = None,
        query_cache: int = 1024,
    ) -> tuple[CapabilityIndex, dict[str, Any]] | None:
        """The index saved in ``directory`` and its meta, or None when there is no
        usable snapshot (absent, another format or embedder, inconsistent). A
        snapshot without profiles needs a ``profile_source``."""
        directory = Path(directory)
        try:
            doc = orjson.loads((directory / "index.json").read_bytes())
            if (
                doc.get("format") != SNAPSHOT_FORMAT
                or doc.get("dim") != embedder.dim
                or doc.get("embedder") != embedder_fingerprint(embedder)
            ):
                return None
            # np.load gives each array its own (writable) memory: restored as is,
            # never copied again (a 1M-agent index is 1.6 GB of arrays)
            with np.load(directory / "arrays.npz", allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            idx = cls(
                embedder,
                query_cache,
                settings=settings,
                profile_source=profile_source or _no_profiles,
            )
            ids: list[str | None] = doc["ids"]
            n = len(ids)
            idx._ctx = QRows.restore(idx._dim, "ctx", arrays)
            idx._cap = QRows.restore(idx._dim, "cap", arrays)
            idx._has_examples = np.asarray(arrays["has_examples"], dtype=bool)
            idx._n_tags = np.asarray(arrays["n_tags"], dtype=np.int16)
            idx._tags = SlotPostings.restore(
                0, doc["tag_keys"], {k[4:]: v for k, v in arrays.items() if k.startswith("tag_")}
            )
            idx._lexical = LexicalIndex.restore(
                len(FACETS),
                doc["lex_keys"],
                {k[4:]: v for k, v in arrays.items() if k.startswith("lex_")},
            )
            idx._examples = ExampleBlocks.restore(doc["example_dims"], arrays)
            if not (len(idx._ctx) == len(idx._cap) == len(idx._has_examples) == n):
                return None
            idx._id_of = ids
            idx._slot_of = {c: s for s, c in enumerate(ids) if c is not None}
            idx._alive = np.array([c is not None for c in ids], dtype=bool)
            idx._free = [s for s, c in enumerate(ids) if c is None]
            if doc.get("approximate"):
                nprobe = idx.settings.nprobe
                idx._ann_cap = AnnIndex.load(directory / "capability.faiss", nprobe)
                idx._ann_ex = AnnIndex.load(directory / "examples.faiss", nprobe)
                idx._ann_built_for = int(doc.get("ann_built_for") or len(idx._slot_of))
            elif len(idx._slot_of) > idx.settings.exact_max:
                idx.build_ann()
            idx.dirty = False
            meta: dict[str, Any] = doc.get("meta") or {}
            return idx, meta
        except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError, RuntimeError):
            return None


def _no_profiles(ids: Sequence[str]) -> Mapping[str, CapabilityProfile]:
    return {}


def _top_touched(dense: Vectors, touched: npt.NDArray[np.integer], k: int) -> Slots:
    """The (at most) k touched slots with the highest dense score (``touched``
    may repeat a slot; only the best 2k entries are de-duplicated)."""
    if not len(touched):
        return np.zeros(0, dtype=np.int64)
    if len(touched) > 2 * k:
        touched = touched[np.argpartition(-dense[touched], 2 * k - 1)[: 2 * k]]
    uniq: Slots = np.unique(touched).astype(np.int64)
    if len(uniq) <= k:
        return uniq
    top = np.argpartition(-dense[uniq], k - 1)[:k]
    out: Slots = uniq[top]
    return out


def embedder_fingerprint(embedder: Embedder) -> str:
    """Identifies the embedding model, so a snapshot is never read with another one."""
    fp = getattr(embedder, "fingerprint", None)
    if isinstance(fp, str):
        return fp
    return f"{type(embedder).__module__}.{type(embedder).__qualname__}/{embedder.dim}"
