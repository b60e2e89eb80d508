"""Signed DISCOVER refusals (discovery draft 3.4 and 7.1: every DISCOVER
response is signed, and a client rejects an unsigned one).

A DISCOVER error answer keeps the AGTP envelope ``{"status", "task_id",
"error"}``; its ``error`` object is signed as a result is, with the ANS key
(``ans_signature``, a detached ES256 JWS over the RFC 8785 bytes of the
error object without that field). The object covers what a forger would
want to change: the code and message, the status, the Task-ID, when it was
made, the query it refuses once the parameters parsed, and on a 429 the
``Retry-After`` seconds. See docs/wire-contract.md, "Signed refusals".

:func:`check_refusal` is the client side: it verifies the signature against
the ANS keys and the binding to the request that was sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ans.governance.keys import SigningKey
from ans.governance.signing import (
    RESULT_SIGNATURE_FIELD,
    KeyLookup,
    sign_document,
    verify_document,
)
from ans.protocol.errors import AgtpError, ErrorCode, SignatureInvalid, UnsignedResponse
from ans.protocol.messages import query_digest

# The methods whose refusals are signed: every DISCOVER answer is.
SIGNED_METHODS = frozenset({"DISCOVER"})


def refusal_object(exc: AgtpError, task_id: str | None, generated_at: str) -> dict[str, Any]:
    """The error object of a DISCOVER refusal, before signing: ``code``,
    ``message``, ``status``, ``task_id`` (null when unknown) and
    ``generated_at``; ``query_digest`` once the parameters parsed;
    ``retry_after`` (seconds) when the answer carries ``Retry-After``."""
    error: dict[str, Any] = {
        "code": str(exc.code),  # the ErrorCode's value: a plain str keeps JCS on its fast path
        "message": exc.message,
        "status": exc.status,
        "task_id": task_id,
        "generated_at": generated_at,
    }
    if exc.query_digest is not None:
        error["query_digest"] = exc.query_digest
    for name, value in exc.headers:
        if name == "retry-after" and value.isdigit():
            error["retry_after"] = int(value)
    return error


def sign_refusal(error: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """``error`` with ``ans_signature`` over the JCS of the rest."""
    signed: dict[str, Any] = sign_document(error, key, RESULT_SIGNATURE_FIELD)
    return signed


def check_refusal(
    status: int,
    body: Mapping[str, Any],
    keys: KeyLookup,
    *,
    task_id: str | None,
    parameters: Mapping[str, Any] | None = None,
) -> str:
    """Verify the signed error object of a DISCOVER refusal answered with
    HTTP ``status`` to a request with ``task_id`` (and ``parameters``); return
    the signing kid. Raises :class:`UnsignedResponse` when there is no
    signature, :class:`SignatureInvalid` when it does not verify or the
    signed object does not match the answer or the request."""
    error = body.get("error")
    if not isinstance(error, Mapping) or RESULT_SIGNATURE_FIELD not in error:
        raise UnsignedResponse(f"the {status} DISCOVER refusal is not signed; rejected")
    kid = str(verify_document(error, keys, RESULT_SIGNATURE_FIELD))
    if error.get("status") != status or body.get("status") != status:
        raise SignatureInvalid(
            f"the signed refusal says status {error.get('status')!r}, the answer {status}",
            code=ErrorCode.REFUSAL_MISMATCH,
        )
    if error.get("task_id") != task_id:
        raise SignatureInvalid(
            "the signed refusal is for another task_id", code=ErrorCode.REFUSAL_MISMATCH
        )
    digest = error.get("query_digest")
    if digest is not None and parameters is not None and digest != query_digest(parameters):
        raise SignatureInvalid(
            "the signed refusal's query_digest does not match the parameters sent",
            code=ErrorCode.DIGEST_MISMATCH,
        )
    return kid
