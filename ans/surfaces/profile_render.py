"""The profile binding's messages, as pure functions: the request rule of
the binding (``query`` required), one agent as a profile object (GET), and
the signatures: an answer or a discover refusal signed with the ANS key the
way results are (``ans_signature``: a detached ES256 JWS over the RFC 8785
bytes of the object without that field).

The Discovery Response itself is the core's translation
(:func:`ans.core.profile_view.profile_response`); nothing is recomputed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ans.governance.keys import SigningKey
from ans.governance.profile_metadata import bindings_of
from ans.governance.signing import RESULT_SIGNATURE_FIELD, sign_document
from ans.protocol.errors import AgtpError, BadRequest, ErrorCode


def require_query(doc: Mapping[str, Any]) -> None:
    """The profile makes ``query`` a MUST (section 5.1): a request object
    without a non-blank ``query`` (or its AGTP name ``intent``) is a 400. The
    object itself goes to the core unchanged: it is the DISCOVER parameters
    (``query`` is the core's alias of ``intent``)."""
    for name in ("query", "intent"):
        text = doc.get(name)
        if isinstance(text, str) and text.strip():
            return
        if text is not None and not isinstance(text, str):
            return  # a wrong type: the core names it (invalid_query / invalid_intent)
    raise BadRequest(
        "query is required: a natural-language intent or task description",
        code=ErrorCode.INVALID_QUERY,
    )


def agent_object(described: Mapping[str, Any], generated_at: str) -> dict[str, Any]:
    """One agent (DESCRIBE's manifest and capability document) as a profile
    object: its candidate fields (``id``: the declared profile id, else the
    canonical id; ``name``, ``description``, ``bindings``, ``status``), its
    trust (``trust_tier``, ``governed``), and the complete manifest and
    capability document (unknown fields kept)."""
    manifest = described["manifest"]
    caps = described.get("capabilities")
    caps = caps if isinstance(caps, Mapping) else {}
    declared = caps.get("id")
    return {
        "id": declared if isinstance(declared, str) else manifest["canonical_id"],
        "name": caps.get("name", manifest["agent_label"]),
        "description": caps.get("description", manifest["job_description"]),
        "bindings": bindings_of(manifest, caps),
        "status": caps.get("status", "active"),
        "canonical_id": manifest["canonical_id"],
        "trust_tier": manifest["trust_tier"],
        "governed": not isinstance(manifest.get("self_asserted"), Mapping),
        "generated_at": generated_at,
        "manifest": manifest,
        "capabilities": dict(caps),
    }


def signed_document(doc: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """``doc`` with ``ans_signature`` over the JCS of the rest."""
    signed: dict[str, Any] = sign_document(doc, key, RESULT_SIGNATURE_FIELD)
    return signed


def signed_error(
    body: Mapping[str, Any],
    status: int,
    generated_at: str,
    key: SigningKey,
    exc: AgtpError | None,
) -> dict[str, Any]:
    """A discover refusal's body with its error object signed (as AGTP signs
    a DISCOVER refusal): the object also names the HTTP ``status``, when it
    was made and, once the request parsed, its ``query_digest``."""
    error = dict(body["error"])
    error["status"] = status
    error["generated_at"] = generated_at
    if exc is not None and exc.query_digest is not None:
        error["query_digest"] = exc.query_digest
    return {"error": signed_document(error, key)}
