"""The profile binding's messages, as pure functions: a profile request
object to DISCOVER parameters, and the core's signed DISCOVER result to a
profile Discovery Response (draft-xu section 6), signed again over its own
bytes with the same key and in the same way (``ans_signature``: a detached
ES256 JWS over the RFC 8785 bytes of the object without that field).

Nothing is recomputed here: the candidates, scores, evidence and filters are
the core's; this module renames (``results`` -> ``candidates``,
``query_id`` -> ``request_id``, ``rank_score`` -> ``score``) and keeps every
other field the core returned, so the profile answer says no less than the
AGTP one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ans.governance.keys import SigningKey
from ans.governance.signing import RESULT_SIGNATURE_FIELD, sign_document, signature_object
from ans.protocol.errors import AgtpError, BadRequest, ErrorCode
from ans.protocol.jcs import canonicalize

# The response fields of draft-xu section 6.1, in the order they are written.
RESPONSE_FIELDS = (
    "request_id",
    "candidates",
    "applied_filters",
    "unsupported_filters",
    "warnings",
    "generated_at",
)
# Result fields the rename replaces (they are not repeated under the old name).
_RENAMED_RESULT = {"query_id", "results", "ans_signature"}


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


def candidate(item: Mapping[str, Any]) -> dict[str, Any]:
    """A profile candidate from one DISCOVER result item: ``id``, ``name``,
    ``description``, ``bindings``, ``status``, ``score`` first, then every
    other field of the item as the core wrote it."""
    out: dict[str, Any] = {
        "id": item.get("id", item.get("canonical_id")),
        "name": item.get("name", item.get("agent_label")),
        "description": item.get("description", item.get("job_description")),
        "bindings": item.get("bindings", []),
        "status": item.get("status", "active"),
        "score": item.get("score", item.get("rank_score")),
    }
    for key, value in item.items():
        if key not in out and key not in ("rank_score",):
            out[key] = value
    return out


def warning_text(warning: Any) -> str:
    """A profile warning is a string; a structured core warning (federation:
    ``code``, ``peer``, ``message``) is written as one."""
    if isinstance(warning, str):
        return warning
    if isinstance(warning, Mapping):
        parts = [str(warning.get("code", "warning"))]
        if warning.get("peer"):
            parts.append(f"peer {warning['peer']}")
        text = ": ".join(parts)
        return f"{text}: {warning['message']}" if warning.get("message") else text
    return str(warning)


def discovery_response(result: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """The profile Discovery Response for the core's DISCOVER ``result``,
    signed with ``key``. The fields of 6.1 come first; the core's other
    result fields (``query_digest``, ``total_matches``, ``returned``,
    ``ranking``, ``relevance``, ``federation_path``, ``routing``, ...) follow
    unchanged, inside the signature."""
    response: dict[str, Any] = {
        "request_id": result["query_id"],
        "candidates": [candidate(item) for item in result.get("results", [])],
        "applied_filters": result.get("applied_filters", {}),
        "unsupported_filters": list(result.get("unsupported_filters", [])),
        "warnings": [warning_text(w) for w in result.get("warnings", [])],
        "generated_at": result["generated_at"],
    }
    for name, value in result.items():
        if name not in response and name not in _RENAMED_RESULT:
            response[name] = value
    if result.get("warnings") and any(not isinstance(w, str) for w in result["warnings"]):
        response["federation_warnings"] = result["warnings"]
    response[RESULT_SIGNATURE_FIELD] = signature_object(canonicalize(response), key)
    return response


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
