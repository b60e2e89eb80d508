"""HAIDIP requests (draft-cui section 4), parsed: the list query string
(``GET {base}/agents``) and the search body (``POST {base}/agents/search``)
into typed values, and both into the parameters of the one core DISCOVER
(:func:`discover_parameters`), so the core's hard gates apply the filters.

Filter semantics (every one is a hard filter of the core's gate mask):
``capabilities`` / ``tags`` / ``supported_language``: every value must be
held (tags; a language is the facet tag ``lang-<code>``); ``protocols``: any
one (binding protocols); ``provider``: the facet tag ``provider-<name>``;
``authentication``: the agent's auth type is one of the values (the facet
tags of the other types are excluded); ``certification``: ANS's trust, never
the card's claim — ``"verified"`` (or ``true`` / ``{"verified": true}``) is
trust tier 1, ``"governed"`` tiers 1-2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from .errors import BadRequest, ErrorCode
from .haidip_cards import AUTH_TYPES, auth_tag, auth_type_of, language_tag, provider_tag
from .profile_params import normalize_tag

DEFAULT_TOP = 20
MAX_TOP = 100
MAX_SKIP = 100_000
MAX_QUERY_STRING = 4096
MAX_VALUES = 16  # per filter
MAX_VALUE_CHARS = 128
MAX_QUERY_CHARS = 2000
MAX_CURSOR_CHARS = 1024
LIST_PARAMETERS = frozenset(
    {"capability", "language", "tag", "protocol", "provider", "top", "skip", "cursor"}
)
SEARCH_FIELDS = frozenset(
    {"query", "filters", "top", "skip", "ranked", "include_metadata", "trust_tier_min"}
)
FILTER_NAMES = {
    "capability": "capabilities",
    "capabilities": "capabilities",
    "language": "languages",
    "supported_language": "languages",
    "supported_languages": "languages",
    "tag": "tags",
    "tags": "tags",
    "protocol": "protocols",
    "protocols": "protocols",
    "provider": "providers",
    "authentication": "auth",
    "auth": "auth",
    "auth_type": "auth",
    "certification": "certification",
}


@dataclass(frozen=True, slots=True)
class Filters:
    capabilities: tuple[str, ...] = ()
    languages: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    protocols: tuple[str, ...] = ()
    providers: tuple[str, ...] = ()
    auth: tuple[str, ...] = ()
    max_tier: int | None = None  # from certification

    def as_dict(self) -> dict[str, Any]:
        """The filters as applied (echoed in answers, part of the ETag)."""
        out: dict[str, Any] = {
            k: list(v)
            for k, v in (
                ("capabilities", self.capabilities),
                ("supported_languages", self.languages),
                ("tags", self.tags),
                ("protocols", self.protocols),
                ("provider", self.providers),
                ("authentication", self.auth),
            )
            if v
        }
        if self.max_tier is not None:
            out["trust_tier_max"] = self.max_tier
        return out


@dataclass(frozen=True, slots=True)
class ListQuery:
    filters: Filters = field(default_factory=Filters)
    top: int = DEFAULT_TOP
    skip: int = 0
    cursor: str | None = None


@dataclass(frozen=True, slots=True)
class SearchQuery:
    query: str | None
    filters: Filters
    top: int = DEFAULT_TOP
    skip: int = 0
    ranked: bool = True
    include_metadata: bool = False
    trust_tier_min: int | None = None


def _invalid(name: str, what: str) -> BadRequest:
    return BadRequest(f"{name[:40]}: {what}", code=ErrorCode.INVALID_PARAMETER)


def _int(name: str, value: Any, lo: int, hi: int, *, text: bool = True) -> int:
    """An integer in [lo, hi]; ``text``: digits in a string too (a query
    string's values are text; a JSON body's integers are JSON numbers)."""
    if text and isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 9:
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _invalid(name, f"must be an integer from {lo} to {hi}")
    return value


def _values(name: str, raw: Any) -> tuple[str, ...]:
    """A filter's values: a string (comma-separated allowed) or a list of strings."""
    items = raw if isinstance(raw, list) else [raw]
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise _invalid(name, "must be a string or a list of strings")
        out.extend(p.strip() for p in item.split(",") if p.strip())
    if not out or len(out) > MAX_VALUES or any(len(v) > MAX_VALUE_CHARS for v in out):
        raise _invalid(
            name, f"must be 1-{MAX_VALUES} values of at most {MAX_VALUE_CHARS} characters"
        )
    return tuple(dict.fromkeys(out))


def _certification(raw: Any) -> int | None:
    if raw is None or raw is False or raw in ("any", "none"):
        return None
    if raw is True or raw == "verified":
        return 1
    if raw == "governed":
        return 2
    if (
        isinstance(raw, Mapping)
        and set(raw) <= {"verified", "governed"}
        and all(isinstance(v, bool) for v in raw.values())
    ):
        if raw.get("verified") is True:
            return 1
        if raw.get("governed") is True:
            return 2
        return None
    raise _invalid(
        "certification", "must be 'verified', 'governed', 'any', true, or {\"verified\": true}"
    )


def _tags(name: str, values: tuple[str, ...]) -> tuple[str, ...]:
    """Tag filter values normalized as tags are (``normalize_tag``). A hard
    filter is never dropped: a value with nothing left of it (``---``,
    ``!!``) is refused, not read as no filter."""
    out = []
    for v in values:
        tag = normalize_tag(v)
        if not tag:
            raise _invalid(name, f"{v[:40]!r} holds no letter or digit")
        out.append(tag)
    return tuple(dict.fromkeys(out))


def parse_filters(raw: Mapping[str, Any]) -> Filters:
    """A filters object (search) or the list query's filter parameters."""
    values: dict[str, tuple[str, ...]] = {}
    max_tier = None
    for name, value in raw.items():
        key = FILTER_NAMES.get(name)
        if key is None:
            raise BadRequest(
                f"unknown filter {name[:40]!r}; known: {', '.join(sorted(FILTER_NAMES))}",
                code=ErrorCode.INVALID_PARAMETER,
            )
        if key == "certification":
            max_tier = _certification(value)
            continue
        if value is None:
            continue
        values[key] = (*values.get(key, ()), *_values(name, value))
    for key, vs in values.items():
        if len(vs) > MAX_VALUES:
            raise _invalid(key, f"at most {MAX_VALUES} values")
    return Filters(
        capabilities=_tags("capabilities", values.get("capabilities", ())),
        languages=tuple(v.lower() for v in values.get("languages", ())),
        tags=_tags("tags", values.get("tags", ())),
        protocols=tuple(v.lower() for v in values.get("protocols", ())),
        providers=values.get("providers", ()),
        auth=tuple(sorted({auth_type_of(v) for v in values.get("auth", ())})),
        max_tier=max_tier,
    )


def parse_list_query(query_string: bytes) -> ListQuery:
    """``GET {base}/agents?capability=..&language=..&tag=..&protocol=..&provider=..
    &top=..&skip=..&cursor=..`` (a parameter may repeat or be comma-separated)."""
    if len(query_string) > MAX_QUERY_STRING:
        raise BadRequest(
            f"the query string is {len(query_string)} bytes; at most {MAX_QUERY_STRING}",
            code=ErrorCode.INVALID_PARAMETER,
        )
    try:
        pairs = parse_qsl(
            query_string.decode("utf-8"), keep_blank_values=True, strict_parsing=False
        )
    except (UnicodeDecodeError, ValueError):
        raise BadRequest(
            "the query string is not UTF-8", code=ErrorCode.INVALID_PARAMETER
        ) from None
    raw: dict[str, list[str]] = {}
    for name, value in pairs:
        if name not in LIST_PARAMETERS:
            raise BadRequest(
                f"unknown query parameter {name[:40]!r}; "
                f"known: {', '.join(sorted(LIST_PARAMETERS))}",
                code=ErrorCode.INVALID_PARAMETER,
            )
        raw.setdefault(name, []).append(value)
    top, skip, cursor = DEFAULT_TOP, 0, None
    for name in ("top", "skip", "cursor"):
        if len(raw.get(name, ())) > 1:
            raise _invalid(name, "may be given once")
    if "top" in raw:
        top = _int("top", raw.pop("top")[0], 1, MAX_TOP)
    if "skip" in raw:
        skip = _int("skip", raw.pop("skip")[0], 0, MAX_SKIP)
    if "cursor" in raw:
        cursor = raw.pop("cursor")[0]
        if not 0 < len(cursor) <= MAX_CURSOR_CHARS:
            raise _invalid("cursor", "must be a cursor this server returned")
    filters = parse_filters({k: v for k, v in raw.items()})
    return ListQuery(filters, top, skip, cursor)


def parse_search(doc: Mapping[str, Any], max_limit: int) -> SearchQuery:
    """The search body: ``query``, ``filters``, ``top``, ``skip``, ``ranked``,
    ``include_metadata`` (and ``trust_tier_min``). A ranked page ends within
    the core's ``max_limit`` best matches (``skip + top <= max_limit``)."""
    unknown = sorted(k for k in doc if k not in SEARCH_FIELDS)
    if unknown:
        raise BadRequest(
            f"unknown field {unknown[0][:40]!r}; known: {', '.join(sorted(SEARCH_FIELDS))}",
            code=ErrorCode.UNKNOWN_BODY_FIELD,
        )
    query = doc.get("query")
    if query is not None:
        if not isinstance(query, str) or len(query) > MAX_QUERY_CHARS:
            raise _invalid("query", f"must be a string of at most {MAX_QUERY_CHARS} characters")
        query = " ".join(query.split()) or None
    raw_filters = doc.get("filters", {})
    if raw_filters is None:
        raw_filters = {}
    if not isinstance(raw_filters, Mapping):
        raise _invalid("filters", "must be an object")
    filters = parse_filters(raw_filters)
    top = _int("top", doc.get("top", DEFAULT_TOP), 1, MAX_TOP, text=False)
    skip = _int("skip", doc.get("skip", 0), 0, max_limit - 1, text=False)
    if skip + top > max_limit:
        raise _invalid(
            "skip", f"skip + top must be at most {max_limit} (a search ranks the best {max_limit})"
        )
    flags = {}
    for name, default in (("ranked", True), ("include_metadata", False)):
        v = doc.get(name, default)
        if not isinstance(v, bool):
            raise _invalid(name, "must be true or false")
        flags[name] = v
    tier = doc.get("trust_tier_min")
    if tier is not None:
        tier = _int("trust_tier_min", tier, 1, 3, text=False)
    return SearchQuery(query, filters, top, skip, flags["ranked"], flags["include_metadata"], tier)


def discover_parameters(
    filters: Filters, *, intent: str | None, limit: int, tier: int
) -> dict[str, Any]:
    """The core DISCOVER parameters that apply ``filters`` (and the tier cap:
    ``tier`` tightened by the certification filter)."""
    required = [
        *filters.capabilities,
        *filters.tags,
        *(language_tag(v) for v in filters.languages),
        *(provider_tag(v) for v in filters.providers),
    ]
    if len(filters.auth) == 1:
        required.append(auth_tag(filters.auth[0]))
    params: dict[str, Any] = {
        "limit": limit,
        "trust_tier_min": min(tier, filters.max_tier) if filters.max_tier else tier,
        "detail": "summary",
    }
    if intent is not None:
        params["intent"] = intent
    if required:
        params["required_tags"] = list(dict.fromkeys(required))[:32]
    if len(filters.auth) > 1:
        params["excluded_tags"] = [auth_tag(t) for t in AUTH_TYPES if t not in filters.auth]
    if filters.protocols:
        params["protocols"] = list(filters.protocols)
    return params
