"""HAIDIP agent cards (draft-cui section 3) and A2A agent cards, as pure
functions: validation and a card -> capability document (what ANS indexes).

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

The other direction (an indexed agent -> HAIDIP card) is
:mod:`.haidip_card_view`.
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


def dedup(values: list[str], bound: int) -> list[str]:
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
    if provider is not None and provider_name(provider) is None:
        raise _bad("provider must be a name or an object with name/organization")
    last = card.get("last_update")
    if last is not None and not (isinstance(last, str) and _TIME_RE.fullmatch(last)):
        raise _bad("last_update must be an RFC 3339 timestamp")


def provider_name(provider: Any) -> str | None:
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
    provider = provider_name(card.get("provider"))
    if provider is not None:
        tags.append(provider_tag(provider))
    tags.extend(auth_tag(auth_type_of(a)) for a in _auth_values(card, fmt))
    return tags


def _bindings(endpoint: str, protocols: list[str]) -> list[dict[str, Any]]:
    scheme = urlsplit(endpoint).scheme.lower() if ":" in endpoint else ""
    names = dedup([p.lower() for p in protocols] or [scheme or "https"], MAX_PROTOCOLS)
    return [
        {"protocol": p, "endpoint": endpoint, "media_types": ["application/json"]} for p in names
    ]


def _haidip_capabilities(card: Mapping[str, Any]) -> dict[str, Any]:
    _check_haidip(card)
    languages = _strings(card, "supported_languages", MAX_LANGUAGES, 35)
    plain = [*_strings(card, "capabilities", MAX_LIST, 64), *_strings(card, "tags", MAX_LIST, 64)]
    facets = _facet_tags(card, HAIDIP, languages)
    tags = dedup([normalize_tag(t) for t in plain], MAX_TAGS - len(facets)) + dedup(facets, 16)
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
        "tags": dedup(tags, MAX_TAGS),
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
    if provider is not None and provider_name(provider) is None:
        raise _bad("provider must be an object with organization")
    return skills


def _a2a_capabilities(card: Mapping[str, Any]) -> dict[str, Any]:
    skills = _check_a2a(card)
    plain: list[str] = []
    for s in skills:
        plain.extend(s.get("tags") or [])
        plain.append(s["id"])
    facets = _facet_tags(card, A2A, [])
    tags = dedup([normalize_tag(t) for t in plain], MAX_TAGS - len(facets)) + dedup(facets, 16)
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
    modes = dedup(
        [*(card.get("defaultInputModes") or []), *(card.get("defaultOutputModes") or [])], 64
    )
    caps: dict[str, Any] = {
        "id": card["url"],
        "name": card["name"],
        "description": card["description"],
        "tags": dedup(tags, MAX_TAGS),
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
