"""The MCP registry's error object (seed 002 section 8.3), from the one error
hierarchy (:class:`~ans.protocol.errors.AgtpError`).

``{"error": {"code": "Err...", "message", "retry_after", "detail",
"protocol_version"}}`` with an HTTP status. ``code`` is one of the seed's
names (``ErrMalformedPayload`` 400, ``ErrAuth`` 401, ``ErrForbidden`` 403,
``ErrDuplicateID`` 409) or this registry's additions for what the seed does
not name (``ErrUnsupportedVersion`` 400 with ``supported_versions``,
``ErrNotFound`` 404, ``ErrConflict`` 409, ``ErrGone`` 410, ``ErrRateLimited``
429, ``ErrUnavailable`` 503); ``detail`` is the core's own code
(``invalid_mcp_message``, ``token_expired``, ``scope_violation``...),
``retry_after`` the seed's "Retry" column in seconds (null: do not retry
as is). An AGTP scope (451) or zone (453) refusal is ``ErrForbidden``.
"""

from __future__ import annotations

from typing import Any

from ans.protocol.errors import AgtpError, ErrorCode
from ans.protocol.mcp_errors import McpUnsupportedVersion

from ..surfaces.rest_errors import RestError, bounded_message, kept_headers, with_retry_after

# HTTP status -> (Err code, seconds before a retry as the seed says, or None).
_BY_STATUS: dict[int, tuple[str, int | None]] = {
    400: ("ErrMalformedPayload", 5),
    408: ("ErrMalformedPayload", 5),
    413: ("ErrMalformedPayload", 5),
    422: ("ErrMalformedPayload", 5),
    401: ("ErrAuth", 30),
    403: ("ErrForbidden", None),
    451: ("ErrForbidden", None),
    453: ("ErrForbidden", None),
    404: ("ErrNotFound", None),
    409: ("ErrConflict", None),
    410: ("ErrGone", None),
    429: ("ErrRateLimited", 1),
    500: ("ErrUnavailable", 1),
    503: ("ErrUnavailable", 1),
}
# The HTTP status each AGTP status is answered with on this surface.
_HTTP_STATUS = {408: 400, 413: 400, 422: 400, 451: 403, 453: 403, 500: 503}


McpError = RestError  # one registry error answer: HTTP status, body object, headers


def mcp_error(exc: AgtpError, protocol_version: str | None) -> McpError:
    """The registry's error answer for ``exc``, in the client's version."""
    if exc.code == ErrorCode.DUPLICATE_ID:
        name, retry = "ErrDuplicateID", None
    elif isinstance(exc, McpUnsupportedVersion):
        name, retry = "ErrUnsupportedVersion", None
    else:
        fallback = ("ErrMalformedPayload", 5) if exc.status < 500 else ("ErrUnavailable", 1)
        name, retry = _BY_STATUS.get(exc.status, fallback)
    status = _HTTP_STATUS.get(exc.status, exc.status if 400 <= exc.status < 600 else 400)
    headers = kept_headers(exc)
    for n, v in headers:
        if n == "retry-after" and v.isdigit():
            retry = int(v)
    if status == 503:
        headers = with_retry_after(headers, retry or 1)
    error: dict[str, Any] = {
        "code": name,
        "message": bounded_message(exc.message),
        "retry_after": retry,
        "detail": str(exc.code),
        "protocol_version": protocol_version,
    }
    if isinstance(exc, McpUnsupportedVersion):
        error["supported_versions"] = list(exc.supported)
    return McpError(status, {"error": error}, headers)
