"""HAIDIP's error model (draft-cui section 5: ``{"error": {"code",
"message"}}`` with HTTP statuses): one mapping from the core's
:class:`AgtpError` to a HAIDIP code and status.

Each HAIDIP code has exactly one HTTP status (:data:`HAIDIP_STATUS`); the
AGTP status and code of a failure pick the HAIDIP code
(:func:`haidip_code`). The object also carries ``correlation_id`` and
``detail`` (the core's own code, which names the field or check). An
unexpected exception is never a 500: it is logged and answered 503
``Unavailable``. The codes are documented in docs/haidip.md.
"""

from __future__ import annotations

from enum import StrEnum

from ans.protocol.errors import AgtpError, BadRequest, ErrorCode

from .rest_errors import RestError, bounded_message, code_of, kept_headers, with_retry_after


class HaidipCode(StrEnum):
    """The HAIDIP error codes this ANS answers with."""

    INVALID_INPUT = "InvalidInput"
    UNAUTHORIZED = "Unauthorized"
    FORBIDDEN = "Forbidden"
    NOT_FOUND = "NotFound"
    METHOD_NOT_ALLOWED = "MethodNotAllowed"
    REQUEST_TIMEOUT = "RequestTimeout"
    CONFLICT = "Conflict"
    GONE = "Gone"
    PAYLOAD_TOO_LARGE = "PayloadTooLarge"
    UNSUPPORTED_MEDIA_TYPE = "UnsupportedMediaType"
    INVALID_CARD = "InvalidCard"
    RATE_LIMITED = "RateLimited"
    AGENT_ERROR = "AgentError"
    AGENT_SUSPENDED = "AgentSuspended"
    UNAVAILABLE = "Unavailable"
    AGENT_TIMEOUT = "AgentTimeout"


HAIDIP_STATUS: dict[HaidipCode, int] = {
    HaidipCode.INVALID_INPUT: 400,
    HaidipCode.UNAUTHORIZED: 401,
    HaidipCode.FORBIDDEN: 403,
    HaidipCode.NOT_FOUND: 404,
    HaidipCode.METHOD_NOT_ALLOWED: 405,
    HaidipCode.REQUEST_TIMEOUT: 408,
    HaidipCode.CONFLICT: 409,
    HaidipCode.GONE: 410,
    HaidipCode.PAYLOAD_TOO_LARGE: 413,
    HaidipCode.UNSUPPORTED_MEDIA_TYPE: 415,
    HaidipCode.INVALID_CARD: 422,
    HaidipCode.RATE_LIMITED: 429,
    HaidipCode.AGENT_ERROR: 502,
    HaidipCode.AGENT_SUSPENDED: 503,
    HaidipCode.UNAVAILABLE: 503,
    HaidipCode.AGENT_TIMEOUT: 504,
}

# Core codes whose HAIDIP code is not the one their AGTP status implies.
_BY_CODE: dict[str, HaidipCode] = {
    ErrorCode.BODY_TOO_LARGE: HaidipCode.PAYLOAD_TOO_LARGE,
    ErrorCode.UNSUPPORTED_CONTENT_TYPE: HaidipCode.UNSUPPORTED_MEDIA_TYPE,
    ErrorCode.UNSUPPORTED_METHOD: HaidipCode.METHOD_NOT_ALLOWED,
    ErrorCode.MISSING_AGENT_ID: HaidipCode.UNAUTHORIZED,
    ErrorCode.MISSING_PRINCIPAL_ID: HaidipCode.UNAUTHORIZED,
    ErrorCode.MISSING_AUTHORITY_SCOPE: HaidipCode.UNAUTHORIZED,
    ErrorCode.INVALID_CAPABILITIES: HaidipCode.INVALID_CARD,
    ErrorCode.REQUEST_TIMEOUT: HaidipCode.REQUEST_TIMEOUT,
    # (invoke) the agent declares no endpoint the gateway may call: the
    # agent's side, not the caller's input
    ErrorCode.NOT_INVOCABLE: HaidipCode.AGENT_ERROR,
}

_BY_STATUS: dict[int, HaidipCode] = {
    400: HaidipCode.INVALID_INPUT,
    401: HaidipCode.UNAUTHORIZED,
    404: HaidipCode.NOT_FOUND,
    408: HaidipCode.REQUEST_TIMEOUT,
    409: HaidipCode.CONFLICT,
    410: HaidipCode.GONE,
    422: HaidipCode.INVALID_INPUT,
    429: HaidipCode.RATE_LIMITED,
    451: HaidipCode.FORBIDDEN,  # scope violation
    453: HaidipCode.FORBIDDEN,  # zone violation
    500: HaidipCode.UNAVAILABLE,
    502: HaidipCode.AGENT_ERROR,
    503: HaidipCode.UNAVAILABLE,
    504: HaidipCode.AGENT_TIMEOUT,
}


HaidipError = RestError  # one HAIDIP error answer: HTTP status, body object, headers


def haidip_code(exc: AgtpError) -> HaidipCode:
    """The HAIDIP code of a core failure (its code first, then its status)."""
    if exc.code == ErrorCode.AGENT_SUSPENDED:
        # DESCRIBE of a Suspended agent (503); a registration of one is a conflict
        return HaidipCode.CONFLICT if exc.status == 409 else HaidipCode.AGENT_SUSPENDED
    return code_of(exc, _BY_CODE, _BY_STATUS, HaidipCode.INVALID_INPUT, HaidipCode.UNAVAILABLE)


def haidip_error(exc: AgtpError, correlation_id: str) -> HaidipError:
    """``{"error": {"code", "message", "correlation_id", "detail"}}`` and its
    status; ``Retry-After`` / ``WWW-Authenticate`` / ``Allow`` kept."""
    code = haidip_code(exc)
    status = HAIDIP_STATUS[code]
    headers = kept_headers(exc)
    if status == 503:
        headers = with_retry_after(headers)
    error = {
        "code": str(code),
        "message": bounded_message(exc.message),
        "correlation_id": correlation_id[:128],
        "detail": str(exc.code),
    }
    return HaidipError(status, {"error": error}, headers)


def wrong_method(method: str, allowed: str) -> BadRequest:
    """405 ``MethodNotAllowed`` (``Allow`` names what the route serves)."""
    return BadRequest(
        f"method {method[:16]} is not allowed here; use {allowed}",
        code=ErrorCode.UNSUPPORTED_METHOD,
        headers=(("allow", allowed),),
    )
