"""The invocation gateway's error answers: one mapping from the core's
:class:`AgtpError` to HAIDIP's ``{"error": {"code", "message"}}`` (seed 003
section 4.3) and an HTTP status.

HTTP statuses, not AGTP ones: a scope (451) or zone (453) refusal is 403
``forbidden`` (451 means "unavailable for legal reasons" to an HTTP client);
an over-size body 413 ``payload_too_large``; a wrong method 405; a wrong
Content-Type 415. The upstream failures keep their own codes
(``upstream_unreachable``, ``upstream_too_large`` 502; ``upstream_timeout``
504), as do ``not_invocable`` (422), ``agent_suspended`` (503) and
``agent_retired`` (410). Anything unexpected is 503 ``unavailable`` (logged,
never a traceback on the wire). Messages are bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ans.protocol.errors import AgtpError, ErrorCode

MAX_MESSAGE_CHARS = 300
KEPT_HEADERS = frozenset({"retry-after", "www-authenticate", "allow"})

# Core codes answered with their own HAIDIP code and status.
_BY_CODE: dict[str, tuple[int, str]] = {
    ErrorCode.BODY_TOO_LARGE: (413, "payload_too_large"),
    ErrorCode.UNSUPPORTED_CONTENT_TYPE: (415, "unsupported_media_type"),
    ErrorCode.UNSUPPORTED_METHOD: (405, "method_not_allowed"),
    ErrorCode.NOT_INVOCABLE: (422, str(ErrorCode.NOT_INVOCABLE)),
    ErrorCode.AGENT_SUSPENDED: (503, str(ErrorCode.AGENT_SUSPENDED)),
    ErrorCode.AGENT_RETIRED: (410, str(ErrorCode.AGENT_RETIRED)),
    ErrorCode.METADATA_EXPIRED: (410, str(ErrorCode.AGENT_RETIRED)),
    ErrorCode.UPSTREAM_UNREACHABLE: (502, str(ErrorCode.UPSTREAM_UNREACHABLE)),
    ErrorCode.UPSTREAM_TOO_LARGE: (502, str(ErrorCode.UPSTREAM_TOO_LARGE)),
    ErrorCode.UPSTREAM_TIMEOUT: (504, str(ErrorCode.UPSTREAM_TIMEOUT)),
}
_BY_STATUS: dict[int, tuple[int, str]] = {
    400: (400, "invalid_request"),
    401: (401, "unauthorized"),
    403: (403, "forbidden"),
    404: (404, "not_found"),
    408: (408, "request_timeout"),
    409: (409, "conflict"),
    410: (410, "gone"),
    422: (400, "invalid_request"),
    429: (429, "rate_limited"),
    451: (403, "forbidden"),
    453: (403, "forbidden"),
    455: (403, "forbidden"),
    457: (403, "forbidden"),
}

# Every (status, code) this surface answers, for the docs and their test.
INVOKE_ERRORS: frozenset[tuple[int, str]] = frozenset(
    {*_BY_CODE.values(), *_BY_STATUS.values(), (503, "unavailable")}
)


@dataclass(frozen=True, slots=True)
class InvokeError:
    status: int
    body: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def code(self) -> str:
        return str(self.body["error"]["code"])


def invoke_error(exc: AgtpError) -> InvokeError:
    """The HAIDIP error answer for ``exc``; the core's headers Retry-After,
    WWW-Authenticate and Allow are kept."""
    status, code = (
        _BY_CODE.get(str(exc.code))
        or _BY_STATUS.get(exc.status)
        or ((400, "invalid_request") if exc.status < 500 else (503, "unavailable"))
    )
    message = exc.message
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 3] + "..."
    headers = tuple((n, v) for n, v in exc.headers if n in KEPT_HEADERS)
    return InvokeError(status, {"error": {"code": code, "message": message}}, headers)
