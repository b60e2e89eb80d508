"""DISCOVER request parsing: the parameters (each checked and bounded; an
invalid one is 422 with a code naming it), the query digest the signed answer
echoes, and the federation headers (path and time budget) of a forward.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from .envelope import (
    answering,
    check_envelope_headers,
    parse_envelope,
    parse_identity,
)
from .errors import (
    ErrorCode,
    InvalidHeader,
    InvalidParameter,
)
from .jcs import canonicalize
from .profile_params import parse_profile_params
from .request_types import (
    ANS_ID_RE,
    CANONICAL_ID_RE,
    CAPABILITY_DOMAINS,
    FEDERATION_BUDGET_HEADER,
    FEDERATION_PATH_HEADER,
    MAX_DOMAIN_NAMES,
    MAX_FEDERATION_BUDGET_MS,
    MAX_FEDERATION_PATH,
    MAX_INTENT_LEN,
    ORG_DOMAIN_RE,
    ZONE_RE,
    DiscoverParams,
    DiscoverRequest,
    Limits,
)

# -- DISCOVER --------------------------------------------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_discover_params(p: Mapping[str, Any], limits: Limits) -> DiscoverParams:
    # The profile's fields first: a misspelled hard filter is refused before
    # anything else is read (protocol/profile_params.py).
    profile = parse_profile_params(p, MAX_INTENT_LEN)
    intent = profile.intent

    domains = p.get("capability_domains")
    if domains is not None:
        if isinstance(domains, str):  # DESCRIBE allows a comma-separated string
            domains = [d.strip() for d in domains.split(",") if d.strip()]
        if not isinstance(domains, list) or not all(isinstance(d, str) for d in domains):
            raise InvalidParameter("capability_domains", "must be a list of domain names")
        if len(domains) > MAX_DOMAIN_NAMES:
            raise InvalidParameter("capability_domains", f"at most {MAX_DOMAIN_NAMES} names")
        unknown = sorted({d for d in domains if d not in CAPABILITY_DOMAINS})
        if unknown:
            raise InvalidParameter(
                "capability_domains",
                f"unknown domain {unknown[0][:40]!r}; "
                f"known: {', '.join(sorted(CAPABILITY_DOMAINS))}",
            )
        domains = tuple(sorted(set(domains)))

    tier = p.get("trust_tier_min")
    if tier is not None and (not _is_int(tier) or tier not in (1, 2, 3)):
        raise InvalidParameter("trust_tier_min", "must be the integer 1, 2 or 3")

    btm = p.get("behavioral_trust_min")
    if btm is not None:
        if not _is_number(btm) or not 0.0 <= float(btm) <= 1.0:
            raise InvalidParameter("behavioral_trust_min", "must be a number from 0.0 to 1.0")
        btm = float(btm)

    zone = p.get("governance_zone")
    if zone is not None and (not isinstance(zone, str) or ZONE_RE.fullmatch(zone) is None):
        raise InvalidParameter("governance_zone", "must be a zone id such as 'zone:finance'")
    zone = zone if zone is not None else profile.zone  # constraints.zone: the same gate

    org = p.get("org_domain")
    if org is not None:
        if not isinstance(org, str) or ORG_DOMAIN_RE.fullmatch(org.lower().rstrip(".")) is None:
            raise InvalidParameter("org_domain", "must be a DNS domain name such as 'acme.tld'")
        org = org.lower().rstrip(".")

    limit = p.get("limit", limits.default_limit)
    if not _is_int(limit) or not 1 <= limit <= limits.max_limit:
        raise InvalidParameter("limit", f"must be an integer from 1 to {limits.max_limit}")

    negotiate = p.get("scope_negotiate", False)
    if not isinstance(negotiate, bool):
        raise InvalidParameter("scope_negotiate", "must be true or false")

    evidence = p.get("include_evidence", False)
    if not isinstance(evidence, bool):
        raise InvalidParameter("include_evidence", "must be true or false")

    # Same grammar as DESCRIBE's canonical_id (CANONICAL_ID_RE, below).
    preferred = p.get("preferred_agent")
    if preferred is not None and (
        not isinstance(preferred, str) or CANONICAL_ID_RE.fullmatch(preferred) is None
    ):
        raise InvalidParameter(
            "preferred_agent", "must be a canonical_id (1-256 of A-Z a-z 0-9 . _ : -)"
        )

    return DiscoverParams(
        intent=intent,
        capability_domains=domains,
        trust_tier_min=tier,
        behavioral_trust_min=btm,
        governance_zone=zone,
        org_domain=org,
        limit=limit,
        scope_negotiate=negotiate,
        include_evidence=evidence,
        preferred_agent=preferred,
        profile=profile,
    )


def query_digest(parameters: Mapping[str, Any]) -> str:
    """Lowercase hex SHA-256 of the JCS bytes of the parameters as sent."""
    try:
        data = canonicalize(dict(parameters))
    except (TypeError, ValueError) as exc:
        raise InvalidParameter("parameters", f"cannot be canonicalized: {exc}") from None
    return hashlib.sha256(data).hexdigest()


def parse_federation_headers(headers: Mapping[str, str]) -> tuple[tuple[str, ...], int | None]:
    """``AGTP-Federation-Path: id1, id2`` (ANS ids, origin first) and
    ``AGTP-Federation-Budget-Ms: N``; both optional, both bounded."""
    path: tuple[str, ...] = ()
    raw = headers.get(FEDERATION_PATH_HEADER)
    if raw is not None and raw.strip():
        items = [p.strip() for p in raw.split(",")]
        if len(items) > MAX_FEDERATION_PATH or not all(ANS_ID_RE.fullmatch(p) for p in items):
            raise InvalidHeader(
                f"AGTP-Federation-Path must list at most {MAX_FEDERATION_PATH} ANS ids "
                "(base64url key ids) separated by commas",
                code=ErrorCode.INVALID_FEDERATION_PATH,
            )
        path = tuple(items)
    budget = None
    raw = headers.get(FEDERATION_BUDGET_HEADER)
    if raw is not None:
        text = raw.strip()
        if not text.isdigit() or not 1 <= int(text) <= MAX_FEDERATION_BUDGET_MS:
            raise InvalidHeader(
                "AGTP-Federation-Budget-Ms must be an integer from 1 to "
                f"{MAX_FEDERATION_BUDGET_MS}",
                code=ErrorCode.INVALID_FEDERATION_BUDGET,
            )
        budget = int(text)
    return path, budget


def parse_discover(headers: Mapping[str, str], body: bytes, limits: Limits) -> DiscoverRequest:
    check_envelope_headers(headers)
    identity = parse_identity(headers)
    path, budget = parse_federation_headers(headers)
    env = parse_envelope("DISCOVER", headers, body, limits)
    try:  # the digest first, so that a 422 on a parameter names the query it refuses
        digest: str | None = query_digest(env.parameters)
    except InvalidParameter:
        digest = None
    with answering(env.task_id, digest):
        params = parse_discover_params(env.parameters, limits)
        if digest is None:
            digest = query_digest(env.parameters)  # raises the canonicalization 422
    return DiscoverRequest(
        identity=identity,
        task_id=env.task_id,
        params=params,
        query_digest=digest,
        raw_parameters=env.parameters,
        federation_path=path,
        federation_budget_ms=budget,
    )
