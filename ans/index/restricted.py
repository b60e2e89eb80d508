"""``capability_domains`` queries: capability vectors over the allowed facets only.

The index keeps one whole-document capability vector per agent in memory
(per-facet vectors of a million agents would not fit), so a restricted query
reads the per-facet sums of its candidates from the facet-sums file
(:mod:`.facet_file`, which keeps the rows it read recently in memory),
re-embedding from their profiles only what the file lacks (or, with no file,
everything), and keeps what it embedded in a small LRU cache keyed by (agent,
generation). Owns that cache, the facet mask of a set of allowed domains, and
the narrowing of a restricted query's candidates to the
:data:`RESTRICTED_RERANK` best by the all-facet score (so only those are
scored over their allowed facets).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from .embedder import Vectors, normalize_rows
from .facet_file import FacetFile, stored_precision
from .profiles import FACET_INDEX, FACETS, CapabilityProfile, ProfileVectors, profile_digest
from .scoring import LexicalHits, TagPasses, fuse, weight_sums
from .select import top_k
from .slots import Slots, SlotTable

# Per-agent facet sums this cache embedded, kept in memory (7 KB each) for
# capability_domains queries (rows read from the facet-sums file are kept by it).
DOMAIN_CACHE = 1024
# A capability_domains query scores this many of its best candidates (by the
# all-facet score) over its allowed facets; the rest are not scored.
RESTRICTED_RERANK = 64


FULL = np.ones(len(FACETS), dtype=bool)  # every facet


def facet_mask(allowed: set[str]) -> npt.NDArray[np.float32]:
    """1 for the facets a query may read (the description always), else 0."""
    return np.array([f == "description" or f in allowed for f in FACETS], dtype=np.float32)


class FacetCache:
    """Per-agent facet sums of recently re-embedded agents (not thread-safe; callers lock).

    An entry holds the sums of the facets some query needed (the others are
    not embedded: the examples, the largest text, only when a query allows
    them); a later query needing more facets embeds only what is missing."""

    def __init__(self, size: int = DOMAIN_CACHE) -> None:
        self._size = size
        self._sums: OrderedDict[tuple[str, int], tuple[Vectors, npt.NDArray[np.bool_]]] = (
            OrderedDict()
        )

    def capability(
        self,
        table: SlotTable,
        slots: Slots,
        allowed: set[str],
        profiles_of: Callable[[Sequence[str]], Mapping[str, CapabilityProfile]],
        embed_profiles: Callable[[Sequence[CapabilityProfile]], list[ProfileVectors]],
        stored: FacetFile | None = None,
    ) -> Vectors:
        """Unit capability vectors of the slots over the description and the allowed
        facets only. Facet sums come from this cache, else from ``stored`` (the
        facet-sums file, one read for all the slots), else are re-embedded from the
        agents' profiles (and written to ``stored``). Facets not allowed count 0
        whether their sums are known or not."""
        nf = len(FACETS)
        keep = facet_mask(allowed)
        wanted = keep > 0
        sums = np.zeros((len(slots), nf, table.dim), dtype=np.float32)
        need: list[tuple[int, str, tuple[Vectors, npt.NDArray[np.bool_]] | None]] = []
        for i, s in enumerate(slots.tolist()):
            cid = table.id_of[s]
            if cid is None:
                continue
            hit = self._sums.get((cid, table.generation.get(s, 0)))
            if hit is not None and hit[1][wanted].all():
                self._sums.move_to_end((cid, table.generation.get(s, 0)))
                sums[i] = hit[0]
            else:
                need.append((i, cid, hit))
        if need and stored is not None:
            digests = {cid: int(table.digest[slots[i]]) for i, cid, _ in need}
            found = stored.get({c: d for c, d in digests.items() if d}, len(table.id_of))
            for i, cid, _ in need:
                if cid in found:  # the file keeps recently read rows itself
                    sums[i] = found[cid]
            need = [x for x in need if x[1] not in found]
            if need:
                embedded = self._embed([c for _, c, _ in need], FULL, profiles_of, embed_profiles)
                rows = []
                for i, cid, _ in need:
                    if cid in embedded:
                        digest, got = embedded[cid]
                        sums[i] = got = stored_precision(got)
                        self._keep(table, cid, got, FULL)
                        if not digests[cid]:  # a slot from an older snapshot: learn it
                            table.digest[slots[i]] = digest
                        rows.append((digest, got))  # keyed by what was embedded
                stored.put(rows)
        elif need:
            embedded = self._embed([c for _, c, _ in need], wanted, profiles_of, embed_profiles)
            for i, cid, hit in need:
                if cid not in embedded:
                    continue
                filled, merged = wanted.copy(), embedded[cid][1]
                if hit is not None:  # keep what an earlier query embedded
                    merged = np.where(wanted[:, None], merged, hit[0])
                    filled |= hit[1]
                sums[i] = merged
                self._keep(table, cid, merged, filled)
        return normalize_rows(np.einsum("nfd,f->nd", sums, keep))

    @staticmethod
    def _embed(
        ids: list[str],
        wanted: npt.NDArray[np.bool_],
        profiles_of: Callable[[Sequence[str]], Mapping[str, CapabilityProfile]],
        embed_profiles: Callable[[Sequence[CapabilityProfile]], list[ProfileVectors]],
    ) -> dict[str, tuple[int, Vectors]]:
        """(profile digest, the ``wanted`` facet sums, the others 0) of those of
        ``ids`` whose profile the source has, re-embedded."""
        profiles = profiles_of(ids)
        got = [profiles[c] for c in ids if c in profiles]
        vecs = embed_profiles([only_facets(p, wanted) for p in got])
        return {
            p.canonical_id: (profile_digest(p), v.facet_sums)
            for p, v in zip(got, vecs, strict=True)
        }

    def _keep(
        self, table: SlotTable, cid: str, sums: Vectors, filled: npt.NDArray[np.bool_]
    ) -> None:
        key = (cid, table.generation.get(table.slot_of.get(cid, -1), 0))
        self._sums[key] = (sums, filled)
        while len(self._sums) > self._size:
            self._sums.popitem(last=False)


def only_facets(profile: CapabilityProfile, wanted: npt.NDArray[np.bool_]) -> CapabilityProfile:
    """The profile with the facets not ``wanted`` emptied (they embed to zero sums)."""
    if wanted.all():
        return profile
    facets = {f: (t if wanted[FACET_INDEX[f]] else "") for f, t in profile.facets.items()}
    examples = profile.examples if wanted[FACET_INDEX["examples"]] else ()
    return replace(profile, facets=facets, examples=examples)


def narrow(
    table: SlotTable,
    cand: Slots,
    q: Vectors,
    lex: LexicalHits,
    tag_passes: TagPasses,
) -> Slots:
    """The RESTRICTED_RERANK candidates that score best with every facet
    (the whole intent only): a capability_domains query re-embeds just these."""
    q0 = q[:1]
    tag_dense, tag_list = tag_passes[0]
    has_tags = table.n_tags[cand] > 0
    prelim = fuse(
        np.clip(table.ctx.scan_rows(q0, cand)[:, 0], 0.0, 1.0),
        np.clip(table.cap.scan_rows(q0, cand)[:, 0], 0.0, 1.0),
        lex[0].at(cand),
        tag_dense[cand] if tag_dense is not None else None,
        has_tags,
        tag_list,
        not np.any(q0),
        weight_sums(has_tags),
    ).fused
    keep = top_k(prelim, RESTRICTED_RERANK)
    out: Slots = np.sort(cand[keep])
    return out
