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
one part well is found. Weights are fixed in :data:`.scoring.WEIGHTS`; the
docs/matching.md says how they were chosen (leave-one-out over the published example
tasks only).

This module owns :class:`CapabilityIndex`, the thread-safe facade over those
indices (one lock; add/remove/search; the query plan: candidates, component
similarities, fusion), and the :class:`CapabilityMatcher` protocol the service
depends on. The work is done by its sibling modules (see :mod:`ans.index`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import structlog

from ..ann import AnnSettings
from ..ranking import PRECISION
from ..text import segments
from . import snapshot
from .approximate import AnnMode
from .embedder import Embedder, QueryVectors, Vectors, embedder_fingerprint
from .equivalence import equivalence
from .facet_file import FacetFile
from .int8_rows import query_codes, similarities
from .layout import Layout, force_layout
from .layout import describe as scan_layout_description
from .prefetch import ScanPrefetch
from .profiles import (
    ALL_DOMAINS,
    DOMAIN_FACETS,
    CapabilityProfile,
    ProfileSource,
    ProfileVectors,
    embed_profiles,
    no_profiles,
)
from .restricted import RESTRICTED_RERANK, FacetCache, facet_mask, narrow
from .scoring import (
    EXAMPLE_FLOOR,
    MAX_EVIDENCE_EXAMPLES,
    QueryScores,
    combine,
    example_value,
    fuse_texts,
    tag_scores,
)
from .slots import Slots, SlotTable

# Query texts whose vectors are kept (LRU; an intent is 1 + its segments texts;
# 384 float32 each: ~6 MB). 1,024 was fewer than the ~1,100 texts of 500 varied
# intents, so a workload cycling through them missed on every text (an LRU
# scanned in order) and paid the embedding (~125-230 us) on every query.
QUERY_CACHE = 4096

log = structlog.get_logger("ans.index")


class CapabilityMatcher(Protocol):
    embedder_fingerprint: str  # the embedding model (equal fingerprints, equal vectors)

    @property
    def dim(self) -> int: ...

    def embed_profile(self, profile: CapabilityProfile) -> ProfileVectors: ...
    def embed_profiles(self, profiles: Sequence[CapabilityProfile]) -> list[ProfileVectors]: ...
    def upsert(self, profile: CapabilityProfile, vectors: ProfileVectors | None = None) -> None: ...
    def upsert_many(self, items: Sequence[tuple[CapabilityProfile, ProfileVectors]]) -> None: ...
    def settle(self) -> None: ...
    def merge_pending(self) -> int: ...
    def warm(self) -> None: ...
    @property
    def batches_scans(self) -> bool: ...
    def prefetch(self, intents: Sequence[str]) -> int: ...
    def remove(self, canonical_id: str) -> None: ...
    def query(
        self,
        intent: str,
        domains: tuple[str, ...] | None,
        *,
        evidence: bool = False,
        lazy_ids: bool = False,
    ) -> QueryScores: ...
    def slot_assignments(
        self,
    ) -> tuple[object, list[str | None], Mapping[str, int], list[int] | None]: ...
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
    def slot_ids(self) -> list[str | None]: ...
    def save(self, directory: Path, meta: Mapping[str, Any]) -> None: ...
    def __len__(self) -> int: ...


class CapabilityIndex:
    """Tag, context, example and lexical indices over every Active agent (thread-safe).

    Up to ``settings.exact_max`` agents a query scores every agent (exact).
    Above it, candidates come from FAISS (capability and example vectors),
    the BM25 postings and the tag postings, ``settings.candidates_at(n)`` per
    source for the intent and ``settings.part_candidates_at(n)`` by vector for
    each of its parts, and only they are scored - with the same formulas. A
    ``capability_domains`` query always scores candidates: it reads their facet
    sums from ``facet_file`` (on disk: per-facet vectors of a million agents
    would not fit in memory), re-embedding from ``profile_source`` (e.g. the
    store) only what the file lacks.

    Without a ``profile_source`` the index keeps every profile in memory (fine
    for small catalogs and tests); the server passes one backed by its store.

    This class is the lock and the seams: storage is :class:`SlotTable`, the
    mode switch and candidates :class:`AnnMode`, scoring :mod:`.scoring`,
    restricted queries :mod:`.restricted`, routing :mod:`.equivalence`,
    snapshots :mod:`.snapshot`.
    """

    def __init__(
        self,
        embedder: Embedder,
        query_cache: int = QUERY_CACHE,
        *,
        settings: AnnSettings | None = None,
        profile_source: ProfileSource | None = None,
    ) -> None:
        self._emb = embedder
        self.embedder_fingerprint = embedder_fingerprint(embedder)
        self._dim = embedder.dim
        self.settings = settings or AnnSettings()
        if self.settings.scan_layout != "auto":  # pinned by [index] scan_layout
            force_layout(cast(Layout, self.settings.scan_layout))
        self._lock = threading.RLock()
        example_dims = min(self._dim, getattr(embedder, "prefix_dims", self._dim))
        self._table = SlotTable(self._dim, example_dims, keep_profiles=profile_source is None)
        self._ann = AnnMode(self.settings)
        self._facets = FacetCache()
        self._queries = QueryVectors(embedder, query_cache)
        self._prefetch = ScanPrefetch()  # the last batch's exhaustive scans
        self._source = profile_source
        # every agent's facet sums on disk (restricted queries); None: re-embed
        self.facet_file: FacetFile | None = None
        self.dirty = False  # changed since the last save()/load()

    @property
    def dim(self) -> int:
        """The width of the embedder's vectors."""
        return self._dim

    def __len__(self) -> int:
        return len(self._table)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._table.slot_of)

    def slot_ids(self) -> list[str | None]:
        """Every slot's canonical id (None: free), in slot order, as a snapshot
        saves them (per-slot meta arrays are aligned with this)."""
        with self._lock:
            return list(self._table.id_of)

    @property
    def approximate(self) -> bool:
        return self._ann.active

    def describe(self) -> dict[str, Any]:
        """What search the index uses now (health endpoint, benchmarks)."""
        with self._lock:
            cap = self._ann.cap
            return {
                "agents": len(self._table),
                "mode": "approximate" if cap is not None else "exact",
                "index": "IVF-PQ 4-bit fast scan (FAISS)" if cap is not None else "flat scan",
                "embedding_dims": self._dim,
                "exact_max": self.settings.exact_max,
                "nprobe": cap.nprobe if cap is not None else None,
                "candidates": self.settings.candidates_at(len(self._table)),
                **scan_layout_description(self._dim),
            }

    # -- embedding and mutation --------------------------------------------------------
    def embed_profile(self, profile: CapabilityProfile) -> ProfileVectors:
        return self.embed_profiles([profile])[0]

    def embed_profiles(self, profiles: Sequence[CapabilityProfile]) -> list[ProfileVectors]:
        """Embed many profiles in one embedder call (:func:`.profiles.embed_profiles`)."""
        return embed_profiles(self._emb, profiles)

    def _claim(self, cid: str) -> int:
        slot = self._table.slot_of.get(cid)
        if slot is not None:
            self._ann.forget(self._table, slot)
        return self._table.claim(cid)

    def upsert(self, profile: CapabilityProfile, vectors: ProfileVectors | None = None) -> None:
        vecs = vectors if vectors is not None else self.embed_profile(profile)
        with self._lock:
            before = self._digest_of(profile.canonical_id)
            slot = self._claim(profile.canonical_id)
            self._table.place(slot, profile, vecs)
            self._ann.add(self._table, [slot])
            self.dirty = True
            self._ann.maybe_switch(self._table)
            digest = int(self._table.digest[slot])
        if self.facet_file is not None:
            self.facet_file.put([(digest, vecs.facet_sums)])
            if before not in (0, digest):
                self.facet_file.forget([before])

    def upsert_many(self, items: Sequence[tuple[CapabilityProfile, ProfileVectors]]) -> None:
        """Many agents at once (bulk import, cold start): postings are merged in one
        sort, and the approximate index, if needed, is built once at the end."""
        if not items:
            return
        with self._lock:
            before = {self._digest_of(p.canonical_id) for p, _ in items}
            slots = [self._claim(p.canonical_id) for p, _ in items]
            self._table.place_many(slots, items)
            self._ann.add(self._table, slots)
            self.dirty = True
            self._ann.maybe_switch(self._table)
            digests = self._table.digest[slots].tolist()
        if self.facet_file is not None:
            self.facet_file.put(
                (d, v.facet_sums) for (_, v), d in zip(items, digests, strict=True)
            )
            self.facet_file.forget(before - set(digests) - {0})

    def settle(self) -> None:
        """Merge what bulk upserts left pending now, not at the next query
        (:meth:`SlotTable.settle`)."""
        with self._lock:
            self._table.settle()

    def merge_pending(self) -> int:
        """Put the agents waiting outside the approximate index's lists into
        them (:class:`.approximate.AnnMode`); how many. For an offline writer
        (``ans import``) before its snapshot: a server's workers keep them
        pending rather than each copying the lists."""
        with self._lock:
            waiting = len(self._ann.pending)
            self._ann.merge(self._table)
            return waiting

    def warm(self) -> None:
        """Settle pending merges and pack what exhaustive scans read (:meth:`QRows.prepare`),
        at start-up rather than in the first DISCOVER; before ``--workers`` forks."""
        with self._lock:
            t = self._table
            t.settle()
            if not self._ann.active:
                n = len(t.id_of)
                t.ctx.prepare(n)
                t.cap.prepare(n)
                chosen = scan_layout_description(self._dim)
                if chosen["scan_layout"] is not None:  # measured (enough rows to scan)
                    log.info("exhaustive scan layout", agents=n, **chosen)

    def remove(self, canonical_id: str) -> None:
        with self._lock:
            slot = self._table.slot_of.get(canonical_id)
            if slot is None:
                return
            before = int(self._table.digest[slot])
            self._ann.forget(self._table, slot)
            self._table.release(canonical_id)
            self.dirty = True
        if self.facet_file is not None:
            self.facet_file.forget([before])

    def _digest_of(self, canonical_id: str) -> int:
        """The profile digest of an indexed agent's slot (0: not indexed, unknown)."""
        slot = self._table.slot_of.get(canonical_id)
        return 0 if slot is None else int(self._table.digest[slot])

    def build_ann(self) -> None:
        """(Re)build the approximate indices over every indexed agent."""
        with self._lock:
            self._ann.build(self._table)

    # -- query -----------------------------------------------------------------------
    def query_vectors(self, texts: Sequence[str]) -> Vectors:
        """Normalized embeddings of the texts (an LRU cache keyed by text)."""
        return self._queries.vectors(texts)

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
        lazy_ids: bool = False,
    ) -> QueryScores:
        """Score the intent. ``exhaustive`` forces (True) or forbids (False) scoring
        every agent (default: by catalog size); ``only`` scores just those ids.
        ``lazy_ids``: the candidates' canonical ids are not read now (the caller
        uses their slots, :meth:`QueryScores.match_slots`, and holds the lock
        its writers hold, so that ids read later are still right)."""
        texts = [intent, *segments(intent)]
        q = self.query_vectors(texts)
        allowed = set(ALL_DOMAINS if domains is None else domains)
        restricted = domains is not None and not all(
            DOMAIN_FACETS[d] is None or d in allowed for d in ALL_DOMAINS
        )
        t = self._table
        with self._lock:
            n = len(t.id_of)
            lex = t.lexical.score_many(texts, facet_mask(allowed), n)
            tag_passes = [
                tag_scores(t.tags, len(t), x, n) if "tags" in allowed else (None, []) for x in texts
            ]
            if only is not None:
                cand, full = t.slots_of(only), False
            else:
                full = (
                    exhaustive if exhaustive is not None else not (self._ann.active or restricted)
                )
                cand = (
                    np.arange(n, dtype=np.int64)
                    if full
                    else self._ann.candidates(t, q, lex, tag_passes, n)
                )
            if restricted and not full and len(cand) > RESTRICTED_RERANK:
                cand = narrow(t, cand, q, lex, tag_passes)
            batched = (
                self._prefetch.take(t.ctx, t.cap, n, tuple(texts))
                if full and not restricted
                else None
            )
            if batched is not None:  # this query's columns of a batch's scan
                ctx, cap = batched
            else:
                ctx, cap = self._similarities(q, cand, n, full, allowed if restricted else None)
            pick = slice(0, n) if full else cand  # every slot: no gather
            has_tags = t.n_tags[pick] > 0
            ids = None if lazy_ids else t.ids_at(cand, full)
        passes = fuse_texts(q, ctx, cap, lex, has_tags, tag_passes, pick)
        return combine(
            passes,
            ids,
            exhaustive=full,
            slots=cand,
            vectors=q,
            index=self,
            domains=domains,
            texts=tuple(texts),
            table=t,
        )

    @property
    def batches_scans(self) -> bool:
        """Whether a plain DISCOVER scans every agent now (:meth:`prefetch` applies)."""
        return not self._ann.active

    def prefetch(self, intents: Sequence[str]) -> int:
        """Scan every agent once for several intents' query texts (:mod:`.prefetch`),
        for their :meth:`query` calls that follow with the rows unchanged; how many
        intents it covered (0: none, each query scans on its own)."""
        if self._ann.active:
            return 0
        # embedded outside the lock, as query() does; each distinct intent once
        queries = {tx: self.query_vectors(tx) for tx in {(i, *segments(i)): None for i in intents}}
        with self._lock:
            if self._ann.active:
                self._prefetch.clear()
                return 0
            t = self._table
            return self._prefetch.fill(t.ctx, t.cap, len(t.id_of), queries)

    def slot_assignments(
        self,
    ) -> tuple[object, list[str | None], Mapping[str, int], list[int] | None]:
        """(the slot table, slot -> id, id -> slot, the slots whose id changed
        since the last call or None), for the registry's slot link
        (:meth:`ans.registry.Registry.linked`); one consumer."""
        with self._lock:
            t = self._table
            return t, t.id_of, t.slot_of, t.take_changes()

    def _similarities(
        self,
        q: Vectors,
        cand: Slots,
        n: int,
        full: bool,
        restricted_to: set[str] | None,
    ) -> tuple[Vectors, Vectors]:
        """Context and capability similarities of the candidates (every slot
        when ``full``) with each query vector; the capability over the
        description and ``restricted_to`` facets only when given."""
        t = self._table
        qc = query_codes(q)  # context and capability rows share the query codes
        ctx = t.ctx.scan(qc, n) if full else t.ctx.scan_rows(qc, cand)
        if restricted_to is not None:
            facets = self._facets.capability(
                t, cand, restricted_to, self._profiles_of, self.embed_profiles, self.facet_file
            )
            cap = similarities(facets, q)
        else:
            cap = t.cap.scan(qc, n) if full else t.cap.scan_rows(qc, cand)
        return ctx, cap

    def _profiles_of(self, ids: Sequence[str]) -> Mapping[str, CapabilityProfile]:
        profiles = self._table.profiles
        if profiles is not None:
            return {c: p for c in ids if (p := profiles.get(c)) is not None}
        assert self._source is not None
        return self._source(ids)

    def example_evidence(
        self, canonical_id: str, slot: int, q: Vectors
    ) -> tuple[float | None, list[dict[str, Any]]]:
        """The example component of an agent for the whole intent (its best
        example's similarity, :func:`.scoring.example_value`; None when it
        published none) and its best-matching examples for any query text."""
        with self._lock:
            if self._table.slot_of.get(canonical_id) != slot:
                return None, []
            sims = self._table.examples.sims_of(slot, q)
        if not len(sims):
            return None, []
        example = float(example_value(sims[:, :1].max(axis=0))[0])
        profile = self._profiles_of([canonical_id]).get(canonical_id)
        if profile is None:
            return example, []
        best = sims.max(axis=1)
        examples = profile.examples[: len(sims)]
        order = sorted(range(len(examples)), key=lambda k: (-float(best[k]), k))
        return example, [
            {
                "id": examples[k].id,
                "text": examples[k].text,
                "score": round(min(1.0, float(best[k])), PRECISION),
            }
            for k in order[:MAX_EVIDENCE_EXAMPLES]
            if best[k] > EXAMPLE_FLOOR
        ]

    # -- routing equivalence -----------------------------------------------------------
    def equivalence(
        self,
        profile: CapabilityProfile,
        vectors: ProfileVectors | None = None,
        among: Sequence[str] | None = None,
    ) -> dict[str, float]:
        """How closely indexed agents' capabilities match ``profile`` (every agent,
        those in ``among``, or in approximate mode the nearest): see
        :func:`.equivalence.equivalence`."""
        vecs = vectors if vectors is not None else self.embed_profile(profile)
        with self._lock:
            return equivalence(self._table, self._ann, profile, vecs, among)

    # -- snapshot --------------------------------------------------------------------
    def save(self, directory: Path, meta: Mapping[str, Any]) -> None:
        """Write the whole index to ``directory`` atomically (a sibling temporary
        directory renamed into place), with the caller's ``meta``."""
        with self._lock:
            snapshot.write(Path(directory), self._table, self._ann, self._emb, meta)
            self.dirty = False

    @classmethod
    def load(
        cls,
        directory: Path,
        embedder: Embedder,
        *,
        settings: AnnSettings | None = None,
        profile_source: ProfileSource | None = None,
        query_cache: int = QUERY_CACHE,
    ) -> tuple[CapabilityIndex, dict[str, Any]] | None:
        """The index saved in ``directory`` and its meta, or None when there is no
        usable snapshot (absent, another format or embedder, inconsistent). A
        snapshot without profiles needs a ``profile_source``."""
        directory = Path(directory)
        try:
            snap = snapshot.read(directory, embedder)
            if snap is None:
                return None
            idx = cls(
                embedder,
                query_cache,
                settings=settings,
                profile_source=profile_source or no_profiles,
            )
            idx._table = snap.table
            rebuilt = False
            if snap.approximate:
                rebuilt = idx._ann.load(directory, snap.table, snap.ann_built_for, snap.ann_pending)
            elif len(snap.table) > idx.settings.exact_max:
                idx.build_ann()
            if rebuilt:
                log.info("approximate lists rebuilt in the current layout", agents=len(snap.table))
            idx.dirty = rebuilt  # the next snapshot saves the rebuilt lists
            return idx, snap.meta
        except snapshot.LOAD_ERRORS:
            return None
