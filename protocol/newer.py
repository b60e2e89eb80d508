"""Parsing a request in the newer dialect (AGTP -09, discovery-01) into the
same typed requests the -02 parsers produce, so both dialects pass the same
gate, core and signatures.

What the newer drafts change, and how it is read here:

* the request line may carry a path (``AGTP/1.0 DISCOVER /agents``, -09
  "Request Line Grammar"): DISCOVER is served on ``/`` and ``/agents``,
  DESCRIBE on ``/`` (this ANS) and ``/agents/{name-or-id}``; any other path
  is 404 ``unknown_path``; a query string is accepted and ignored;
* ``Owner-ID`` replaces ``Principal-ID``; ``Agent-ID`` without ``Owner-ID`` is
  400 ``missing_owner_id`` (identifiers-02: both appear together); a request
  with neither is anonymous;
* ``Authority-Scope`` is a comma- (or space-) separated list, tokens may
  have more than two segments (``mcp:tools:execute``), and it may be
  absent (no scope is granted then: ANS holds no identity document to
  inherit one from);
* the body: discovery-01's ``{"method", "task_id", "parameters": {...}}``;
  the reference code's flat form (parameters at the top level); its legacy
  ``{"target": "agents"}`` (the same as the path ``/agents``); -09 base
  DISCOVER's ``criteria`` / ``max_results`` / ``filter`` (mapped to
  ``intent`` / ``limit`` / the named parameters). Any other top-level key is
  422 ``unknown_body_field``, and a DISCOVER with no criterion at all is 422
  ``missing_query``: never an unfiltered answer;
* agents may be named by reference: a 64-hex canonical Agent-ID, an
  ``agtp://`` URI (Forms 1, 1a, 3, 4) or a human-readable name
  (``label.org_domain``, or an explicit manifest name), see :func:`agent_ref`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import jsonstrict
from .dialect import NEWER_ACCEPTED_CONTENT_TYPES, NEWER_CONTENT_TYPE, media_type
from .discover_request import parse_discover_params, parse_federation_headers, query_digest
from .envelope import ENVELOPE_KEYS, _header_text, answering, is_task_id
from .errors import (
    BadRequest,
    ErrorCode,
    InvalidAuthorityScope,
    InvalidBody,
    InvalidHeader,
    InvalidParameter,
    MethodMismatch,
    MissingHeader,
    MissingQuery,
    NotFound,
    TaskIdMismatch,
    UnknownBodyField,
    UnsupportedContentType,
)
from .profile_params import KNOWN_PARAMETERS
from .request_types import (
    CANONICAL_ID_RE,
    MAX_TASK_ID_LEN,
    DescribeRequest,
    DiscoverRequest,
    Identity,
    Limits,
)
from .scope import MAX_SCOPE_HEADER, MAX_SCOPE_TOKENS, AuthorityScope, ScopeToken

# Every DISCOVER parameter ANS understands (discovery-01's, the profile's,
# ``name``); unknown ones are the profile's rule (unsupported_filters, or 422
# misspelled_parameter for a hard filter's misspelling).
DISCOVER_PARAMETERS = KNOWN_PARAMETERS
# The -09 base draft's DISCOVER parameters, mapped onto discovery-01's.
BASE09_PARAMETERS = frozenset({"criteria", "max_results", "filter"})
# What makes a DISCOVER a query (anything else only shapes the answer).
CRITERIA = frozenset(
    DISCOVER_PARAMETERS
    - {"limit", "scope_negotiate", "include_evidence", "detail"}
    - {"client_context"}
)
DESCRIBE_PARAMETERS = frozenset(
    {"canonical_id", "agent_id", "name", "capability_domains", "version_min", "context"}
)
DISCOVER_PATHS = frozenset({"/", "/agents"})
MAX_PATH = 2048
MAX_NAME = 300
_HEX64_RE = re.compile(r"[0-9a-fA-F]{64}")
_SEGMENT = r"(?:\*|[a-z0-9_-]{1,64})"
_SCOPE_TOKEN_RE = re.compile(rf"{_SEGMENT}(?::{_SEGMENT})+")
_SCOPE_SPLIT_RE = re.compile(r"[,\s]+")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62})"
_DNS_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DOMAIN = rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})+"
_NAME_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_URI_AGENT_RE = re.compile(rf"agtp://(?:agtp\.)?({_DOMAIN})(?::\d{{1,5}})?/agents/({_LABEL})/?")
_URI_ID_RE = re.compile(r"agtp://([0-9a-fA-F]{64})(?:@[^/\s]{1,255})?/?")


@dataclass(frozen=True, slots=True)
class AgentRef:
    """An agent named by canonical id, or by a name ANS resolves."""

    canonical_id: str | None = None
    name: str | None = None  # lowercase, no trailing dot


@dataclass(frozen=True, slots=True)
class NewerDiscover:
    """A newer-dialect DISCOVER: ``request`` is None for an anonymous one."""

    request: DiscoverRequest | None
    task_id: str | None
    has_query: bool
    name: AgentRef | None


@dataclass(frozen=True, slots=True)
class NewerDescribe:
    request: DescribeRequest
    target: AgentRef | None  # None: this ANS itself


def split_target(raw: str | None) -> tuple[str, str | None]:
    """(path, query) of a request-line target; ``/`` when there was none."""
    if raw is None:
        return "/", None
    path, sep, query = raw.partition("?")
    return (path.rstrip("/") or "/"), (query if sep else None)


def canonical_agent_id(value: str) -> str:
    """A 64-hex canonical Agent-ID in lowercase; any other id as sent."""
    return value.lower() if _HEX64_RE.fullmatch(value) else value


def agent_ref(value: str) -> AgentRef:
    """A reference to an agent: 64 hex (canonical id), ``agtp://<id>[@host]``,
    ``agtp://[agtp.]<domain>/agents/<label>`` (the name ``label.domain``), a
    human-readable name (``label.org_domain`` or an explicit manifest name),
    or another canonical id ANS issued. ValueError when none fits."""
    text = value.strip()
    if (m := _URI_ID_RE.fullmatch(text)) is not None:
        return AgentRef(canonical_id=m.group(1).lower())
    if (m := _URI_AGENT_RE.fullmatch(text)) is not None:
        return AgentRef(name=f"{m.group(2)}.{m.group(1)}".lower())
    if _HEX64_RE.fullmatch(text):
        return AgentRef(canonical_id=text.lower())
    if len(text) <= MAX_NAME and "." in text.rstrip(".") and _NAME_RE.fullmatch(text):
        return AgentRef(name=text.lower().rstrip("."))
    if CANONICAL_ID_RE.fullmatch(text):
        return AgentRef(canonical_id=text)
    raise ValueError(f"{text[:60]!r} is not an agent id, agtp:// URI or name")


def parse_scope(value: str | None) -> AuthorityScope:
    """-09 Appendix "Authority-Scope Format": comma-separated (spaces accepted
    too, as discovery-01's examples write them), two or more segments."""
    if value is None or not value.strip():
        return AuthorityScope(())
    if len(value) > MAX_SCOPE_HEADER:
        raise InvalidAuthorityScope(f"Authority-Scope longer than {MAX_SCOPE_HEADER} bytes")
    parts = [p for p in _SCOPE_SPLIT_RE.split(value.strip()) if p]
    if len(parts) > MAX_SCOPE_TOKENS:
        raise InvalidAuthorityScope(f"Authority-Scope has more than {MAX_SCOPE_TOKENS} tokens")
    seen: dict[ScopeToken, None] = {}
    for p in parts:
        if _SCOPE_TOKEN_RE.fullmatch(p) is None:
            raise InvalidAuthorityScope(
                f"scope token {p[:80]!r} is not lowercase 'domain:action' segments "
                "(comma-separated)"
            )
        domain, _, action = p.rpartition(":")
        seen.setdefault(ScopeToken(domain, action), None)
    return AuthorityScope(tuple(seen))


def parse_identity(headers: Mapping[str, str]) -> Identity | None:
    """``Agent-ID`` + ``Owner-ID`` (+ optional ``Authority-Scope``); None when
    the request carries no identity at all."""
    agent = _header_text(headers, "agent-id")
    owner = _header_text(headers, "owner-id")
    if agent is None and owner is None:
        if headers.get("authority-scope", "").strip():
            raise MissingHeader("Authority-Scope without Agent-ID", code=ErrorCode.MISSING_AGENT_ID)
        return None
    if agent is None:
        raise MissingHeader("Owner-ID without Agent-ID", code=ErrorCode.MISSING_AGENT_ID)
    if owner is None:
        raise MissingHeader(
            "Agent-ID requires Owner-ID (the accountable principal)",
            code=ErrorCode.MISSING_OWNER_ID,
        )
    scope = parse_scope(headers.get("authority-scope"))
    return Identity(
        agent_id=canonical_agent_id(agent),
        principal_id=owner,
        scope=scope,
        session_id=_header_text(headers, "session-id"),
        scope_header=str(scope),  # forwarded to -02 peers: their grammar
    )


def _check_headers(headers: Mapping[str, str]) -> None:
    ctype = media_type(headers)
    if ctype and ctype not in NEWER_ACCEPTED_CONTENT_TYPES:
        raise UnsupportedContentType(
            f"Content-Type {ctype[:60]!r} is not supported; use {NEWER_CONTENT_TYPE}"
        )


def _body(
    method: str, headers: Mapping[str, str], body: bytes, limits: Limits
) -> tuple[dict[str, Any], str | None]:
    """The body object (empty for an empty body) and the request's Task-ID."""
    header_task = _header_text(headers, "task-id", MAX_TASK_ID_LEN)
    if not body:
        return {}, header_task
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
        if not is_task_id(body_task):
            raise BadRequest(
                f"task_id must be 1 to {MAX_TASK_ID_LEN} printable ASCII characters",
                code=ErrorCode.INVALID_TASK_ID,
            )
        if header_task is not None and body_task != header_task:
            raise TaskIdMismatch("the Task-ID header and the body task_id differ")
    return doc, header_task if header_task is not None else body_task


def _unknown(keys: set[str], what: str) -> UnknownBodyField:
    names = ", ".join(sorted(k[:40] for k in keys)[:8])
    return UnknownBodyField(f"{what} ANS does not understand: {names}")


def discover_parameters(doc: Mapping[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The DISCOVER parameters a newer body carries, in discovery-01 names,
    and the path it addresses (a body ``target`` is the reference code's
    legacy spelling of the path)."""
    keys = set(doc)
    target = doc.get("target")
    if target is not None:
        if not isinstance(target, str) or not target.strip():
            raise InvalidBody("target must name a DISCOVER path such as 'agents'")
        from_body = "/" + target.strip().strip("/").lower()
        if path != "/" and path != from_body:
            raise InvalidBody(f"the body target {target[:40]!r} contradicts the path {path[:80]}")
        path = from_body
    # The reference code's flat form: every key outside the envelope is a parameter.
    flat = {k: doc[k] for k in keys - ENVELOPE_KEYS - {"target"}}
    if "parameters" in doc:
        if flat:
            raise _unknown(set(flat), "top-level keys beside 'parameters' (the query goes in it)")
        params = doc["parameters"]
        if not isinstance(params, dict):
            raise InvalidParameter("parameters", "must be a JSON object")
    else:
        params = flat
    return _map_base09(params), path


def _map_base09(params: dict[str, Any]) -> dict[str, Any]:
    """-09 base DISCOVER (``criteria``, ``max_results``, ``filter``) in
    discovery-01 names; a name given twice is 422."""
    if not BASE09_PARAMETERS & set(params):
        return params
    out = {k: v for k, v in params.items() if k not in BASE09_PARAMETERS}

    def put(name: str, value: Any) -> None:
        if name in out:
            raise _unknown({name}, "parameters given twice (-09 and discovery-01 names)")
        out[name] = value

    criteria = params.get("criteria")
    if isinstance(criteria, str):
        put("intent", criteria)
    elif isinstance(criteria, dict):
        for k, v in criteria.items():
            put(k, v)
    elif criteria is not None:
        raise InvalidParameter("intent", "criteria must be a string or an object")
    if "max_results" in params:
        put("limit", params["max_results"])
    flt = params.get("filter")
    if flt is not None:
        if not isinstance(flt, dict):
            raise InvalidParameter("parameters", "filter must be a JSON object")
        for k, v in flt.items():
            put(k, v)
    return out


def _names(text: str) -> str | None:
    """What an agent reference names (its canonical id, else its name); None
    when it is no reference (refused later, where it is read)."""
    try:
        ref = agent_ref(text)
    except ValueError:
        return None
    return ref.canonical_id or ref.name


def name_parameter(params: Mapping[str, Any]) -> AgentRef | None:
    raw = params.get("name")
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise InvalidParameter("name", "must be a string")
    try:
        return agent_ref(raw)
    except ValueError as exc:
        raise InvalidParameter("name", str(exc)) from None


def parse_discover(
    headers: Mapping[str, str], body: bytes, limits: Limits, target: str | None
) -> NewerDiscover:
    """A newer-dialect DISCOVER (see the module docstring)."""
    _check_headers(headers)
    identity = parse_identity(headers)
    fed_path, budget = parse_federation_headers(headers)
    doc, task_id = _body("DISCOVER", headers, body, limits)
    with answering(task_id):
        params, path = discover_parameters(doc, split_target(target)[0])
        if path not in DISCOVER_PATHS:
            raise NotFound(
                f"DISCOVER {path[:80]} is not served here; use / or /agents",
                code=ErrorCode.UNKNOWN_PATH,
            )
        has_query = bool(CRITERIA & set(params))
        if identity is None:
            return NewerDiscover(None, task_id, has_query, None)
        if not has_query:
            raise MissingQuery(
                "DISCOVER needs a criterion (intent, capability_domains, name, org_domain, "
                "governance_zone, trust_tier_min, ...); ANS does not list its whole index"
            )
        name = name_parameter(params)
    try:
        digest: str | None = query_digest(params)
    except InvalidParameter:
        digest = None
    with answering(task_id, digest):
        parsed = parse_discover_params(params, limits)
        if digest is None:
            digest = query_digest(params)
    req = DiscoverRequest(
        identity=identity,
        task_id=task_id,
        params=parsed,
        query_digest=digest,
        raw_parameters=params,
        federation_path=fed_path,
        federation_budget_ms=budget,
    )
    return NewerDiscover(req, task_id, True, name)


def parse_describe(
    headers: Mapping[str, str], body: bytes, limits: Limits, target: str | None
) -> NewerDescribe:
    """A newer-dialect DESCRIBE. The agent described is named by (first
    found) ``Target-Agent``, the path ``/agents/{name-or-id}``, the body's
    ``canonical_id`` / ``agent_id`` / ``name``; or, in a DESCRIBE that carries
    ``Agent-ID`` and no other identity header, by that ``Agent-ID`` (how the
    reference client's first version asks); none: this ANS itself."""
    _check_headers(headers)
    path = split_target(target)[0]
    ref_text: str | None = _header_text(headers, "target-agent")
    header_named = ref_text is not None
    lone_agent_id = (
        ref_text is None
        and "owner-id" not in headers
        and not headers.get("authority-scope", "").strip()
        and _header_text(headers, "agent-id") is not None
    )
    identity = None if lone_agent_id else parse_identity(headers)
    doc, task_id = _body("DESCRIBE", headers, body, limits)
    with answering(task_id):
        if unknown := set(doc) - ENVELOPE_KEYS:
            raise _unknown(unknown, "top-level body keys")
        params = doc.get("parameters", {})
        if not isinstance(params, dict):
            raise InvalidParameter("parameters", "must be a JSON object")
        if unknown := set(params) - DESCRIBE_PARAMETERS:
            raise _unknown(unknown, "DESCRIBE parameters")
        if path.startswith("/agents/"):
            named = path[len("/agents/") :]
            if ref_text is None:
                ref_text = named
            elif _names(named) != _names(ref_text):
                raise InvalidHeader(
                    "Target-Agent and the request path name different agents",
                    code=ErrorCode.INVALID_TARGET_AGENT,
                )
        elif path != "/":
            raise NotFound(
                f"DESCRIBE {path[:80]} is not served here; use / or /agents/{{name-or-id}}",
                code=ErrorCode.UNKNOWN_PATH,
            )
        for key in ("canonical_id", "agent_id", "name"):
            value = params.get(key)
            if ref_text is None and value is not None:
                if not isinstance(value, str):
                    raise InvalidParameter("canonical_id", f"{key} must be a string")
                ref_text = value
        if ref_text is None and lone_agent_id:
            ref_text = _header_text(headers, "agent-id")
        ref: AgentRef | None = None
        if ref_text is not None:
            try:
                ref = agent_ref(ref_text)
            except ValueError as exc:
                if header_named:
                    raise InvalidHeader(str(exc), code=ErrorCode.INVALID_TARGET_AGENT) from None
                raise InvalidParameter("canonical_id", str(exc)) from None
    req = DescribeRequest(
        identity=identity,
        task_id=task_id,
        # a name stands in for the id until it is resolved (behind the gate)
        canonical_id=(ref.canonical_id or ref.name) if ref else None,
    )
    return NewerDescribe(req, ref)


__all__ = [
    "AgentRef",
    "NewerDescribe",
    "NewerDiscover",
    "agent_ref",
    "canonical_agent_id",
    "discover_parameters",
    "name_parameter",
    "parse_describe",
    "parse_discover",
    "parse_identity",
    "parse_scope",
    "split_target",
]
