"""The efficient-discovery profile's error model (draft-xu section 12) on its
JSON binding: one mapping from the core's :class:`AgtpError` to
``{"error": {"code", "message", "correlation_id", "retry_after"}}`` and an
HTTP status.

Each profile code has exactly one HTTP status (:data:`PROFILE_STATUS`); the
AGTP status and code of the failure pick the profile code
(:func:`profile_code`). ``unavailable`` (503) is this binding's one code
beyond the draft's list: the service, not the request, failed (storage full,
an internal error); a client retries after ``retry_after`` seconds. An
unexpected exception never reaches the wire as a 500 or a traceback: it is
logged and answered 503 ``unavailable``.
"""

from __future__ import annotations

from enum import StrEnum

from ans.protocol.errors import AgtpError, ErrorCode

from .rest_errors import (
    MAX_MESSAGE_CHARS,
    UNAVAILABLE_RETRY_AFTER,
    RestError,
    bounded_message,
    code_of,
    kept_headers,
)

__all__ = ["MAX_MESSAGE_CHARS", "ProfileCode", "ProfileError", "profile_code", "profile_error"]


class ProfileCode(StrEnum):
    """The profile's error codes (draft-xu Table 12) and ``unavailable``."""

    INVALID_REQUEST = "invalid_request"
    UNSUPPORTED_FILTER = "unsupported_filter"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    STALE_METADATA = "stale_metadata"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"


PROFILE_STATUS: dict[ProfileCode, int] = {
    ProfileCode.INVALID_REQUEST: 400,
    ProfileCode.UNSUPPORTED_FILTER: 400,
    ProfileCode.UNAUTHORIZED: 401,
    ProfileCode.FORBIDDEN: 403,
    ProfileCode.NOT_FOUND: 404,
    ProfileCode.CONFLICT: 409,
    ProfileCode.STALE_METADATA: 410,
    ProfileCode.RATE_LIMITED: 429,
    ProfileCode.UNAVAILABLE: 503,
}

# Core codes whose profile code is not the one their AGTP status implies.
_BY_CODE: dict[str, ProfileCode] = {
    # The core could not apply a hard filter the caller insisted on.
    "unsupported_filter": ProfileCode.UNSUPPORTED_FILTER,
    # A re-registration older than the stored record (AGTP 409).
    ErrorCode.STALE_METADATA: ProfileCode.STALE_METADATA,
    # GET of a Suspended agent (AGTP DESCRIBE answers 503): the record is
    # withdrawn, not the service; on a registration (AGTP 409) it stays a conflict.
    ErrorCode.AGENT_SUSPENDED: ProfileCode.STALE_METADATA,
}

# AGTP status -> profile code, for every other failure.
_BY_STATUS: dict[int, ProfileCode] = {
    400: ProfileCode.INVALID_REQUEST,
    408: ProfileCode.INVALID_REQUEST,  # the body did not arrive in time
    422: ProfileCode.INVALID_REQUEST,
    401: ProfileCode.UNAUTHORIZED,
    451: ProfileCode.FORBIDDEN,  # scope violation
    453: ProfileCode.FORBIDDEN,  # zone violation
    404: ProfileCode.NOT_FOUND,
    409: ProfileCode.CONFLICT,
    410: ProfileCode.STALE_METADATA,  # Revoked / Deprecated: the record is retired
    429: ProfileCode.RATE_LIMITED,
    500: ProfileCode.UNAVAILABLE,
    503: ProfileCode.UNAVAILABLE,
}


ProfileError = RestError  # one profile error answer: HTTP status, body object, headers


def profile_code(exc: AgtpError) -> ProfileCode:
    """The profile code of a core failure (AGTP status and code)."""
    if exc.code == ErrorCode.AGENT_SUSPENDED and exc.status == 409:
        return ProfileCode.CONFLICT  # a registration of a Suspended agent
    return code_of(exc, _BY_CODE, _BY_STATUS, ProfileCode.INVALID_REQUEST, ProfileCode.UNAVAILABLE)


def retry_after_of(exc: AgtpError) -> int | None:
    for name, value in exc.headers:
        if name == "retry-after" and value.isdigit():
            return int(value)
    return None


def profile_error(exc: AgtpError, correlation_id: str) -> ProfileError:
    """The profile's error object for ``exc``: ``code``, a bounded
    ``message``, ``correlation_id`` (the request's), ``retry_after`` (seconds,
    or null), and ``detail``: the core's own code, which names the field or
    check (``invalid_limit``, ``token_expired``, ``scope_violation``, ...).
    Headers the core attached (``Retry-After``, ``WWW-Authenticate``) are kept."""
    code = profile_code(exc)
    status = PROFILE_STATUS[code]
    retry_after = retry_after_of(exc)
    headers = kept_headers(exc)
    if code is ProfileCode.UNAVAILABLE and retry_after is None:
        retry_after = UNAVAILABLE_RETRY_AFTER
        headers = (*headers, ("retry-after", str(retry_after)))
    error = {
        "code": str(code),
        "message": bounded_message(exc.message),
        "correlation_id": correlation_id,
        "retry_after": retry_after,
        "detail": str(exc.code),
    }
    return ProfileError(status, {"error": error}, headers)
