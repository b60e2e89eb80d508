"""Synthetic catalogs for load tests: signed Agent Manifest Documents with
capability documents, DISCOVER queries, and the governance key that signs them.

``python -m tools.synth --agents N --seed S --out DIR [--workers W] [--queries Q]``
writes into DIR:

- ``governance.key.json`` (private JWK, 0600), ``governance.key.pem`` (the same
  key as PEM, for ``ans governance ...``) and ``governance.jwks.json`` (public
  JWKS for ``ans serve --governance-jwks``). Existing key files are reused.
- ``agents.jsonl``: one ACTIVATE ``parameters`` object per line,
  ``{"manifest": <signed manifest>, "capabilities": <capability document>}``.
- ``queries.jsonl``: DISCOVER ``parameters`` objects; ``queries.meta.jsonl``
  says, line for line, how each was generated (kind, domains, zone).
- ``catalog.json``: n, seed, generator version, key id, counts by tier, zone and
  domain, and the SHA-256 of ``agents.jsonl`` and ``queries.jsonl``.

Everything is deterministic for a seed: agent *i* is generated from its own
RNG seeded from (seed, i), so a chunk, a worker count or a ``start`` offset
never changes its content. Signatures use RFC 6979 deterministic ECDSA, so with
the same key the files are byte-identical too (ECDSA verification does not care
how the nonce was chosen).

Text comes from the vocabularies in :mod:`tools.synth_vocab` (fifty capability
domains); DISCOVER intents paraphrase them with other verbs, other templates
and word-level synonyms instead of copying agent text.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import orjson
from ans.governance.keys import KeyFileError, SigningKey, b64url, b64url_decode, public_jwk
from ans.governance.signing import sign_document
from cryptography.hazmat.primitives.asymmetric import ec

from tools.synth_vocab import (
    COMPOUND_QUERY_TEMPLATES,
    DOMAINS,
    LABEL_SUFFIXES,
    LEAD_SENTENCES,
    ORG_FORMS,
    ORG_PREFIXES,
    ORG_TLDS,
    QUERY_TEMPLATES,
    SECOND_DOMAIN_SENTENCES,
    SECTOR_WORDS,
    SLOTS,
    SYNONYMS,
    TOOL_SENTENCES,
    ZONES,
    Domain,
)

# The catalog format's name, written into catalog.json: kept from
# when the generator lived in ans/, so that catalogs stay byte-identical.
GENERATOR = "ans.synth"
GENERATOR_VERSION = "1"
KEY_FILE = "governance.key.json"
PEM_FILE = "governance.key.pem"
JWKS_FILE = "governance.jwks.json"
AGENTS_FILE = "agents.jsonl"
QUERIES_FILE = "queries.jsonl"
QUERIES_META_FILE = "queries.meta.jsonl"
CATALOG_FILE = "catalog.json"

N_ORGS = 2000
ORG_POOL_SEED = "ans-synth-orgs-v1"  # the org pool is vocabulary: the same for every seed
TIER_WEIGHTS = ((1, 0.2), (2, 0.5), (3, 0.3))
SECOND_DOMAIN_SHARE = 0.25
CHUNK = 1000
DEFAULT_QUERIES = 500
BASE_TIME = datetime(2025, 1, 6, 8, 0, 0, tzinfo=UTC)
# Query mix (issue 5): kind -> share of the queries.
QUERY_MIX = (
    ("intent", 0.50),
    ("trust", 0.20),
    ("zone", 0.15),
    ("domains", 0.10),
    ("filters", 0.05),
)
CAPABILITY_DOMAIN_SETS = (
    ["tools", "examples"],
    ["examples"],
    ["tags"],
    ["tags", "examples"],
    ["tools"],
    ["modalities", "tools"],
)
REF_PREFIXES = ("INV", "PO", "CASE", "REQ", "TKT", "MAT", "APP", "ENT", "CLM", "PR", "SR")


# -- keys --------------------------------------------------------------------------------


# mypy sees ans.governance as an unresolved (Any) import (see pyproject package-dir).
class DeterministicSigningKey(SigningKey):  # type: ignore[misc]
    """A SigningKey whose ES256 signatures use RFC 6979 nonces: same bytes in,
    same signature out, so a catalog is reproducible byte for byte."""

    deterministic = True

    def private_jwk(self) -> dict[str, str]:
        d = self._private.private_numbers().private_value
        return {
            **public_jwk(self._private.public_key()),
            "d": b64url(d.to_bytes(32, "big")),
            "kid": self.kid,
            "alg": "ES256",
            "use": "sig",
        }


def key_from_private_jwk(jwk: Mapping[str, Any]) -> DeterministicSigningKey:
    """The signing key of a private EC P-256 JWK (as written by :func:`load_or_create_key`)."""
    if jwk.get("kty") != "EC" or jwk.get("crv") != "P-256" or not isinstance(jwk.get("d"), str):
        raise KeyFileError("governance.key.json must be a private EC P-256 JWK")
    try:
        d = int.from_bytes(b64url_decode(jwk["d"]), "big")
        private = ec.derive_private_key(d, ec.SECP256R1())
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"invalid private JWK: {exc}") from None
    key = DeterministicSigningKey(private)
    if {k: jwk.get(k) for k in ("x", "y")} != {
        k: v for k, v in public_jwk(private.public_key()).items() if k in ("x", "y")
    }:
        raise KeyFileError("private JWK: x/y do not belong to d")
    return key


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def load_or_create_key(directory: Path) -> DeterministicSigningKey:
    """Reuse ``DIR/governance.key.json`` or create it (with the PEM and the public JWKS)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key_path = directory / KEY_FILE
    if key_path.exists():
        try:
            key = key_from_private_jwk(orjson.loads(key_path.read_bytes()))
        except orjson.JSONDecodeError as exc:
            raise KeyFileError(f"{key_path} is not JSON: {exc}") from None
    else:
        key = DeterministicSigningKey.generate()
        _write_private(key_path, orjson.dumps(key.private_jwk(), option=orjson.OPT_INDENT_2))
    if not (directory / PEM_FILE).exists():
        _write_private(directory / PEM_FILE, key.private_pem())
    jwks = orjson.dumps({"keys": [key.public.jwk()]}, option=orjson.OPT_INDENT_2) + b"\n"
    jwks_path = directory / JWKS_FILE
    if not jwks_path.exists() or jwks_path.read_bytes() != jwks:
        jwks_path.write_bytes(jwks)
    return key


def sign_agent(manifest: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """The manifest with ``signature`` = ES256 detached JWS over its JCS (as ACTIVATE expects)."""
    signed: dict[str, Any] = sign_document(manifest, key, "signature")
    return signed


# -- vocabulary-derived pools ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Org:
    domain: str
    name: str
    group: str
    focus: tuple[int, ...]  # indices into DOMAINS this org mostly works in


@lru_cache(maxsize=1)
def org_pool() -> tuple[Org, ...]:
    """~2000 organisations, the same for every seed (part of the vocabulary)."""
    rng = random.Random(ORG_POOL_SEED)
    by_group: dict[str, list[int]] = {}
    for i, d in enumerate(DOMAINS):
        by_group.setdefault(d.group, []).append(i)
    groups = sorted(by_group)
    weights = [len(by_group[g]) for g in groups]
    seen: set[str] = set()
    orgs: list[Org] = []
    while len(orgs) < N_ORGS:
        group = rng.choices(groups, weights)[0]
        prefix = rng.choice(ORG_PREFIXES)
        sector = rng.choice(SECTOR_WORDS[group])
        name = f"{prefix}-{sector}"
        if name in seen:
            name = f"{prefix}-{sector}{rng.randrange(2, 99)}"
            if name in seen:
                continue
        seen.add(name)
        own = by_group[group]
        focus = [*rng.sample(own, min(2, len(own))), rng.randrange(len(DOMAINS))]
        legal = f"{prefix.title()} {sector.title()} {rng.choice(ORG_FORMS)}"
        orgs.append(Org(f"{name}.{rng.choice(ORG_TLDS)}", legal, group, tuple(focus)))
    return tuple(orgs)


@lru_cache(maxsize=1)
def _domains_by_group() -> dict[str, tuple[int, ...]]:
    out: dict[str, list[int]] = {}
    for i, d in enumerate(DOMAINS):
        out.setdefault(d.group, []).append(i)
    return {g: tuple(v) for g, v in out.items()}


# -- template filling --------------------------------------------------------------------

_SLOT_RE = re.compile(r"\{(\w+)\}")
_ATTR = {
    "object": "objects",
    "focus": "focus",
    "artefact": "artefacts",
    "tool": "tools",
    "verb": "verbs",
    "verbs": "verbs",
    "qverb": "qverbs",
}


def third_person(phrase: str) -> str:
    """'audit' -> 'audits', 'match' -> 'matches', 'classify x' -> 'classifies x'."""
    head, sep, rest = phrase.partition(" ")
    if head.endswith(("s", "x", "z", "ch", "sh")):
        head += "es"
    elif head.endswith("y") and head[-2:-1] not in ("a", "e", "i", "o", "u"):
        head = head[:-1] + "ies"
    else:
        head += "s"
    return head + sep + rest


_A_BEFORE_VOWEL = re.compile(r"\b([Aa]) (?=[aeiouAEIOU])")
_THE_THE = re.compile(r"\b([Tt]he) the ")
_AN_BEFORE_CONSONANT = re.compile(r"\b([Aa])n (?=[b-df-hj-np-tv-zB-DF-HJ-NP-TV-Z])")


def fix_articles(text: str) -> str:
    """'a urgency worklist' -> 'an urgency worklist', 'an draft' -> 'a draft',
    'in the the Nordics' -> 'in the Nordics'."""
    text = _AN_BEFORE_CONSONANT.sub(r"\1 ", _A_BEFORE_VOWEL.sub(r"\1n ", text))
    return _THE_THE.sub(r"\1 ", text)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


class Filler:
    """Fills ``{slot}`` templates for one domain (and optionally a second, ``*_b``)."""

    def __init__(self, rng: random.Random, domain: Domain, other: Domain | None = None) -> None:
        self.rng = rng
        self.domain = domain
        self.other = other
        # values already used, per pool: kept across fill() calls so the sentences of
        # one job description (or the examples of one agent) do not repeat themselves
        self.used: dict[str, set[str]] = {}

    def _dynamic(self, base: str) -> str | None:
        rng = self.rng
        if base == "n":
            return str(rng.choice((3, 5, 8, 12, 20, 25, 40, 50, 120, 200, 500)))
        if base == "ref":
            return f"{rng.choice(REF_PREFIXES)}-{rng.randrange(1000, 99999)}"
        if base == "hash":
            return f"{rng.getrandbits(28):07x}"
        if base == "date":
            return f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
        if base == "company":
            return rng.choice(ORG_PREFIXES).title()
        return None

    def fill(self, template: str) -> str:
        used = self.used
        rng = self.rng
        # "{Verbs} and {verbs2} {object}" reads well only with one-word verbs.
        single_verbs = "{verbs2}" in template

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            capital = name[0].isupper()
            key = name.lower()
            domain = self.domain
            if key.endswith("_b"):
                key = key[:-2]
                domain = self.other or self.domain
            base = key.rstrip("0123456789")
            value = self._dynamic(base)
            if value is None:
                if base == "name":
                    pool: Sequence[str] = (domain.name,)
                elif base in _ATTR:
                    pool = getattr(domain, _ATTR[base])
                    if single_verbs and base in ("verb", "verbs"):
                        pool = [v for v in pool if " " not in v] or pool
                else:
                    pool = SLOTS.get(base, (base,))
                seen = used.setdefault(_ATTR.get(base, base) + domain.key, set())
                value = rng.choice(pool)
                for _ in range(6):
                    if value not in seen:
                        break
                    value = rng.choice(pool)
                seen.add(value)
                if base == "verbs":
                    value = third_person(value)
            return _cap(value) if capital else value

        return fix_articles(_SLOT_RE.sub(sub, template))


# -- agents ------------------------------------------------------------------------------


def _rng(seed: int, kind: str, i: int) -> random.Random:
    return random.Random(f"ans-synth:{kind}:{seed}:{i}")


def _score(rng: random.Random, tier: int) -> float:
    a, b = {1: (6.0, 1.5), 2: (5.0, 1.8), 3: (3.0, 2.0)}[tier]
    return min(0.999, max(0.5, round(0.5 + 0.5 * rng.betavariate(a, b), 3)))


def _sample(rng: random.Random, pool: Sequence[str], lo: int, hi: int) -> list[str]:
    k = min(len(pool), rng.randint(lo, hi))
    return rng.sample(list(pool), k)


def _job_description(rng: random.Random, primary: Domain, second: Domain | None) -> str:
    f = Filler(rng, primary)
    lead = rng.choice(LEAD_SENTENCES)
    if "{verbs2}" in lead and sum(" " not in v for v in primary.verbs) < 2:
        lead = LEAD_SENTENCES[0]
    parts = [_cap(f.fill(lead))]
    if rng.random() < 0.7:
        parts.append(_cap(f.fill(rng.choice(TOOL_SENTENCES))))
    if second is not None:
        parts.append(_cap(Filler(rng, second).fill(rng.choice(SECOND_DOMAIN_SENTENCES))))
    return " ".join(parts)


def _timestamp(t: datetime) -> str:
    """RFC 3339 UTC with a Z (isoformat: several times faster than strftime)."""
    return t.replace(tzinfo=None).isoformat(timespec="seconds") + "Z"


def make_agent(
    seed: int, index: int
) -> tuple[dict[str, Any], dict[str, Any], tuple[int, str, str, str | None, str]]:
    """Agent ``index`` of catalog ``seed``: (unsigned manifest, capabilities,
    (tier, zone, primary domain, second domain or None, org domain))."""
    rng = _rng(seed, "agent", index)
    orgs = org_pool()
    org = orgs[rng.randrange(len(orgs))]
    if rng.random() < 0.65:
        primary_i = rng.choice(org.focus)
    else:
        primary_i = rng.randrange(len(DOMAINS))
    primary = DOMAINS[primary_i]
    second: Domain | None = None
    if rng.random() < SECOND_DOMAIN_SHARE:
        kin = [i for i in _domains_by_group()[primary.group] if i != primary_i]
        if kin and rng.random() < 0.6:
            second = DOMAINS[rng.choice(kin)]
        else:
            j = rng.randrange(len(DOMAINS) - 1)
            second = DOMAINS[j + (j >= primary_i)]

    tier = rng.choices((1, 2, 3), (0.2, 0.5, 0.3))[0]
    score = _score(rng, tier)
    r = rng.random()
    if r < 0.75:
        zone = primary.zones[0] if rng.random() < 0.5 else rng.choice(primary.zones)
    elif r < 0.85 and second is not None:
        zone = rng.choice(second.zones)
    else:
        zone = rng.choice(ZONES)

    words = rng.sample(primary.label_words, 2)
    label = f"{words[0]}-{words[1]}-{rng.choice(LABEL_SUFFIXES)}-{index:04d}".lower()
    uri = f"agtp://agtp.{org.domain}/agents/{label}"
    activated = BASE_TIME + timedelta(seconds=rng.randrange(0, 480 * 86400))
    updated = activated + timedelta(seconds=rng.randrange(0, 60 * 86400))
    version = f"{rng.randint(1, 4)}.{rng.randint(0, 12)}.{rng.randint(0, 30)}"

    methods = sorted(set(_sample(rng, primary.methods, 2, 4)) | {"DESCRIBE"})
    scopes = list(primary.scopes)
    if second is not None:
        scopes += [s for s in second.scopes if s not in scopes]

    manifest: dict[str, Any] = {
        "document_type": "agtp-manifest",
        "schema_version": "1.0",
        "manifest_uri": uri,
        "canonical_id": hashlib.sha256(uri.encode()).hexdigest(),
        "agent_label": label,
        "org_domain": org.domain,
        "governance_zone": zone,
        "trust_tier": tier,
        "package_format": "nomo" if tier == 1 else rng.choice(("agent", "nomo", "oci")),
        "package_integrity_hash": "sha256:"
        + hashlib.sha256(f"pkg:{uri}:{version}".encode()).hexdigest(),
        "lifecycle_state": "Active",
        "cert_status": "Active",
        "principal_org": org.name,
        "activated_at": _timestamp(activated),
        "behavioral_trust_score": score,
        "authority_scope_categories": scopes,
        "supported_methods": methods,
        "job_description": _job_description(rng, primary, second),
        "version": version,
        "last_updated": _timestamp(updated),
    }
    if tier == 2:
        manifest["trust_warning"] = "org-label-unverified"
        manifest["trust_tier_explanation"] = rng.choice(
            (
                "Org label not DNS-verified.",
                "Organisation asserted by the publisher; domain ownership not yet verified.",
                "Org-asserted listing pending governance review.",
            )
        )

    fp = Filler(rng, primary)
    ex_templates = rng.sample(primary.examples, 3 if second is None else 2)
    ex_texts = [_cap(fp.fill(t)) for t in ex_templates]
    if second is not None:
        ex_texts.append(_cap(Filler(rng, second).fill(rng.choice(second.examples))))
    tags = _sample(rng, primary.tags, 3, 5)
    tools: list[Any] = _sample(rng, primary.tools, 2, 4)
    modalities = _sample(rng, primary.modalities, 1, 3)
    if second is not None:
        tags += [t for t in _sample(rng, second.tags, 1, 2) if t not in tags]
        tools += [t for t in _sample(rng, second.tools, 1, 2) if t not in tools]
        modalities += [m for m in _sample(rng, second.modalities, 1, 2) if m not in modalities]
    if len(tags) < 8 and rng.random() < 0.3:
        tags.append(primary.group if primary.group not in tags else "automation")
    if rng.random() < 0.25:  # some publishers describe their tools
        tools = [{"name": t, "description": f"{t} integration for {primary.name}"} for t in tools]
    accepted = [zone] + [z for z in _sample(rng, primary.zones, 0, 2) if z != zone]
    if rng.random() < 0.2 and "zone:partner" not in accepted:
        accepted.append("zone:partner")
    caps: dict[str, Any] = {
        "supported_methods": methods,
        "modalities": modalities,
        "tools": tools,
        "zones_accepted": accepted,
        "version": version,
        "tags": tags[:8],
        "required_scope": " ".join(primary.scopes[: rng.randint(1, len(primary.scopes))]),
        "examples": [{"id": f"ex-{k + 1}", "text": t} for k, t in enumerate(ex_texts)],
    }
    if rng.random() < 0.3:
        caps["max_sessions"] = rng.choice((8, 16, 32, 64, 128, 256))
    meta = (tier, zone, primary.key, None if second is None else second.key, org.domain)
    return manifest, caps, meta


def generate(n: int, seed: int, start: int = 0) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Unsigned (manifest, capabilities) pairs for agents start .. start+n-1 of catalog ``seed``."""
    for i in range(start, start + n):
        manifest, caps, _ = make_agent(seed, i)
        yield manifest, caps


@dataclass
class ChunkStats:
    tiers: Counter[int]
    zones: Counter[str]
    domains: Counter[str]
    multi_domain: int
    orgs: set[str]


def _chunk(task: tuple[int, int, int, dict[str, str]]) -> tuple[bytes, ChunkStats]:
    """Generate and sign agents [start, start+count) of catalog ``seed`` as JSONL bytes."""
    seed, start, count, jwk = task
    key = key_from_private_jwk(jwk)
    stats = ChunkStats(Counter(), Counter(), Counter(), 0, set())
    lines: list[bytes] = []
    for i in range(start, start + count):
        manifest, caps, (tier, zone, primary, second, org) = make_agent(seed, i)
        params = {"manifest": sign_agent(manifest, key), "capabilities": caps}
        lines.append(orjson.dumps(params))
        stats.tiers[tier] += 1
        stats.zones[zone] += 1
        stats.domains[primary] += 1
        stats.multi_domain += second is not None
        stats.orgs.add(org)
    lines.append(b"")
    return b"\n".join(lines), stats


# -- queries -----------------------------------------------------------------------------


def _paraphrase(rng: random.Random, text: str) -> str:
    words = text.split(" ")
    for k, w in enumerate(words):
        alts = SYNONYMS.get(w)
        if alts and rng.random() < 0.5:
            words[k] = rng.choice(alts)
    return " ".join(words)


def _intent(rng: random.Random, domain: Domain, other: Domain | None) -> tuple[str, int]:
    if other is not None:
        t = rng.randrange(len(COMPOUND_QUERY_TEMPLATES))
        text = Filler(rng, domain, other).fill(COMPOUND_QUERY_TEMPLATES[t])
        t += len(QUERY_TEMPLATES)
    else:
        t = rng.randrange(len(QUERY_TEMPLATES))
        text = Filler(rng, domain).fill(QUERY_TEMPLATES[t])
    text = fix_articles(_paraphrase(rng, text))
    if rng.random() < 0.5:
        text = _cap(text)
    return text, t


def _kinds(n: int, seed: int) -> list[str]:
    counts = {kind: round(share * n) for kind, share in QUERY_MIX}
    counts["intent"] += n - sum(counts.values())
    kinds = [k for k, _ in QUERY_MIX for _ in range(counts[k])]
    random.Random(f"ans-synth:kinds:{seed}:{n}").shuffle(kinds)
    return kinds


def make_queries_with_meta(n: int, seed: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """n (DISCOVER parameters, metadata) pairs in the issue-5 mix of kinds."""
    out: list[tuple[dict[str, Any], dict[str, Any]]] = []
    orgs = org_pool()
    for j, kind in enumerate(_kinds(n, seed)):
        rng = _rng(seed, "query", j)
        di = rng.randrange(len(DOMAINS))
        domain = DOMAINS[di]
        other = None
        if kind != "filters" and rng.random() < 0.12:
            k = rng.randrange(len(DOMAINS) - 1)
            other = DOMAINS[k + (k >= di)]
        params: dict[str, Any] = {}
        template: int | None = None
        if kind != "filters":
            params["intent"], template = _intent(rng, domain, other)
        zone: str | None = None
        if kind == "trust":
            r = rng.random()
            if r < 0.7:
                params["trust_tier_min"] = rng.choices((1, 2, 3), (0.3, 0.4, 0.3))[0]
            if r >= 0.4:
                params["behavioral_trust_min"] = rng.choice((0.6, 0.7, 0.8, 0.85, 0.9, 0.95))
        elif kind == "zone":
            zone = rng.choice(domain.zones)
            if rng.random() < 0.3:
                params["trust_tier_min"] = rng.choice((2, 3))
        elif kind == "domains":
            params["capability_domains"] = list(rng.choice(CAPABILITY_DOMAIN_SETS))
        elif kind == "filters":
            if rng.random() < 0.25:
                params["org_domain"] = orgs[rng.randrange(len(orgs))].domain
            else:
                zone = rng.choice(domain.zones)
            params["trust_tier_min"] = rng.choice((1, 2, 3))
            if rng.random() < 0.5:
                params["behavioral_trust_min"] = rng.choice((0.7, 0.8, 0.9))
        if zone is not None:
            params["governance_zone"] = zone
        params["limit"] = rng.choices((10, 25, 50), (0.8, 0.12, 0.08))[0]
        meta = {
            "i": j,
            "kind": kind,
            "domains": [domain.key] + ([other.key] if other is not None else []),
            "zone": zone,
            "template": template,
        }
        out.append((params, meta))
    return out


def make_queries(n: int, seed: int) -> list[dict[str, Any]]:
    """n DISCOVER ``parameters`` objects (see :func:`make_queries_with_meta`)."""
    return [p for p, _ in make_queries_with_meta(n, seed)]


# -- a fresh agent for ACTIVATE-to-visibility --------------------------------------------

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_SYLLABLES = tuple(c + v for c in _CONSONANTS for v in _VOWELS)


def marker_word(index: int) -> str:
    """A pronounceable word no vocabulary contains, unique per non-negative index."""
    if index < 0:
        raise ValueError("marker index must be non-negative")
    out = []
    n = index
    for _ in range(4):
        n, r = divmod(n, len(_SYLLABLES))
        out.append(_SYLLABLES[r])
    while n:
        n, r = divmod(n, len(_SYLLABLES))
        out.append(_SYLLABLES[r])
    return "qx" + "".join(out)


def unique_agent(seed_or_index: int, key: SigningKey) -> tuple[dict[str, Any], str]:
    """A freshly signed agent (ACTIVATE parameters) carrying a unique marker word
    in its label, job description, tags and examples, and an intent that finds it.

    Tier 1 with a high behavioral score, so the intent ranks it first among any
    catalog. Different indices give different canonical ids."""
    index = seed_or_index
    marker = marker_word(index)
    rng = _rng(0, "probe", index)
    domain = DOMAINS[index % len(DOMAINS)]
    org = org_pool()[index % N_ORGS]
    obj = rng.choice(domain.objects)
    focus = rng.choice(domain.focus)
    verb = domain.verbs[0]
    label = f"{marker}-probe"
    uri = f"agtp://agtp.{org.domain}/agents/{label}"
    manifest: dict[str, Any] = {
        "document_type": "agtp-manifest",
        "schema_version": "1.0",
        "manifest_uri": uri,
        "canonical_id": hashlib.sha256(uri.encode()).hexdigest(),
        "agent_label": label,
        "org_domain": org.domain,
        "governance_zone": domain.zones[0],
        "trust_tier": 1,
        "package_format": "nomo",
        "package_integrity_hash": "sha256:" + hashlib.sha256(f"pkg:{uri}".encode()).hexdigest(),
        "lifecycle_state": "Active",
        "cert_status": "Active",
        "principal_org": org.name,
        "activated_at": _timestamp(BASE_TIME),
        "behavioral_trust_score": 0.995,
        "authority_scope_categories": list(domain.scopes),
        "supported_methods": sorted({*domain.methods[:3], "DESCRIBE"}),
        "job_description": f"The {marker} agent {third_person(verb)} {obj} for {focus}.",
        "version": "1.0.0",
        "last_updated": _timestamp(BASE_TIME),
    }
    caps: dict[str, Any] = {
        "supported_methods": manifest["supported_methods"],
        "modalities": list(domain.modalities[:1]),
        "tools": list(domain.tools[:2]),
        "zones_accepted": [domain.zones[0]],
        "tags": [marker, *domain.tags[:2]],
        "examples": [
            {"id": "ex-1", "text": f"{_cap(verb)} {obj} with {marker} for {focus}."},
            {"id": "ex-2", "text": f"Ask {marker} to {verb} {obj}."},
            {"id": "ex-3", "text": f"With {marker}: {focus} in {obj}."},
        ],
    }
    intent = f"{marker} {verb} {obj} for {focus}"
    return {"manifest": sign_agent(manifest, key), "capabilities": caps}, intent


# -- writing a catalog -------------------------------------------------------------------


def _tasks(
    n: int, seed: int, chunk: int, jwk: dict[str, str]
) -> Iterator[tuple[int, int, int, dict[str, str]]]:
    for start in range(0, n, chunk):
        yield seed, start, min(chunk, n - start), jwk


def _chunks(
    n: int, seed: int, jwk: dict[str, str], workers: int, chunk: int
) -> Iterator[tuple[bytes, ChunkStats]]:
    tasks = _tasks(n, seed, chunk, jwk)
    if workers <= 1:
        yield from map(_chunk, tasks)
        return
    # fork: workers inherit the imported vocabulary; imap keeps file order.
    with get_context("fork").Pool(workers) as pool:
        yield from pool.imap(_chunk, tasks)


def _write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> str:
    data = b"".join(orjson.dumps(r) + b"\n" for r in rows)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def write_catalog(
    out: Path,
    n: int,
    seed: int,
    *,
    workers: int | None = None,
    queries: int = DEFAULT_QUERIES,
    chunk: int = CHUNK,
    progress: Any = None,
) -> dict[str, Any]:
    """Write the whole catalog into ``out``; return the ``catalog.json`` document."""
    if n < 0 or queries < 0 or chunk < 1:
        raise ValueError("agents and queries must be >= 0 and chunk >= 1")
    out = Path(out)
    key = load_or_create_key(out)
    jwk = key.private_jwk()
    workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
    tiers: Counter[int] = Counter()
    zones: Counter[str] = Counter()
    domains: Counter[str] = Counter()
    orgs: set[str] = set()
    multi = 0
    digest = hashlib.sha256()
    size = done = 0
    t0 = time.perf_counter()
    last = 0.0
    tmp = out / (AGENTS_FILE + ".tmp")
    with tmp.open("wb") as f:
        for data, stats in _chunks(n, seed, jwk, workers, chunk):
            f.write(data)
            digest.update(data)
            size += len(data)
            tiers.update(stats.tiers)
            zones.update(stats.zones)
            domains.update(stats.domains)
            orgs |= stats.orgs
            multi += stats.multi_domain
            done += sum(stats.tiers.values())
            now = time.perf_counter()
            if progress is not None and (now - last >= 1.0 or done == n):
                last = now
                rate = done / max(now - t0, 1e-9)
                eta = (n - done) / rate if rate else 0.0
                progress(
                    f"synth: {done:,}/{n:,} agents  {rate:,.0f}/s  "
                    f"{size / 1e6:,.0f} MB  eta {eta:,.0f} s"
                )
    os.replace(tmp, out / AGENTS_FILE)
    elapsed = time.perf_counter() - t0

    qrows = make_queries_with_meta(queries, seed)
    q_sha = _write_jsonl(out / QUERIES_FILE, (p for p, _ in qrows))
    _write_jsonl(out / QUERIES_META_FILE, (m for _, m in qrows))
    catalog: dict[str, Any] = {
        "generator": GENERATOR,
        "generator_version": GENERATOR_VERSION,
        "n": n,
        "seed": seed,
        "governance_key_id": key.kid,
        "deterministic_signatures": True,
        "agents": {"file": AGENTS_FILE, "sha256": digest.hexdigest(), "bytes": size},
        "queries": {"file": QUERIES_FILE, "n": queries, "sha256": q_sha},
        "counts": {
            "trust_tier": {str(t): tiers[t] for t in sorted(tiers)},
            "governance_zone": dict(sorted(zones.items())),
            "domain": dict(sorted(domains.items())),
            "multi_domain": multi,
            "org_domains": len(orgs),
        },
        "vocabulary": {"domains": len(DOMAINS), "zones": len(ZONES), "orgs": N_ORGS},
    }
    (out / CATALOG_FILE).write_bytes(orjson.dumps(catalog, option=orjson.OPT_INDENT_2) + b"\n")
    if progress is not None:
        progress(
            f"synth: wrote {n:,} agents in {elapsed:.1f} s "
            f"({n / max(elapsed, 1e-9):,.0f} agents/s, {workers} workers) to {out}"
        )
    return catalog


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ans synth", description="Write a synthetic, signed agent catalog for load tests."
    )
    p.add_argument("--agents", type=int, required=True, help="number of agents (N)")
    p.add_argument("--seed", type=int, default=1, help="catalog seed (default 1)")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--workers", type=int, default=None, help="processes (default: CPU count)")
    p.add_argument(
        "--queries", type=int, default=DEFAULT_QUERIES, help="DISCOVER queries (default 500)"
    )
    p.add_argument("--chunk", type=int, default=CHUNK, help="agents per worker task")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.agents < 0 or args.queries < 0 or args.chunk < 1:
        print("ans synth: --agents/--queries must be >= 0, --chunk >= 1", file=sys.stderr)
        return 2
    if args.out.exists() and not args.out.is_dir():
        print(f"ans synth: {args.out} exists and is not a directory", file=sys.stderr)
        return 2

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        write_catalog(
            args.out,
            args.agents,
            args.seed,
            workers=args.workers,
            queries=args.queries,
            chunk=args.chunk,
            progress=None if args.quiet else progress,
        )
    except (KeyFileError, OSError) as exc:
        print(f"ans synth: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
