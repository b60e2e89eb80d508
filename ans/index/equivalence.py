"""Routing equivalence: how closely indexed agents' capabilities match a given
profile (discovery draft 6.1, the ``preferred_agent`` alternatives).

Owns the equivalence weights and formula; reads the slot table (and, in
approximate mode, the capability ANN for the nearest candidates). Callers
(:meth:`ans.index.capability.CapabilityIndex.equivalence`) hold the index lock.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ranking import PRECISION
from .approximate import AnnMode
from .embedder import normalize_rows
from .profiles import FACET_INDEX, CapabilityProfile, ProfileVectors
from .scoring import example_value
from .slots import SlotTable

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


def equivalence(
    table: SlotTable,
    ann: AnnMode,
    profile: CapabilityProfile,
    vecs: ProfileVectors,
    among: Sequence[str] | None,
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
    deterministic for identical index contents. ``vecs``: the vectors of
    ``profile``; the caller holds the index lock."""
    w = EQUIVALENCE_WEIGHTS
    context = normalize_rows(vecs.facet_sums[FACET_INDEX["description"]])
    capability = normalize_rows(vecs.facet_sums.sum(axis=0))
    mine = set(profile.tags)
    if among is not None:
        slots = table.slots_of(among)
    elif ann.active:
        slots = ann.nearest(table, capability)
    else:
        slots = table.live_slots()
    n = len(slots)
    total = w["description"] * np.clip(table.ctx.get(slots) @ context, 0.0, 1.0)
    total += w["capability"] * np.clip(table.cap.get(slots) @ capability, 0.0, 1.0)
    weight_sum = np.full(n, w["description"] + w["capability"], dtype=np.float32)
    if mine:
        shared = np.zeros(n, dtype=np.float32)
        for tag in mine:
            kid = table.tags.key_id.get(tag)
            if kid is not None:
                shared += np.isin(slots, table.tags.postings(kid)[0])
        sizes = table.n_tags[slots].astype(np.float32)
        has_tags = sizes > 0
        union = np.where(has_tags, len(mine) + sizes - shared, 1.0)
        total += w["tag"] * np.where(has_tags, shared / union, 0.0)
        weight_sum += w["tag"] * has_tags
    if len(vecs.examples) and table.examples.total > 0:
        best = table.examples.best_of(vecs.examples, slots)  # (n, examples of profile)
        example = example_value(best).mean(axis=1)
        has_examples = table.has_examples[slots]
        total += w["example"] * np.where(has_examples, example, 0.0)
        weight_sum += w["example"] * has_examples
    ids = [table.id_of[s] for s in slots.tolist()]
    score = np.clip(total / weight_sum, 0.0, 1.0)
    return {
        cid: round(float(s), PRECISION)
        for cid, s in zip(ids, score.tolist(), strict=True)
        if cid is not None
    }
