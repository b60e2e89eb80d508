"""The MCP registry's failures (seed 002 section 8.3) in the one error
hierarchy: each is an :class:`~ans.protocol.errors.AgtpError` with a status
and an :class:`~ans.protocol.errors.ErrorCode`; ``ans.mcp.errors`` maps any
``AgtpError`` to the registry's ``Err*`` error object.
"""

from __future__ import annotations

from .errors import AgtpError, BadRequest, Conflict, ErrorCode
from .status import Status


class McpMalformed(BadRequest):
    """A message that fails its JSON schema (ErrMalformedPayload)."""

    code = ErrorCode.INVALID_MCP_MESSAGE


class McpUnsupportedVersion(BadRequest):
    """An unknown major ``protocol_version``; names the supported ones."""

    code = ErrorCode.UNSUPPORTED_PROTOCOL_VERSION

    def __init__(self, message: str, *, supported: tuple[str, ...]) -> None:
        super().__init__(message)
        self.supported = supported


class McpForbidden(AgtpError):
    """The ``agent_id`` matches no allow-list entry (ErrForbidden)."""

    status = Status.FORBIDDEN
    code = ErrorCode.NOT_IN_ALLOW_LIST


class McpDuplicateId(Conflict):
    """The ``agent_id`` is pinned to another key (ErrDuplicateID)."""

    code = ErrorCode.DUPLICATE_ID
