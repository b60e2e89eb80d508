"""What an agent is matched on: its capability profile (facet texts, normalized
tags, published examples) built from a manifest and its capabilities, and the
profile's vectors (per-facet token-vector sums, example vectors).

Owns the facet list, the DISCOVER ``capability_domains`` -> facet mapping, and
the one batched embedder call that turns profiles into :class:`ProfileVectors`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..text import content_text, normalize_tag, split_label
from .embedder import Embedder, Vectors, normalize_rows

FACETS = ("description", "methods", "modalities", "tools", "zones", "tags", "examples")
FACET_INDEX = {name: i for i, name in enumerate(FACETS)}
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


def profile_digest(profile: CapabilityProfile) -> int:
    """A 63-bit digest (never 0) of the text a profile's facet sums are embedded
    from: its facet texts and examples. Equal digests, equal facet sums."""
    h = hashlib.blake2b(digest_size=8)
    for f in FACETS:
        h.update(profile.facets.get(f, "").encode())
        h.update(b"\x1f")
    for ex in profile.examples:
        h.update(b"\x1e")
        h.update(ex.text.encode())
    return (int.from_bytes(h.digest(), "big") >> 1) | 1


ProfileSource = Callable[[Sequence[str]], Mapping[str, CapabilityProfile]]


def no_profiles(ids: Sequence[str]) -> Mapping[str, CapabilityProfile]:
    return {}


def embed_profiles(
    embedder: Embedder, profiles: Sequence[CapabilityProfile]
) -> list[ProfileVectors]:
    """Embed many profiles in one embedder call.

    The "examples" facet is the examples joined, and a facet vector is a
    sum of token vectors over content words (which the tokenizer splits
    word by word), so its sum is the sum of the examples' own sums: each
    example text is tokenized once, not twice."""
    nf = len(FACETS)
    ex_f = FACET_INDEX["examples"]
    texts: list[str] = []
    for p in profiles:
        texts.extend(content_text(p.facets.get(f, "")) if f != "examples" else "" for f in FACETS)
    n_facet_texts = len(texts)
    texts.extend(content_text(ex.text) for p in profiles for ex in p.examples)
    sums, counts = embedder.embed_sums(texts)
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
            one = embedder.embed_sums([content_text(p.facets["examples"])])
            f_sums[ex_f], f_counts[ex_f] = one[0][0], one[1][0]
        out.append(ProfileVectors(f_sums, f_counts, ex_vecs[at : at + k]))
        at += k
    return out
