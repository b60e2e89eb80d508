"""HAIDIP agent cards (draft-cui section 3) and A2A agent cards, as pure
functions: validation, a card -> capability document (what ANS indexes), and
an indexed agent (manifest + capability document) -> HAIDIP card.

Ingestion (:func:`capabilities_from_card`): a HAIDIP card (``id``, ``name``,
``description``, ``capabilities``, ``operations``, ``inputs``/``outputs``,
``endpoint``, ``authentication`` and the optional fields) or an A2A card (the
``/.well-known/agent-card.json`` shape: ``name``, ``description``, ``url``,
``skills``, ``securitySchemes``, ...) becomes a capability document whose
profile fields (``id``, ``name``, ``description``, ``tags``, ``tools``,
``examples``, ``bindings``, ``auth``, ``version``, ``modalities``) are what
the index matches and filters on, and which keeps the card verbatim under
:data:`CARD_FIELD` (``{"format": "haidip"|"a2a", "card": {...}}``), so the
card comes back as sent.

The HAIDIP filters that have no column of their own in the core (language,
provider, authentication type) are carried as *facet tags* with a fixed
prefix (:func:`language_tag`, :func:`provider_tag`, :func:`auth_tag`), so the
core's tag filter (the registry's hard-gate mask) applies them: one index,
one filter path for every surface.

Rendering (:func:`card_of`): a card kept at ingestion comes back verbatim
(an A2A card translated to HAIDIP fields); any other agent's card is built
from its manifest and capability document. Either way the card carries
``ans``: what this ANS vouches for (canonical id, trust tier, governed, zone,
behavioral score) — ``certification`` stays the provider's own claim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from .errors import InvalidCapabilities
from .jcs import canonicalize
from .profile_params import normalize_tag

# The capability document field holding an ingested card.
CARD_FIELD = "agent_card"
HAIDIP, A2A = "haidip", "a2a"
MAX_CARD_BYTES = 64 * 1024  # a card's RFC 8785 bytes
MAX_LIST = 64  # capabilities, tags, operations, skills, examples
MAX_LANGUAGES = 32
MAX_PROTOCOLS = 16
MAX_TAG_CHARS = 64
MAX_EXAMPLE_CHARS = 2000
MAX_TAGS = 64  # the capability document's tag list bound
AUTH_TYPES = ("none", "api-key", "oauth2", "mtls", "basic", "other")

_ID_RE = re.compile(r"[\x21-\x7e]{1,512}")
_URI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}:[\x21-\x7e]{1,2040}")
_LANG_RE = re.compile(r"[A-Za-z]{2,8}(?:-[A-Za-z0-9]{1,8}){0,4}")
_PROTOCOL_RE = re.compile(r"[a-z][a-z0-9+.-]{0,31}")
_TIME_RE = re.compile(
    r"\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:\d{2})?)?"
)
_ID_SAFE = re.compile(r"[^A-Za-z0-9._:-]+")


def language_tag(lang: str) -> str:
    return normalize_tag("lang " + lang)


def provider_tag(provider: str) -> str:
    return normalize_tag("provider " + provider)[:MAX_TAG_CHARS]


def auth_tag(auth_type: str) -> str:
    return "auth-" + auth_type


def auth_type_of(value: Any) -> str:
    """One of :data:`AUTH_TYPES` for a HAIDIP ``authentication`` value (a
    string such as ``"API Key"`` or an object with ``type``) or an A2A
    security scheme object (``apiKey``, ``http``/bearer, ``oauth2``,
    ``openIdConnect``, ``mutualTLS``)."""
    if isinstance(value, Mapping):
        kind = value.get("type")
        if isinstance(kind, str) and kind.lower() == "http":
            scheme = str(value.get("scheme", "")).lower()
            return "basic" if scheme == "basic" else "oauth2"
        value = kind
    if value is None:
        return "none"
    if not isinstance(value, str):
        return "other"
    squashed = re.sub(r"[^a-z0-9]", "", value.lower())
    if squashed in ("", "none", "anonymous", "public"):
        return "none"
    if squashed in ("apikey", "apikeys", "key"):
        return "api-key"
    if squashed in ("oauth", "oauth2", "oauth20", "bearer", "openidconnect", "oidc", "jwt"):
        return "oauth2"
    if squashed in ("mtls", "mutualtls", "clientcertificate", "tls"):
        return "mtls"
    if squashed in ("basic", "httpbasic"):
        return "basic"
    return "other"


def _bad(what: str) -> InvalidCapabilities:
    return InvalidCapabilities(f"agent card: {what}")


def _text(card: Mapping[str, Any], name: str, max_len: int, *, required: bool) -> str | None:
    v = card.get(name)
    if v is None and not required:
        return None
    if not isinstance(v, str) or not v.strip() or len(v) > max_len:
        raise _bad(f"{name} must be a non-empty string of at most {max_len} characters")
    return v


def _strings(card: Mapping[str, Any], name: str, max_items: int, max_len: int) -> list[str]:
    v = card.get(name)
    if v is None:
        return []
    if not isinstance(v, list) or len(v) > max_items:
        raise _bad(f"{name} must be a list of at most {max_items} strings")
    for s in v:
        if not isinstance(s, str) or not s.strip() or len(s) > max_len:
            raise _bad(f"{name} entries must be non-empty strings of at most {max_len} characters")
    return list(v)


def _endpoint(card: Mapping[str, Any], name: str) -> str:
    v = card.get(name)
    if not isinstance(v, str) or _URI_RE.fullmatch(v) is None:
        raise _bad(f"{name} must be a URI (scheme:...) of at most 2048 printable characters")
    return v


def card_format(card: Any) -> str:
    """``"haidip"`` or ``"a2a"`` for a card object (422 otherwise). A card
    with an ``id`` is a HAIDIP card; one with ``url`` and A2A fields
    (``skills``, ``protocolVersion``, ``defaultInputModes``) an A2A card."""
    if not isinstance(card, Mapping):
        raise _bad("must be a JSON object")
    try:
        size = len(canonicalize(card))
    except (TypeError, ValueError):
        raise _bad("cannot be canonicalized (RFC 8785)") from None
    if size > MAX_CARD_BYTES:
        raise _bad(f"is {size} bytes as JSON; at most {MAX_CARD_BYTES}")
    if "id" in card:
        return HAIDIP
    if "url" in card and any(k in card for k in ("skills", "protocolVersion", "defaultInputModes")):
        return A2A
    raise _bad(
        "is neither a HAIDIP card (id, name, description, endpoint, ...) nor an "
        "A2A card (name, description, url, skills, ...)"
    )


def _dedup(values: list[str], bound: int) -> list[str]:
    out: list[str] = []
    for v in values:
        if v and v not in out and len(v) <= MAX_TAG_CHARS:
            out.append(v)
    return out[:bound]


# -- HAIDIP card -> capability document ---------------------------------------------------
def _check_haidip(card: Mapping[str, Any]) -> None:
    cid = card.get("id")
    if not isinstance(cid, str) or _ID_RE.fullmatch(cid) is None:
        raise _bad("id must be 1-512 printable ASCII characters without spaces")
    _text(card, "name", 256, required=True)
    _text(card, "description", 4000, required=True)
    _endpoint(card, "endpoint")
    _strings(card, "capabilities", MAX_LIST, MAX_TAG_CHARS)
    _strings(card, "tags", MAX_LIST, MAX_TAG_CHARS)
    for lang in _strings(card, "supported_languages", MAX_LANGUAGES, 35):
        if _LANG_RE.fullmatch(lang) is None:
            raise _bad(f"supported_languages entry {lang[:40]!r} is not a language tag")
    for p in _strings(card, "protocols", MAX_PROTOCOLS, 32):
        if _PROTOCOL_RE.fullmatch(p.lower()) is None:
            raise _bad(f"protocols entry {p[:40]!r} is not a protocol name")
    ops = card.get("operations")
    if ops is not None:
        if not isinstance(ops, list) or len(ops) > MAX_LIST:
            raise _bad(f"operations must be a list of at most {MAX_LIST} objects")
        for i, op in enumerate(ops):
            if not isinstance(op, Mapping):
                raise _bad(f"operations[{i}] must be an object")
            _text(op, "name", 256, required=True)
            _text(op, "description", 2000, required=False)
    for name in ("inputs", "outputs"):
        if name in card and not isinstance(card[name], (Mapping, list)):
            raise _bad(f"{name} must be an object (field -> type) or a JSON Schema")
    auth = card.get("authentication")
    if auth is not None and not isinstance(auth, (str, Mapping, list)):
        raise _bad("authentication must be a string such as 'API Key' or an object")
    version = card.get("version")
    if version is not None and not (
        isinstance(version, (str, int, float)) and len(str(version)) <= 64
    ):
        raise _bad("version must be a string of at most 64 characters")
    provider = card.get("provider")
    if provider is not None and _provider_name(provider) is None:
        raise _bad("provider must be a name or an object with name/organization")
    last = card.get("last_update")
    if last is not None and not (isinstance(last, str) and _TIME_RE.fullmatch(last)):
        raise _bad("last_update must be an RFC 3339 timestamp")


def _provider_name(provider: Any) -> str | None:
    if isinstance(provider, Mapping):
        provider = provider.get("organization", provider.get("name"))
    if isinstance(provider, str) and 0 < len(provider.strip()) <= 256:
        return provider.strip()
    return None


def _auth_values(card: Mapping[str, Any], fmt: str) -> list[Any]:
    if fmt == A2A:
        schemes = card.get("securitySchemes")
        return list(schemes.values()) if isinstance(schemes, Mapping) and schemes else [None]
    auth = card.get("authentication")
    return list(auth) if isinstance(auth, list) else [auth]


def _facet_tags(card: Mapping[str, Any], fmt: str, languages: list[str]) -> list[str]:
    tags = [language_tag(lang) for lang in languages]
    provider = _provider_name(card.get("provider"))
    if provider is not None:
        tags.append(provider_tag(provider))
    tags.extend(auth_tag(auth_type_of(a)) for a in _auth_values(card, fmt))
    return tags


def _bindings(endpoint: str, protocols: list[str]) -> list[dict[str, Any]]:
    scheme = urlsplit(endpoint).scheme.lower() if ":" in endpoint else ""
    names = _dedup([p.lower() for p in protocols] or [scheme or "https"], MAX_PROTOCOLS)
    return [
        {"protocol": p, "endpoint": endpoint, "media_types": ["application/json"]} for p in names
    ]


def _haidip_capabilities(card: Mapping[str, Any]) -> dict[str, Any]:
    _check_haidip(card)
    languages = _strings(card, "supported_languages", MAX_LANGUAGES, 35)
    plain = [*_strings(card, "capabilities", MAX_LIST, 64), *_strings(card, "tags", MAX_LIST, 64)]
    facets = _facet_tags(card, HAIDIP, languages)
    tags = _dedup([normalize_tag(t) for t in plain], MAX_TAGS - len(facets)) + _dedup(facets, 16)
    ops = card.get("operations") or []
    tools = [
        {
            "name": str(op["name"])[:512],
            **({"description": op["description"]} if op.get("description") else {}),
        }
        for op in ops
    ]
    caps: dict[str, Any] = {
        "id": card["id"],
        "name": card["name"],
        "description": card["description"],
        "tags": _dedup(tags, MAX_TAGS),
        "bindings": _bindings(card["endpoint"], _strings(card, "protocols", MAX_PROTOCOLS, 32)),
        "auth": {"type": auth_type_of(_auth_values(card, HAIDIP)[0])},
    }
    if tools:
        caps["tools"] = tools
    if card.get("version") is not None:
        caps["version"] = str(card["version"])
    if languages:
        caps["supported_languages"] = languages
    if isinstance(card.get("last_update"), str) and "T" in card["last_update"].upper():
        caps["updated_at"] = card["last_update"]
    return caps


# -- A2A card -> capability document ------------------------------------------------------
def _check_a2a(card: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    _text(card, "name", 256, required=True)
    _text(card, "description", 4000, required=True)
    url = _endpoint(card, "url")
    if _ID_RE.fullmatch(url) is None:
        raise _bad("url must be at most 512 printable characters (it is the agent's id)")
    skills = card.get("skills", [])
    if not isinstance(skills, list) or len(skills) > MAX_LIST:
        raise _bad(f"skills must be a list of at most {MAX_LIST} objects")
    for i, s in enumerate(skills):
        if not isinstance(s, Mapping):
            raise _bad(f"skills[{i}] must be an object")
        _text(s, "id", 256, required=True)
        _text(s, "name", 256, required=True)
        _text(s, "description", 2000, required=False)
        _strings(s, "tags", MAX_LIST, MAX_TAG_CHARS)
        _strings(s, "examples", MAX_LIST, MAX_EXAMPLE_CHARS)
        _strings(s, "inputModes", 16, 128)
        _strings(s, "outputModes", 16, 128)
    _strings(card, "defaultInputModes", 16, 128)
    _strings(card, "defaultOutputModes", 16, 128)
    schemes = card.get("securitySchemes")
    if schemes is not None and not isinstance(schemes, Mapping):
        raise _bad("securitySchemes must be an object of named security schemes")
    version = card.get("version")
    if version is not None and not (isinstance(version, str) and len(version) <= 64):
        raise _bad("version must be a string of at most 64 characters")
    provider = card.get("provider")
    if provider is not None and _provider_name(provider) is None:
        raise _bad("provider must be an object with organization")
    return skills


def _a2a_capabilities(card: Mapping[str, Any]) -> dict[str, Any]:
    skills = _check_a2a(card)
    plain: list[str] = []
    for s in skills:
        plain.extend(s.get("tags") or [])
        plain.append(s["id"])
    facets = _facet_tags(card, A2A, [])
    tags = _dedup([normalize_tag(t) for t in plain], MAX_TAGS - len(facets)) + _dedup(facets, 16)
    examples: list[dict[str, str]] = []
    for s in skills:
        for text in s.get("examples") or []:
            if len(examples) < MAX_LIST:
                examples.append({"id": f"ex-{len(examples) + 1}", "text": text})
    tools = [
        {
            "name": str(s["id"]),
            **({"description": s["description"]} if s.get("description") else {}),
        }
        for s in skills
    ]
    modes = _dedup(
        [*(card.get("defaultInputModes") or []), *(card.get("defaultOutputModes") or [])], 64
    )
    caps: dict[str, Any] = {
        "id": card["url"],
        "name": card["name"],
        "description": card["description"],
        "tags": _dedup(tags, MAX_TAGS),
        "bindings": _bindings(card["url"], ["a2a"]),
        "auth": {"type": auth_type_of(_auth_values(card, A2A)[0])},
    }
    if tools:
        caps["tools"] = tools
    if examples:
        caps["examples"] = examples
    if modes:
        caps["modalities"] = modes
    if isinstance(card.get("version"), str):
        caps["version"] = card["version"]
    return caps


def capabilities_from_card(card: Any) -> dict[str, Any]:
    """A HAIDIP or A2A card as a capability document (422
    ``invalid_capabilities`` naming the field when malformed). The card
    itself is kept under :data:`CARD_FIELD`."""
    fmt = card_format(card)
    caps = _haidip_capabilities(card) if fmt == HAIDIP else _a2a_capabilities(card)
    caps[CARD_FIELD] = {"format": fmt, "card": dict(card)}
    return caps


def with_card(caps: Mapping[str, Any], card: Any) -> dict[str, Any]:
    """A capability document sent with a card (ACTIVATE's ``agent_card``):
    the card's capability fields, then the document's own (which win, as
    ``metadata`` does in ACTIVATE)."""
    return {**capabilities_from_card(card), **caps}


# -- indexed agent -> HAIDIP card ---------------------------------------------------------
def a2a_to_haidip(card: Mapping[str, Any]) -> dict[str, Any]:
    """An A2A card's fields as a HAIDIP card (the A2A card is the source)."""
    skills = [s for s in card.get("skills") or [] if isinstance(s, Mapping)]
    tags: list[str] = []
    for s in skills:
        tags.extend(t for t in s.get("tags") or [] if isinstance(t, str))
    default_in = list(card.get("defaultInputModes") or [])
    default_out = list(card.get("defaultOutputModes") or [])
    ops = []
    for s in skills:
        op: dict[str, Any] = {"name": s["id"], "title": s.get("name", s["id"])}
        if s.get("description"):
            op["description"] = s["description"]
        op["inputs"] = {"modes": list(s.get("inputModes") or default_in)}
        op["outputs"] = {"modes": list(s.get("outputModes") or default_out)}
        if s.get("examples"):
            op["examples"] = list(s["examples"])
        ops.append(op)
    schemes = card.get("securitySchemes")
    auth = (
        [auth_type_of(v) for v in schemes.values()]
        if isinstance(schemes, Mapping) and schemes
        else ["none"]
    )
    out: dict[str, Any] = {
        "id": card["url"],
        "name": card["name"],
        "description": card["description"],
        "capabilities": _dedup(tags or [str(s["id"]) for s in skills], MAX_LIST),
        "operations": ops,
        "inputs": {"modes": default_in},
        "outputs": {"modes": default_out},
        "endpoint": card["url"],
        "authentication": auth[0] if len(auth) == 1 else auth,
        "tags": _dedup(tags, MAX_LIST),
        "protocols": ["a2a"],
    }
    if card.get("version") is not None:
        out["version"] = card["version"]
    provider = _provider_name(card.get("provider"))
    if provider is not None:
        out["provider"] = provider
    return out


def _built_card(manifest: Mapping[str, Any], caps: Mapping[str, Any]) -> dict[str, Any]:
    """The card of an agent registered without one: from its manifest and
    capability document (profile fields first, then the manifest's)."""
    raw_tags = caps.get("tags")
    tags = [t for t in raw_tags if isinstance(t, str)] if isinstance(raw_tags, list) else []
    plain = [t for t in tags if not t.startswith(("lang-", "provider-", "auth-"))]
    tools = caps.get("tools")
    if isinstance(tools, list) and tools:
        ops = [
            {"name": t["name"], **({"description": t["description"]} if "description" in t else {})}
            if isinstance(t, Mapping)
            else {"name": str(t)}
            for t in tools
        ]
    else:
        methods = caps.get("supported_methods") or manifest.get("supported_methods") or []
        ops = [{"name": str(m)} for m in methods if isinstance(m, str)]
    bindings = [b for b in caps.get("bindings") or [] if isinstance(b, Mapping)]
    uri = manifest.get("manifest_uri")
    endpoint = bindings[0].get("endpoint") if bindings else uri
    protocols = _dedup([str(b.get("protocol", "")) for b in bindings] or ["agtp"], MAX_PROTOCOLS)
    media = caps.get("modalities")
    modes = [m for m in media if isinstance(m, str)] if isinstance(media, list) else []
    auth = caps.get("auth")
    card: dict[str, Any] = {
        "id": caps["id"] if isinstance(caps.get("id"), str) else manifest["canonical_id"],
        "name": caps.get("name", manifest.get("agent_label", "")),
        "description": caps.get("description", manifest.get("job_description", "")),
        "capabilities": plain,
        "operations": ops,
        "inputs": {"modes": modes or ["application/json"]},
        "outputs": {"modes": modes or ["application/json"]},
        "endpoint": endpoint,
        "authentication": auth.get("type", "none") if isinstance(auth, Mapping) else "none",
        "tags": plain,
        "protocols": protocols,
    }
    langs = caps.get("supported_languages")
    if isinstance(langs, list):
        card["supported_languages"] = [x for x in langs if isinstance(x, str)]
    version = caps.get("version", manifest.get("version"))
    if version is not None:
        card["version"] = version
    if manifest.get("principal_org"):
        card["provider"] = manifest["principal_org"]
    if isinstance(caps.get("license"), str):
        card["license"] = caps["license"]
    return card


def card_of(
    manifest: Mapping[str, Any], caps: Mapping[str, Any], *, last_update: str | None = None
) -> dict[str, Any]:
    """The HAIDIP card of an indexed agent: the card it was registered with
    (verbatim; an A2A card as HAIDIP fields), else one built from its
    manifest and capability document; plus ``last_update`` when the card
    has none, and ``ans`` (what this ANS vouches for)."""
    kept = caps.get(CARD_FIELD)
    fmt = kept.get("format") if isinstance(kept, Mapping) else None
    source = kept.get("card") if isinstance(kept, Mapping) else None
    if fmt == HAIDIP and isinstance(source, Mapping):
        card = dict(source)
    elif fmt == A2A and isinstance(source, Mapping):
        card = a2a_to_haidip(source)
    else:
        card = _built_card(manifest, caps)
        fmt = None
    if last_update is not None and "last_update" not in card:
        card["last_update"] = last_update
    card["ans"] = trust_fields(manifest, fmt)
    return card


def trust_fields(manifest: Mapping[str, Any], fmt: str | None = None) -> dict[str, Any]:
    """What the ANS vouches for about an agent (never the card's claims)."""
    out = {
        "canonical_id": manifest.get("canonical_id"),
        "trust_tier": manifest.get("trust_tier"),
        "behavioral_trust_score": manifest.get("behavioral_trust_score"),
        "governed": not isinstance(manifest.get("self_asserted"), Mapping),
        "governance_zone": manifest.get("governance_zone"),
        "org_domain": manifest.get("org_domain"),
    }
    if fmt is not None:
        out["card_format"] = fmt
    return out


def public_id(caps: Mapping[str, Any], canonical_id: str) -> str:
    """The id a HAIDIP client names the agent by: the declared id, else the
    canonical id."""
    declared = caps.get("id")
    return declared if isinstance(declared, str) else canonical_id


def slug(text: str) -> str:
    """A card id from free text (``ans import-cards`` names cards that lack one)."""
    return _ID_SAFE.sub("-", text.strip()).strip("-")[:200] or "agent"
