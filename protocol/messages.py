"""Typed AGTP requests (DISCOVER, DESCRIBE, ACTIVATE) built from
(method, headers, body bytes), and the response/error body encoders.

Header names arrive lowercase (HTTP/2 rules); values are validated and
bounded. Parameter validation raises :class:`InvalidParameter` (422) whose
code names the parameter.

This module owns DESCRIBE, ACTIVATE and LIFECYCLE parsing and ``PARSERS``
(method -> parser), and re-exports the names callers import from it: the
request types and bounds (``request_types.py``), the envelope and encoders
(``envelope.py``), DISCOVER parsing (``discover_request.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from .discover_request import (
    parse_discover,
    parse_discover_params,
    parse_federation_headers,
    query_digest,
)
from .envelope import (
    Envelope,
    answering,
    check_envelope_headers,
    encode_error,
    encode_result,
    has_identity,
    is_task_id,
    parse_envelope,
    parse_identity,
    task_id_hint,
)
from .errors import ErrorCode, InvalidHeader, InvalidParameter, UnknownBodyField
from .haidip_cards import with_card
from .newer import agent_ref
from .request_types import (
    ACCEPTED_CONTENT_TYPES,
    AGTP_VERSION,
    ANS_ID_RE,
    CANONICAL_ID_RE,
    CAPABILITY_DOMAINS,
    CONTENT_TYPE,
    FEDERATION_BUDGET_HEADER,
    FEDERATION_PATH_HEADER,
    MAX_DOMAIN_NAMES,
    MAX_FEDERATION_BUDGET_MS,
    MAX_FEDERATION_PATH,
    MAX_ID_LEN,
    MAX_INTENT_LEN,
    MAX_TASK_ID_LEN,
    ORG_DOMAIN_RE,
    SUPPORTED_METHODS,
    ZONE_RE,
    ActivateRequest,
    AgtpRequest,
    DescribeRequest,
    DiscoverParams,
    DiscoverRequest,
    Identity,
    LifecycleRequest,
    Limits,
)

# -- DESCRIBE / ACTIVATE -------------------------------------------------------------


# What a DESCRIBE's parameters may name (no parameter: this ANS itself).
DESCRIBE_PARAMETERS = frozenset({"canonical_id", "name", "agent_id"})


def parse_describe(headers: Mapping[str, str], body: bytes, limits: Limits) -> DescribeRequest:
    check_envelope_headers(headers)
    identity = parse_identity(headers) if has_identity(headers) else None
    env = parse_envelope("DESCRIBE", headers, body, limits)
    cid = env.parameters.get("canonical_id")
    with answering(env.task_id):
        # An agent named some other way than these must never get this ANS's
        # own manifest (the answer to DESCRIBE without parameters).
        unknown = sorted(set(env.parameters) - DESCRIBE_PARAMETERS)
        if unknown:
            raise UnknownBodyField(
                f"{unknown[0][:40]}: DESCRIBE takes canonical_id, name or agent_id "
                "(or Target-Agent)"
            )
        if cid is not None and (
            not isinstance(cid, str) or CANONICAL_ID_RE.fullmatch(cid) is None
        ):
            raise InvalidParameter(
                "canonical_id", "must be an identifier of at most 256 characters"
            )
        for key in ("name", "agent_id"):  # as the newer dialect's DESCRIBE takes them
            raw = env.parameters.get(key)
            if raw is None:
                continue
            if not isinstance(raw, str):
                raise InvalidParameter("name", f"{key} must be a string")
            try:
                ref = agent_ref(raw)
            except ValueError as exc:
                raise InvalidParameter("name", f"{key}: {exc}") from None
            named = ref.canonical_id or ref.name
            if cid is not None and cid != named:
                raise InvalidParameter("name", f"{key} and canonical_id name different agents")
            cid = named
    target = headers.get("target-agent")
    if target is not None and target.strip():
        # The reference client names the agent in Target-Agent: never ignored
        # (that answered this ANS's own manifest for any agent named).
        with answering(env.task_id):
            try:
                ref = agent_ref(target)
            except ValueError as exc:
                raise InvalidHeader(str(exc), code=ErrorCode.INVALID_TARGET_AGENT) from None
            named = ref.canonical_id or ref.name
            if cid is not None and cid != named:
                raise InvalidHeader(
                    "Target-Agent and canonical_id name different agents",
                    code=ErrorCode.INVALID_TARGET_AGENT,
                )
            cid = named
    return DescribeRequest(identity=identity, task_id=env.task_id, canonical_id=cid)


def parse_activate(headers: Mapping[str, str], body: bytes, limits: Limits) -> ActivateRequest:
    check_envelope_headers(headers)
    identity = parse_identity(headers)
    env = parse_envelope("ACTIVATE", headers, body, limits)
    manifest = env.parameters.get("manifest")
    caps = env.parameters.get("capabilities", {})
    # The efficient-discovery profile's agent metadata (draft-xu 4, a D0 object
    # of 13.1): its fields become the capability document's (unknown ones
    # kept); a field also in ``capabilities`` keeps the capabilities' value.
    metadata = env.parameters.get("metadata")
    with answering(env.task_id):
        if not isinstance(manifest, dict):
            raise InvalidParameter(
                "manifest", "a complete signed Agent Manifest Document is required"
            )
        if not isinstance(caps, dict):
            raise InvalidParameter("capabilities", "must be a DESCRIBE Capability Document object")
        if metadata is not None:
            if not isinstance(metadata, dict):
                raise InvalidParameter("capabilities", "metadata must be an agent metadata object")
            caps = {**metadata, **caps}
        # A HAIDIP or A2A agent card (protocol/haidip_cards.py): its
        # capability fields, under the document's own; the card is kept.
        card = env.parameters.get("agent_card")
        if card is not None:
            caps = with_card(caps, card)
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

__all__ = [
    "ACCEPTED_CONTENT_TYPES",
    "AGTP_VERSION",
    "ANS_ID_RE",
    "CANONICAL_ID_RE",
    "CAPABILITY_DOMAINS",
    "CONTENT_TYPE",
    "FEDERATION_BUDGET_HEADER",
    "FEDERATION_PATH_HEADER",
    "MAX_DOMAIN_NAMES",
    "MAX_FEDERATION_BUDGET_MS",
    "MAX_FEDERATION_PATH",
    "MAX_ID_LEN",
    "MAX_INTENT_LEN",
    "MAX_TASK_ID_LEN",
    "ORG_DOMAIN_RE",
    "PARSERS",
    "SUPPORTED_METHODS",
    "ZONE_RE",
    "ActivateRequest",
    "AgtpRequest",
    "DescribeRequest",
    "DiscoverParams",
    "DiscoverRequest",
    "Envelope",
    "Identity",
    "LifecycleRequest",
    "Limits",
    "answering",
    "check_envelope_headers",
    "encode_error",
    "encode_result",
    "has_identity",
    "is_task_id",
    "parse_activate",
    "parse_describe",
    "parse_discover",
    "parse_discover_params",
    "parse_envelope",
    "parse_federation_headers",
    "parse_identity",
    "parse_lifecycle",
    "query_digest",
    "task_id_hint",
]
