"""The efficient-discovery profile's DISCOVER parameters (draft-xu section 5):
``query`` (alias of ``intent``), ``required_tags`` / ``excluded_tags`` (hard
filters), ``preferred_tags`` (capability evidence only), ``protocols`` (hard
filter on bindings), ``constraints``, ``detail``, ``client_context``, and the
rule for parameters ANS does not know.

Unknown names are never silently ignored. A name that is, up to case and
separators or within two edits (one for short names), the name of a *hard filter* (a parameter or a
constraint that removes agents: ``trust_tier_mn``, ``required-tags``,
``protocol``, ``max_result_age_seconds``) is refused 422
``misspelled_parameter``: answering without that filter would change what the
caller asked for. Every other unknown name (a top-level parameter or a
``constraints`` key) is answered and listed in ``unsupported_filters``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from .errors import ErrorCode, InvalidParameter, Unprocessable
from .jcs import canonicalize
from .request_types import ZONE_RE, ProfileParams

# Bounds.
MAX_TAGS = 32  # per tag list
MAX_TAG_LEN = 64
MAX_PROTOCOLS = 16
MAX_CONSTRAINTS = 32
MAX_UNKNOWN = 32  # unknown parameter names answered in unsupported_filters
MAX_NAME_LEN = 64  # of an unknown parameter or constraint name
MAX_CLIENT_CONTEXT_BYTES = 2048  # its JCS bytes
MAX_REGIONS = 16
MAX_AGE_SECONDS = 10 * 365 * 86400

DETAIL_LEVELS = ("minimal", "summary", "full")

# Every DISCOVER parameter ANS understands.
KNOWN_PARAMETERS = frozenset(
    {
        "intent",
        "query",
        "capability_domains",
        "trust_tier_min",
        "behavioral_trust_min",
        "governance_zone",
        "org_domain",
        "limit",
        "scope_negotiate",
        "include_evidence",
        "preferred_agent",
        "required_tags",
        "excluded_tags",
        "preferred_tags",
        "protocols",
        "constraints",
        "detail",
        "client_context",
        "name",  # name resolution (discovery-01 4): ans.core.names
    }
)
# The profile's own parameters: any of them makes the answer profile-shaped.
PROFILE_PARAMETERS = frozenset(
    {
        "query",
        "required_tags",
        "excluded_tags",
        "preferred_tags",
        "protocols",
        "constraints",
        "detail",
        "client_context",
    }
)
# The parameters that remove agents: a misspelling of one is refused.
HARD_FILTERS = (
    "capability_domains",
    "trust_tier_min",
    "behavioral_trust_min",
    "governance_zone",
    "org_domain",
    "required_tags",
    "excluded_tags",
    "protocols",
    "constraints",
)
# constraints keys ANS applies (all hard filters): see parse_constraints.
KNOWN_CONSTRAINTS = ("max_results_age_seconds", "region", "zone")

_TAG_SEP_RE = re.compile(r"[^a-z0-9]+")  # the same rule as ans.text.normalize_tag
_PROTOCOL_RE = re.compile(r"[a-z][a-z0-9+.-]{0,31}")
_REGION_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_NAME_RE = re.compile(r"[\x21-\x7e]{1,64}")


def normalize_tag(tag: str) -> str:
    """Lowercase, hyphen-joined: 'Invoice Processing' -> 'invoice-processing'."""
    return _TAG_SEP_RE.sub("-", tag.lower()).strip("-")


def _squash(name: str) -> str:
    return _TAG_SEP_RE.sub("", name.lower())


def _edits(a: str, b: str, cap: int = 2) -> int:
    """Optimal-string-alignment distance (insert, delete, substitute,
    transpose), cut off above ``cap``."""
    if abs(len(a) - len(b)) > cap:
        return cap + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > cap:
            return cap + 1
        prev2, prev = prev, cur
    return prev[-1]


def misspelling_of(name: str, candidates: tuple[str, ...]) -> str | None:
    """The hard-filter name ``name`` looks like a misspelling of: the same
    letters and digits up to case and separators, or at most two edits away
    (one for names of 4 or 5 letters, none below)."""
    squashed = _squash(name)
    for known in candidates:
        target = _squash(known)
        if squashed == target:
            return known
        cap = 2 if len(squashed) >= 6 else 1 if len(squashed) >= 4 else 0
        if cap and _edits(squashed, target, cap) <= cap:
            return known
    return None


def _misspelled(name: str, meant: str, where: str) -> Unprocessable:
    return Unprocessable(
        f"{(where + name)[:80]!r} is not a DISCOVER {'constraint' if where else 'parameter'}; "
        f"did you mean {where + meant!r}? (a misspelled hard filter is refused, not ignored)",
        code=ErrorCode.MISSPELLED_PARAMETER,
    )


def _check_name(name: str, what: str) -> None:
    if _NAME_RE.fullmatch(name) is None:
        raise InvalidParameter(
            "parameters", f"{what} names are 1-{MAX_NAME_LEN} printable ASCII characters"
        )


def unknown_parameters(p: Mapping[str, Any]) -> list[str]:
    """The parameter names ANS does not know (sorted), after refusing the
    misspelled hard filters among them."""
    unknown = sorted(k for k in p if k not in KNOWN_PARAMETERS)
    if len(unknown) > MAX_UNKNOWN:
        raise InvalidParameter("parameters", f"at most {MAX_UNKNOWN} parameters ANS does not know")
    for name in unknown:
        _check_name(name, "parameter")
        meant = misspelling_of(name, HARD_FILTERS)
        if meant is not None:
            raise _misspelled(name, meant, "")
    return unknown


def parse_tags(p: Mapping[str, Any], name: Any) -> tuple[str, ...]:
    value = p.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise InvalidParameter(name, "must be a list of tag strings")
    if len(value) > MAX_TAGS:
        raise InvalidParameter(name, f"at most {MAX_TAGS} tags")
    out = set()
    for t in value:
        norm = normalize_tag(t) if len(t) <= MAX_TAG_LEN else ""
        if not norm:
            raise InvalidParameter(
                name, f"each tag is 1-{MAX_TAG_LEN} characters with a letter or digit"
            )
        out.add(norm)
    return tuple(sorted(out))


def parse_protocols(p: Mapping[str, Any]) -> tuple[str, ...]:
    value = p.get("protocols")
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise InvalidParameter("protocols", "must be a list of protocol names such as 'https'")
    if len(value) > MAX_PROTOCOLS:
        raise InvalidParameter("protocols", f"at most {MAX_PROTOCOLS} protocols")
    out = {v.strip().lower() for v in value}
    if not all(_PROTOCOL_RE.fullmatch(v) for v in out):
        raise InvalidParameter(
            "protocols", "each is a protocol name (a letter, then up to 31 of a-z 0-9 + . -)"
        )
    return tuple(sorted(out))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_constraints(
    p: Mapping[str, Any],
) -> tuple[float | None, tuple[str, ...], str | None, list[str]]:
    """(max_results_age_seconds, regions, zone, unsupported constraint names).

    * ``max_results_age_seconds``: a number of seconds >= 0; an agent whose
      metadata was updated longer ago (``freshness.age_seconds``) is left out.
    * ``region``: a region name or a list of them; an agent is kept when its
      capability document declares one of them (``constraints.region`` or
      ``constraints.regions``); an agent declaring none is left out.
    * ``zone``: a governance zone id: the same filter as ``governance_zone``
      (both given must agree).
    Every other key is answered in ``unsupported_filters``; a misspelling of
    one of these three is refused."""
    c = p.get("constraints")
    if c is None:
        return None, (), None, []
    if not isinstance(c, dict):
        raise InvalidParameter("constraints", "must be an object")
    if len(c) > MAX_CONSTRAINTS:
        raise InvalidParameter("constraints", f"at most {MAX_CONSTRAINTS} keys")
    age = c.get("max_results_age_seconds")
    if age is not None:
        if not _is_number(age) or not 0 <= age <= MAX_AGE_SECONDS:
            raise InvalidParameter(
                "constraints",
                f"max_results_age_seconds must be a number from 0 to {MAX_AGE_SECONDS}",
            )
        age = float(age)
    region = c.get("region")
    regions: tuple[str, ...] = ()
    if region is not None:
        items = region if isinstance(region, list) else [region]
        if (
            not items
            or len(items) > MAX_REGIONS
            or not all(isinstance(r, str) and _REGION_RE.fullmatch(r.lower()) for r in items)
        ):
            raise InvalidParameter(
                "constraints",
                f"region must be a region name (a-z 0-9 . _ -) or a list of 1-{MAX_REGIONS}",
            )
        regions = tuple(sorted({r.lower() for r in items}))
    zone = c.get("zone")
    if zone is not None and (not isinstance(zone, str) or ZONE_RE.fullmatch(zone) is None):
        raise InvalidParameter("constraints", "zone must be a zone id such as 'zone:finance'")
    unknown = sorted(k for k in c if k not in KNOWN_CONSTRAINTS)
    for name in unknown:
        _check_name(name, "constraint")
        meant = misspelling_of(name, KNOWN_CONSTRAINTS)
        if meant is not None:
            raise _misspelled(name, meant, "constraints.")
    return age, regions, zone, unknown


def parse_detail(p: Mapping[str, Any]) -> str:
    detail = p.get("detail", "summary")
    if detail not in DETAIL_LEVELS:
        raise InvalidParameter("detail", "must be 'minimal', 'summary' or 'full'")
    return str(detail)


def parse_client_context(p: Mapping[str, Any]) -> str | None:
    """Accepted, bounded, kept only as the SHA-256 of its JCS bytes (never
    logged, audited or forwarded in clear)."""
    ctx = p.get("client_context")
    if ctx is None:
        return None
    if not isinstance(ctx, dict):
        raise InvalidParameter("client_context", "must be an object")
    try:
        data = canonicalize(ctx)
    except (TypeError, ValueError):
        raise InvalidParameter("client_context", "cannot be canonicalized") from None
    if len(data) > MAX_CLIENT_CONTEXT_BYTES:
        raise InvalidParameter(
            "client_context", f"must be at most {MAX_CLIENT_CONTEXT_BYTES} bytes as JSON"
        )
    return hashlib.sha256(data).hexdigest()


def parse_query(p: Mapping[str, Any], max_len: int) -> str | None:
    """``intent``, or its alias ``query`` (both given must be the same text)."""
    texts = []
    for name in ("intent", "query"):
        v = p.get(name)
        if v is None:
            continue
        if not isinstance(v, str):
            raise InvalidParameter(name, "must be a string")
        v = " ".join(v.split())
        if not v:  # a blank text asks for nothing: never the unfiltered index
            raise InvalidParameter(name, "must not be blank (omit it to ask on the filters alone)")
        if len(v) > max_len:
            raise InvalidParameter(name, f"must be at most {max_len} characters")
        texts.append(v)
    if len(texts) == 2 and texts[0] != texts[1]:
        raise InvalidParameter("query", "is an alias of intent: give one, or the same text")
    return texts[0] if texts else None


def parse_profile_params(p: Mapping[str, Any], max_intent_len: int) -> ProfileParams:
    unknown = unknown_parameters(p)
    intent = parse_query(p, max_intent_len)
    required = parse_tags(p, "required_tags")
    excluded = parse_tags(p, "excluded_tags")
    both = sorted(set(required) & set(excluded))
    if both:
        raise InvalidParameter("excluded_tags", f"tag {both[0]!r} is both required and excluded")
    preferred = parse_tags(p, "preferred_tags")
    protocols = parse_protocols(p)
    age, regions, zone, unknown_constraints = parse_constraints(p)
    zone_param = p.get("governance_zone")
    if zone is not None and zone_param is not None and zone != zone_param:
        raise InvalidParameter("constraints", "zone and governance_zone name different zones")
    return ProfileParams(
        intent=intent,
        required_tags=required,
        excluded_tags=excluded,
        preferred_tags=preferred,
        protocols=protocols,
        max_results_age_seconds=age,
        regions=regions,
        zone=zone,
        detail=parse_detail(p),
        client_context_digest=parse_client_context(p),
        unsupported_filters=tuple(sorted({*unknown, *unknown_constraints})),
        used=bool(unknown) or any(k in p for k in PROFILE_PARAMETERS),
    )


def forwarded_parameters(p: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters a federation peer is asked with: without
    ``client_context`` (the client's hints stay here), and at ``summary``
    detail when ``minimal`` was asked (the merge needs the trust fields; the
    answer is cut to ``minimal`` here)."""
    out = {k: v for k, v in p.items() if k != "client_context"}
    if out.get("detail") == "minimal":
        del out["detail"]
    return out
