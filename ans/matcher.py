"""Capability matching, as callers have always imported it.

The implementation lives in :mod:`ans.index` (one module per concern, see its
docstring); this module re-exports its names so ``from ans.matcher import ...``
keeps working.
"""

from __future__ import annotations

from .index.capability import CapabilityIndex, CapabilityMatcher
from .index.embedder import (
    Embedder,
    QueryVectors,
    Vectors,
    WordLlamaEmbedder,
    embedder_fingerprint,
    normalize_rows,
)
from .index.equivalence import EQUIVALENCE_WEIGHTS
from .index.profiles import (
    ALL_DOMAINS,
    DOMAIN_FACETS,
    FACET_INDEX,
    FACETS,
    CapabilityProfile,
    Example,
    ProfileSource,
    ProfileVectors,
    profile_from,
)
from .index.restricted import DOMAIN_CACHE, RESTRICTED_RERANK
from .index.scoring import (
    COMPONENTS,
    EXAMPLE_FLOOR,
    MAX_EVIDENCE_EXAMPLES,
    SEGMENT_MIX,
    WEIGHTS,
    Pass,
    QueryScores,
    example_value,
)
from .index.slots import MAX_EXAMPLES, Slots
from .index.snapshot import SNAPSHOT_FORMAT

_Pass = Pass  # the name ans.relevance and older callers use

__all__ = [
    "ALL_DOMAINS",
    "COMPONENTS",
    "DOMAIN_CACHE",
    "DOMAIN_FACETS",
    "EQUIVALENCE_WEIGHTS",
    "EXAMPLE_FLOOR",
    "FACETS",
    "FACET_INDEX",
    "MAX_EVIDENCE_EXAMPLES",
    "MAX_EXAMPLES",
    "RESTRICTED_RERANK",
    "SEGMENT_MIX",
    "SNAPSHOT_FORMAT",
    "WEIGHTS",
    "CapabilityIndex",
    "CapabilityMatcher",
    "CapabilityProfile",
    "Embedder",
    "Example",
    "Pass",
    "ProfileSource",
    "ProfileVectors",
    "QueryScores",
    "QueryVectors",
    "Slots",
    "Vectors",
    "WordLlamaEmbedder",
    "_Pass",
    "embedder_fingerprint",
    "example_value",
    "normalize_rows",
    "profile_from",
]
