"""Typed AGTP requests (DISCOVER, DESCRIBE, ACTIVATE) built from
(method, headers, body bytes), and the response/error body encoders.

Header names arrive lowercase (HTTP/2 rules); values are validated and
bounded. Parameter validation raises :class:`InvalidParameter` (422) whose
code names the parameter.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import jsonstrict
from .errors import (
    INVALID_HEADER_CODES,
    REQUIRED_HEADER_CODES,
    AgtpError,
    BadRequest,
    ErrorCode,
    InvalidBody,
    InvalidHeader,
    InvalidParameter,
    MethodMismatch,
    MissingHeader,
    TaskIdMismatch,
    UnsupportedContentType,
    UnsupportedVersion,
)
from .jcs import canonicalize
from .scope import AuthorityScope, parse_authority_scope

AGTP_VERSION = "AGTP/1.0"
CONTENT_TYPE = "application/agtp+json"
ACCEPTED_CONTENT_TYPES = frozenset({CONTENT_TYPE, "application/json"})

# DESCRIBE capability domains of -02 6.5 plus the efficient-discovery profile's
# tags/examples; DISCOVER's capability_domains must name these.
CAPABILITY_DOMAINS = frozenset(
    {"methods", "modalities", "tools", "version", "budget", "zones", "tags", "examples"}
)

FEDERATION_PATH_HEADER = "agtp-federation-path"
FEDERATION_BUDGET_HEADER = "agtp-federation-budget-ms"
MAX_FEDERATION_PATH = 16
MAX_FEDERATION_BUDGET_MS = 600_000
# An ANS is named on a federation path by its signing key id (RFC 7638 thumbprint).
ANS_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")

MAX_ID_LEN = 512
MAX_TASK_ID_LEN = 256
MAX_INTENT_LEN = 2000
MAX_DOMAIN_NAMES = 16

_PRINTABLE_RE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")
ZONE_RE = re.compile(r"zone:[a-z0-9][a-z0-9._-]{0,119}")
ORG_DOMAIN_RE = re.compile(
    r"(?=.{1,253}\Z)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
)


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds the parser enforces; passed in from configuration."""

    max_body_bytes: int = 256 * 1024
    default_limit: int = 10
    max_limit: int = 100


@dataclass(frozen=True, slots=True)
class Identity:
    """The requester as asserted by the AGTP identity headers."""

    agent_id: str
    principal_id: str
    scope: AuthorityScope
    session_id: str | None = None
    # The Authority-Scope header exactly as received (federation forwards it unchanged).
    scope_header: str = field(default="", compare=False)
    # Set by requester authentication in token mode: the verified bearer token
    # (forwarded unchanged to federation peers) and its optional zone claim.
    bearer_token: str | None = field(default=None, compare=False, repr=False)
    token_zone: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class DiscoverParams:
    intent: str | None
    capability_domains: tuple[str, ...] | None
    trust_tier_min: int | None
    behavioral_trust_min: float | None
    governance_zone: str | None
    org_domain: str | None
    limit: int
    scope_negotiate: bool
    include_evidence: bool = False
    # Routing (discovery draft 6.1): the agent the caller would like as results[0].
    preferred_agent: str | None = None


@dataclass(frozen=True, slots=True)
class DiscoverRequest:
    identity: Identity
    task_id: str | None
    params: DiscoverParams
    query_digest: str
    raw_parameters: Mapping[str, Any] = field(compare=False, repr=False)
    # Federation (discovery draft 5): the ANS servers already on the path, in
    # order, and the time the forwarding ANS gives us to answer.
    federation_path: tuple[str, ...] = ()
    federation_budget_ms: int | None = None


@dataclass(frozen=True, slots=True)
class DescribeRequest:
    identity: Identity | None
    task_id: str | None
    canonical_id: str | None


@dataclass(frozen=True, slots=True)
class ActivateRequest:
    identity: Identity
    task_id: str | None
    manifest: dict[str, Any]
    capabilities: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LifecycleRequest:
    """A governance lifecycle event (SUSPEND/REVOKE/DEPRECATE/REINSTATE) for one agent."""

    identity: Identity
    task_id: str | None
    event: dict[str, Any]


AgtpRequest = DiscoverRequest | DescribeRequest | ActivateRequest | LifecycleRequest
SUPPORTED_METHODS = ("DISCOVER", "DESCRIBE", "ACTIVATE", "LIFECYCLE")


# -- headers -------------------------------------------------------------------


def is_task_id(value: object) -> bool:
    """The one Task-ID rule, for the ``Task-ID`` header (after trimming), the
    body's ``task_id`` and every ``task-id`` the server sends back: 1 to
    MAX_TASK_ID_LEN printable ASCII characters, no leading or trailing blank.
    So no CR, LF, NUL or non-ASCII character can reach a response header."""
    return (
        isinstance(value, str)
        and len(value) <= MAX_TASK_ID_LEN
        and _PRINTABLE_RE.fullmatch(value) is not None
    )


def _header_text(headers: Mapping[str, str], name: str, max_len: int = MAX_ID_LEN) -> str | None:
    value = headers.get(name)
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if len(value) > max_len or _PRINTABLE_RE.fullmatch(value) is None:
        raise InvalidHeader(
            f"{name} must be printable ASCII of at most {max_len} characters",
            code=INVALID_HEADER_CODES.get(name, ErrorCode.INVALID_HEADER),
        )
    return value


def check_envelope_headers(headers: Mapping[str, str]) -> None:
    """AGTP-Version (if sent) must be AGTP/1.x; Content-Type (if sent) JSON."""
    version = headers.get("agtp-version")
    if version is not None and not re.fullmatch(r"AGTP/1(?:\.\d{1,3})?", version.strip()):
        raise UnsupportedVersion(
            f"AGTP-Version {version[:40]!r} is not supported; use {AGTP_VERSION}"
        )
    ctype = headers.get("content-type")
    if ctype is not None:
        base = ctype.split(";", 1)[0].strip().lower()
        if base and base not in ACCEPTED_CONTENT_TYPES:
            raise UnsupportedContentType(
                f"Content-Type {base[:60]!r} is not supported; use {CONTENT_TYPE}"
            )


def parse_identity(headers: Mapping[str, str]) -> Identity:
    """Agent-ID, Principal-ID and Authority-Scope are all required."""
    values: dict[str, str] = {}
    for name, code in REQUIRED_HEADER_CODES.items():
        if name == "authority-scope":
            raw = headers.get(name)
            text = raw.strip() if raw is not None else None
        else:
            text = _header_text(headers, name)
        if not text:
            raise MissingHeader(f"required header {_display(name)} is missing", code=code)
        values[name] = text
    return Identity(
        agent_id=values["agent-id"],
        principal_id=values["principal-id"],
        scope=parse_authority_scope(values["authority-scope"]),
        session_id=_header_text(headers, "session-id"),
        scope_header=values["authority-scope"],
    )


def has_identity(headers: Mapping[str, str]) -> bool:
    return any(headers.get(n) for n in REQUIRED_HEADER_CODES)


def _display(name: str) -> str:
    return "-".join("ID" if p == "id" else p.capitalize() for p in name.split("-"))


# -- body ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Envelope:
    task_id: str | None
    parameters: dict[str, Any]


def parse_envelope(
    method: str, headers: Mapping[str, str], body: bytes, limits: Limits
) -> Envelope:
    """The common AGTP body ``{"method", "task_id", "parameters", ...}``."""
    header_task = _header_text(headers, "task-id", MAX_TASK_ID_LEN)
    if not body:  # only a truly empty body means "no parameters"; " " must parse
        return Envelope(header_task, {})
    doc = jsonstrict.loads(body, max_bytes=limits.max_body_bytes)
    if not isinstance(doc, dict):
        raise InvalidBody("the AGTP request body must be a JSON object")
    body_method = doc.get("method")
    if body_method is not None and (
        not isinstance(body_method, str) or body_method.upper() != method
    ):
        raise MethodMismatch(f"body method {str(body_method)[:40]!r} does not match {method}")
    body_task = doc.get("task_id")
    if body_task is not None:
        # The body's task_id is echoed as the task-id response header: it
        # obeys the Task-ID header's rule (and is never trimmed).
        if not is_task_id(body_task):
            raise BadRequest(
                f"task_id must be a string of 1 to {MAX_TASK_ID_LEN} printable ASCII "
                "characters (no control characters, no leading or trailing blank)",
                code=ErrorCode.INVALID_TASK_ID,
            )
        if header_task is not None and body_task != header_task:
            raise TaskIdMismatch("the Task-ID header and the body task_id differ")
    params = doc.get("parameters", {})
    if not isinstance(params, dict):
        raise InvalidParameter("parameters", "must be a JSON object")
    return Envelope(header_task if header_task is not None else body_task, params)


def task_id_hint(headers: Mapping[str, str]) -> str | None:
    """Best-effort Task-ID for error responses (never raises)."""
    value = headers.get("task-id")
    if value is None:
        return None
    value = value.strip()
    return value if is_task_id(value) else None


@contextmanager
def answering(task_id: str | None, digest: str | None = None) -> Iterator[None]:
    """An AgtpError raised inside carries ``task_id`` and the query
    ``digest`` (unless it already carries them), so that the error answer
    echoes the request's Task-ID and a signed refusal names its query."""
    try:
        yield
    except AgtpError as exc:
        if exc.task_id is None:
            exc.task_id = task_id
        if exc.query_digest is None:
            exc.query_digest = digest
        raise


# -- DISCOVER --------------------------------------------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_discover_params(p: Mapping[str, Any], limits: Limits) -> DiscoverParams:
    intent = p.get("intent")
    if intent is not None:
        if not isinstance(intent, str):
            raise InvalidParameter("intent", "must be a string")
        intent = " ".join(intent.split())
        if len(intent) > MAX_INTENT_LEN:
            raise InvalidParameter("intent", f"must be at most {MAX_INTENT_LEN} characters")
        intent = intent or None

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

    # Same grammar as DESCRIBE's canonical_id (_CANONICAL_ID_RE, below).
    preferred = p.get("preferred_agent")
    if preferred is not None and (
        not isinstance(preferred, str) or _CANONICAL_ID_RE.fullmatch(preferred) is None
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


# -- DESCRIBE / ACTIVATE -------------------------------------------------------------

_CANONICAL_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,256}")


def parse_describe(headers: Mapping[str, str], body: bytes, limits: Limits) -> DescribeRequest:
    check_envelope_headers(headers)
    identity = parse_identity(headers) if has_identity(headers) else None
    env = parse_envelope("DESCRIBE", headers, body, limits)
    cid = env.parameters.get("canonical_id")
    if cid is not None and (not isinstance(cid, str) or _CANONICAL_ID_RE.fullmatch(cid) is None):
        with answering(env.task_id):
            raise InvalidParameter(
                "canonical_id", "must be an identifier of at most 256 characters"
            )
    return DescribeRequest(identity=identity, task_id=env.task_id, canonical_id=cid)


def parse_activate(headers: Mapping[str, str], body: bytes, limits: Limits) -> ActivateRequest:
    check_envelope_headers(headers)
    identity = parse_identity(headers)
    env = parse_envelope("ACTIVATE", headers, body, limits)
    manifest = env.parameters.get("manifest")
    caps = env.parameters.get("capabilities", {})
    with answering(env.task_id):
        if not isinstance(manifest, dict):
            raise InvalidParameter(
                "manifest", "a complete signed Agent Manifest Document is required"
            )
        if not isinstance(caps, dict):
            raise InvalidParameter("capabilities", "must be a DESCRIBE Capability Document object")
    return ActivateRequest(
        identity=identity, task_id=env.task_id, manifest=manifest, capabilities=caps
    )


def parse_lifecycle(headers: Mapping[str, str], body: bytes, limits: Limits) -> LifecycleRequest:
    check_envelope_headers(headers)
    identity = parse_identity(headers)
    env = parse_envelope("LIFECYCLE", headers, body, limits)
    event = env.parameters.get("event")
    if not isinstance(event, dict):
        with answering(env.task_id):
            raise InvalidParameter("event", "a signed lifecycle event document is required")
    return LifecycleRequest(identity=identity, task_id=env.task_id, event=event)


PARSERS = {
    "DISCOVER": parse_discover,
    "DESCRIBE": parse_describe,
    "ACTIVATE": parse_activate,
    "LIFECYCLE": parse_lifecycle,
}


# -- responses -------------------------------------------------------------------------


def encode_result(status: int, task_id: str | None, result: Mapping[str, Any]) -> bytes:
    return orjson.dumps({"status": status, "task_id": task_id, "result": result})


def encode_error(status: int, task_id: str | None, code: str, message: str) -> bytes:
    return orjson.dumps(
        {"status": status, "task_id": task_id, "error": {"code": code, "message": message}}
    )
