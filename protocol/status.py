"""AGTP status codes (draft-hood-independent-agtp-02, section 5.5)."""

from __future__ import annotations

from enum import IntEnum


class Status(IntEnum):
    """The AGTP status code space. Codes 451, 452, 453, 550, 551 are AGTP-specific."""

    OK = 200
    ACCEPTED = 202
    NO_CONTENT = 204
    AUTHORIZATION_REQUIRED = 262  # newer dialect (-09)
    BAD_REQUEST = 400
    UNAUTHORIZED = 401
    FORBIDDEN = 403
    NOT_FOUND = 404
    TIMEOUT = 408
    CONFLICT = 409
    GONE = 410
    UNPROCESSABLE = 422
    RATE_LIMITED = 429
    SCOPE_VIOLATION = 451
    BUDGET_EXCEEDED = 452
    ZONE_VIOLATION = 453
    SCOPE_VIOLATION_09 = 455  # newer dialect: -09 renumbered 451/452/453
    BUDGET_EXCEEDED_09 = 456
    ZONE_VIOLATION_09 = 457
    SERVER_ERROR = 500
    UNAVAILABLE = 503
    DELEGATION_FAILURE = 550
    AUTHORITY_CHAIN_BROKEN = 551


REASON: dict[int, str] = {
    200: "OK",
    202: "Accepted",
    204: "No Content",
    262: "Authorization Required",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Timeout",
    409: "Conflict",
    410: "Gone",
    422: "Unprocessable",
    429: "Rate Limited",
    451: "Scope Violation",
    452: "Budget Exceeded",
    453: "Zone Violation",
    455: "Scope Violation",
    456: "Budget Exceeded",
    457: "Zone Violation",
    500: "Server Error",
    503: "Unavailable",
    550: "Delegation Failure",
    551: "Authority Chain Broken",
}

# AGTP-specific codes are governance signals and MUST be logged for audit (-02 5.5).
AGTP_SPECIFIC = frozenset({262, 451, 452, 453, 455, 456, 457, 550, 551})
