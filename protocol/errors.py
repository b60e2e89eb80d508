"""One error hierarchy for every AGTP failure.

Each failure is a subclass of :class:`AgtpError` carrying an AGTP ``status``
and a stable machine-readable ``code``; the message is for humans. The server
turns any ``AgtpError`` into ``{"status", "task_id", "error": {"code",
"message"}}`` with the HTTP status equal to the AGTP status. ``ErrorCode``
lists every code (``ERROR_CODES``: their wire values), so docs and tests can
enumerate them. An error may carry
extra response ``headers`` (e.g. ``Retry-After`` on 429, ``WWW-Authenticate``
on 401) that the server sends with the error body.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Literal

from .status import Status


class ErrorCode(StrEnum):
    """Every ``code`` an AGTP error answer can carry: the one list.

    Each :class:`AgtpError` class names its default code here, and every raise
    site that narrows it (``code=``) passes a member, never a string literal
    (``tests/protocol/test_protocol_error_codes.py`` scans the source). Members
    are ``str``: they compare equal to, and serialize (orjson, json, JCS) as,
    their wire value; but orjson refuses them as dict *keys* ("Dict key must
    be str"), so a code that becomes a key is ``str(code)`` first. The table
    "Error codes" in docs/wire-contract.md lists exactly these values (tested). Grouped by the
    status they are answered with.
    """

    # 400: framing, headers, envelope -------------------------------------------
    BAD_REQUEST = "bad_request"
    MALFORMED_JSON = "malformed_json"
    BODY_TOO_LARGE = "body_too_large"
    HEADER_TOO_LARGE = "header_too_large"
    MISSING_HEADER = "missing_header"
    MISSING_AGENT_ID = "missing_agent_id"
    MISSING_PRINCIPAL_ID = "missing_principal_id"
    MISSING_AUTHORITY_SCOPE = "missing_authority_scope"
    MISSING_AGTP_METHOD = "missing_agtp_method"
    MISSING_OWNER_ID = "missing_owner_id"  # newer dialect: Agent-ID without Owner-ID
    INVALID_HEADER = "invalid_header"
    INVALID_AGENT_ID = "invalid_agent_id"
    INVALID_PRINCIPAL_ID = "invalid_principal_id"
    INVALID_OWNER_ID = "invalid_owner_id"
    INVALID_TARGET_AGENT = "invalid_target_agent"
    INVALID_SESSION_ID = "invalid_session_id"
    INVALID_TASK_ID = "invalid_task_id"
    INVALID_AGTP_METHOD = "invalid_agtp_method"
    INVALID_AGTP_ZONE_ID = "invalid_agtp_zone_id"
    INVALID_FEDERATION_PATH = "invalid_federation_path"
    INVALID_FEDERATION_BUDGET = "invalid_federation_budget"
    INVALID_AUTHORITY_SCOPE = "invalid_authority_scope"
    DUPLICATE_HEADER = "duplicate_header"
    INVALID_START_LINE = "invalid_start_line"  # native framing
    INVALID_HEADER_LINE = "invalid_header_line"  # native framing
    INVALID_CONTENT_LENGTH = "invalid_content_length"  # native framing
    UNSUPPORTED_AGTP_VERSION = "unsupported_agtp_version"
    UNSUPPORTED_CONTENT_TYPE = "unsupported_content_type"
    UNSUPPORTED_METHOD = "unsupported_method"
    METHOD_MISMATCH = "method_mismatch"
    TASK_ID_MISMATCH = "task_id_mismatch"
    INVALID_BODY = "invalid_body"
    # MCP registry (seed 002): a message that fails its schema; an unknown major version.
    INVALID_MCP_MESSAGE = "invalid_mcp_message"
    UNSUPPORTED_PROTOCOL_VERSION = "unsupported_protocol_version"
    # Raised by the client (ans.client): a result's query_digest does not match
    # the parameters sent; as a refusal check it is 401 (SignatureInvalid).
    DIGEST_MISMATCH = "digest_mismatch"

    # 262 (newer dialect): Authorization Required --------------------------------
    AUTHORIZATION_REQUIRED = "authorization_required"  # anonymous query or DESCRIBE of an agent

    # 401: signatures and requester authentication -----------------------------
    UNAUTHORIZED = "unauthorized"
    SIGNATURE_INVALID = "signature_invalid"
    UNKNOWN_SIGNING_KEY = "unknown_signing_key"
    SIGNING_KEY_REMOVED = "signing_key_removed"  # the manifest's governance key was removed
    UNSIGNED_RESPONSE = "unsigned_response"  # client: a DISCOVER answer carries no signature
    REFUSAL_MISMATCH = "refusal_mismatch"  # client: a signed refusal is for another answer
    MISSING_TOKEN = "missing_token"
    TOKEN_TOO_LARGE = "token_too_large"
    TOKEN_MALFORMED = "token_malformed"
    TOKEN_ALGORITHM_NOT_ALLOWED = "token_algorithm_not_allowed"
    TOKEN_UNSUPPORTED_HEADER = "token_unsupported_header"
    TOKEN_UNKNOWN_KEY = "token_unknown_key"
    TOKEN_SIGNATURE_INVALID = "token_signature_invalid"
    TOKEN_EXPIRED = "token_expired"
    TOKEN_NOT_YET_VALID = "token_not_yet_valid"
    TOKEN_WRONG_AUDIENCE = "token_wrong_audience"
    TOKEN_WRONG_ISSUER = "token_wrong_issuer"
    TOKEN_SUBJECT_MISMATCH = "token_subject_mismatch"
    TOKEN_PRINCIPAL_MISMATCH = "token_principal_mismatch"
    TOKEN_ZONE_MISMATCH = "token_zone_mismatch"
    TOKEN_MISSING_CLAIM = "token_missing_claim"
    TOKEN_INVALID_CLAIM = "token_invalid_claim"
    CLIENT_CERTIFICATE_REQUIRED = "client_certificate_required"
    CERTIFICATE_IDENTITY_MISMATCH = "certificate_identity_mismatch"
    API_KEY_INVALID = "api_key_invalid"  # [auth] api_keys: no configured key has this hash
    API_KEY_IDENTITY_MISMATCH = "api_key_identity_mismatch"  # headers name another principal

    # 404 / 408 / 409 / 410 -----------------------------------------------------
    NOT_IN_ALLOW_LIST = "not_in_allow_list"  # 403: MCP announce of an agent_id not allow-listed
    NOT_FOUND = "not_found"
    UNKNOWN_PATH = "unknown_path"  # newer dialect: a request-line path ANS does not serve
    NAME_NOT_FOUND = "name_not_found"  # name resolution: no Active agent has the name
    REQUEST_TIMEOUT = "request_timeout"
    CONFLICT = "conflict"
    DUPLICATE_ID = "duplicate_id"  # MCP: an agent_id pinned to another key
    STALE_EVENT = "stale_event"  # issued_at outside the window, or older than the last event
    STALE_METADATA = "stale_metadata"  # re-ACTIVATE with an older manifest than the stored one
    INVALID_TRANSITION = "invalid_transition"  # e.g. REINSTATE of an agent dropped for freshness
    AGENT_SUSPENDED = "agent_suspended"  # 409 on ACTIVATE (use REINSTATE); 503 on DESCRIBE
    GONE = "gone"
    AGENT_RETIRED = "agent_retired"  # Revoked/Deprecated canonical ids never come back
    METADATA_EXPIRED = "metadata_expired"  # DESCRIBE of a record past its expires_at

    # 422: parameters and documents ---------------------------------------------
    UNPROCESSABLE = "unprocessable"
    INVALID_PARAMETER = "invalid_parameter"
    INVALID_PARAMETERS = "invalid_parameters"
    UNKNOWN_BODY_FIELD = "unknown_body_field"  # a top-level body key ANS does not understand
    MISSING_QUERY = "missing_query"  # newer dialect: DISCOVER with no criterion at all
    INVALID_NAME = "invalid_name"
    INVALID_INTENT = "invalid_intent"
    INVALID_CAPABILITY_DOMAINS = "invalid_capability_domains"
    INVALID_TRUST_TIER_MIN = "invalid_trust_tier_min"
    INVALID_BEHAVIORAL_TRUST_MIN = "invalid_behavioral_trust_min"
    INVALID_GOVERNANCE_ZONE = "invalid_governance_zone"
    INVALID_ORG_DOMAIN = "invalid_org_domain"
    INVALID_LIMIT = "invalid_limit"
    INVALID_SCOPE_NEGOTIATE = "invalid_scope_negotiate"
    INVALID_INCLUDE_EVIDENCE = "invalid_include_evidence"
    INVALID_PREFERRED_AGENT = "invalid_preferred_agent"
    # the efficient-discovery profile's parameters (protocol/profile_params.py)
    INVALID_QUERY = "invalid_query"  # the profile's alias of intent
    INVALID_REQUIRED_TAGS = "invalid_required_tags"
    INVALID_EXCLUDED_TAGS = "invalid_excluded_tags"
    INVALID_PREFERRED_TAGS = "invalid_preferred_tags"
    INVALID_PROTOCOLS = "invalid_protocols"
    INVALID_CONSTRAINTS = "invalid_constraints"
    INVALID_DETAIL = "invalid_detail"
    INVALID_CLIENT_CONTEXT = "invalid_client_context"
    MISSPELLED_PARAMETER = "misspelled_parameter"  # looks like a hard filter's name
    INVALID_CANONICAL_ID = "invalid_canonical_id"
    INVALID_MANIFEST = "invalid_manifest"
    MANIFEST_MISSING_FIELD = "manifest_missing_field"
    MANIFEST_FIELD_TYPE = "manifest_field_type"
    MANIFEST_FROM_FUTURE = "manifest_from_future"  # beyond the clock skew window
    INVALID_CAPABILITIES = "invalid_capabilities"
    INVALID_EVENT = "invalid_event"  # the lifecycle event document is malformed
    LIFECYCLE_NOT_ACTIVE = "lifecycle_not_active"
    NOT_INVOCABLE = "not_invocable"  # HAIDIP invoke: no HTTP(S) endpoint the gateway may call

    # 429 / 451 / 453 / 5xx -----------------------------------------------------
    RATE_LIMITED = "rate_limited"
    SCOPE_VIOLATION = "scope_violation"
    ZONE_VIOLATION = "zone_violation"
    INTERNAL_ERROR = "internal_error"
    UNAVAILABLE = "unavailable"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    # HAIDIP invocation gateway only (HTTP statuses 502 / 504)
    UPSTREAM_UNREACHABLE = "upstream_unreachable"
    UPSTREAM_TOO_LARGE = "upstream_too_large"
    UPSTREAM_TIMEOUT = "upstream_timeout"


class AgtpError(Exception):
    """Base of all AGTP errors: an AGTP status and a stable code."""

    status: ClassVar[int] = Status.BAD_REQUEST
    code: ClassVar[ErrorCode] = ErrorCode.BAD_REQUEST

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        # Extra response headers (lowercase names), sent with the error body.
        self.headers = headers
        # The request's Task-ID, once known (set by whoever knows it: the
        # parser after the envelope, the server after parsing), so that an
        # error answer echoes it as a success would.
        self.task_id: str | None = None
        # The request's query digest (DISCOVER, once its parameters parsed),
        # so that a signed refusal is bound to the query it refuses.
        self.query_digest: str | None = None
        if code is not None:
            # Per-instance code for families of one failure kind (e.g. one code
            # per missing header or invalid parameter); always registered below.
            self.code = code  # type: ignore[misc]

    def to_error_object(self) -> dict[str, str]:
        # A plain str on the wire: the same bytes, and JCS keeps its fast path.
        return {"code": str(self.code), "message": self.message}


# 400 ---------------------------------------------------------------------
class BadRequest(AgtpError):
    status = Status.BAD_REQUEST
    code = ErrorCode.BAD_REQUEST


class MalformedJson(BadRequest):
    code = ErrorCode.MALFORMED_JSON


class BodyTooLarge(BadRequest):
    code = ErrorCode.BODY_TOO_LARGE


class HeaderTooLarge(BadRequest):
    code = ErrorCode.HEADER_TOO_LARGE


class MissingHeader(BadRequest):
    """A required AGTP header is absent; the code names the header."""

    code = ErrorCode.MISSING_HEADER


class InvalidHeader(BadRequest):
    """A header is present but malformed; the code names the header."""

    code = ErrorCode.INVALID_HEADER


class InvalidAuthorityScope(BadRequest):
    code = ErrorCode.INVALID_AUTHORITY_SCOPE


class UnsupportedVersion(BadRequest):
    code = ErrorCode.UNSUPPORTED_AGTP_VERSION


class UnsupportedContentType(BadRequest):
    code = ErrorCode.UNSUPPORTED_CONTENT_TYPE


class UnsupportedMethod(BadRequest):
    code = ErrorCode.UNSUPPORTED_METHOD


class MethodMismatch(BadRequest):
    code = ErrorCode.METHOD_MISMATCH


class TaskIdMismatch(BadRequest):
    code = ErrorCode.TASK_ID_MISMATCH


class InvalidBody(BadRequest):
    """The JSON parsed but the envelope is not an AGTP request body."""

    code = ErrorCode.INVALID_BODY


# 401/403/404/409/410 --------------------------------------------------------
class AuthorizationRequired(AgtpError):
    """262 (newer dialect only): the request needs an identity or authority
    it did not present (-09 "Status Codes", 262 (b) and (d))."""

    status = Status.AUTHORIZATION_REQUIRED
    code = ErrorCode.AUTHORIZATION_REQUIRED


class Unauthorized(AgtpError):
    status = Status.UNAUTHORIZED
    code = ErrorCode.UNAUTHORIZED


class AuthenticationFailed(Unauthorized):
    """The requester could not be authenticated (bearer token or client
    certificate); the per-instance code says which check failed."""

    code = ErrorCode.MISSING_TOKEN


class NotFound(AgtpError):
    status = Status.NOT_FOUND
    code = ErrorCode.NOT_FOUND


class Conflict(AgtpError):
    status = Status.CONFLICT
    code = ErrorCode.CONFLICT


class Gone(AgtpError):
    status = Status.GONE
    code = ErrorCode.GONE


# 422 ---------------------------------------------------------------------
class Unprocessable(AgtpError):
    status = Status.UNPROCESSABLE
    code = ErrorCode.UNPROCESSABLE


class UnknownBodyField(Unprocessable):
    """The body has a top-level key ANS does not understand (``target``, a
    parameter outside ``parameters``, a typo): refused, never ignored, so a
    query is never answered as if it had no filter."""

    code = ErrorCode.UNKNOWN_BODY_FIELD


class MissingQuery(Unprocessable):
    code = ErrorCode.MISSING_QUERY


class InvalidParameter(Unprocessable):
    """A request parameter has the wrong type or range; the code is the
    parameter's own (``PARAMETER_CODES``: ``limit`` -> ``invalid_limit``)."""

    code = ErrorCode.INVALID_PARAMETER

    def __init__(self, parameter: Parameter, message: str) -> None:
        super().__init__(f"{parameter}: {message}", code=PARAMETER_CODES[parameter])
        self.parameter = parameter


class InvalidManifest(Unprocessable):
    """An Agent Manifest Document fails validation; code says which check."""

    code = ErrorCode.INVALID_MANIFEST


class InvalidCapabilities(Unprocessable):
    code = ErrorCode.INVALID_CAPABILITIES


class AgentNotActive(Unprocessable):
    code = ErrorCode.LIFECYCLE_NOT_ACTIVE


# Signature failures are 401-class: the submitter could not prove the
# governance platform vouched for the document.
class SignatureInvalid(AgtpError):
    status = Status.UNAUTHORIZED
    code = ErrorCode.SIGNATURE_INVALID


class UnknownSigningKey(SignatureInvalid):
    code = ErrorCode.UNKNOWN_SIGNING_KEY


class UnsignedResponse(SignatureInvalid):
    """Raised by a client: a DISCOVER answer (result or refusal) carries no
    ANS signature, so it must be rejected (discovery draft 3.4, 7.1)."""

    code = ErrorCode.UNSIGNED_RESPONSE


# 429 / 451 / 453 / 5xx ------------------------------------------------------
class RateLimited(AgtpError):
    status = Status.RATE_LIMITED
    code = ErrorCode.RATE_LIMITED


class ScopeViolation(AgtpError):
    status = Status.SCOPE_VIOLATION
    code = ErrorCode.SCOPE_VIOLATION


class ZoneViolation(AgtpError):
    status = Status.ZONE_VIOLATION
    code = ErrorCode.ZONE_VIOLATION


class RequestTimeout(AgtpError):
    status = Status.TIMEOUT
    code = ErrorCode.REQUEST_TIMEOUT


class ServerError(AgtpError):
    status = Status.SERVER_ERROR
    code = ErrorCode.INTERNAL_ERROR


class Unavailable(AgtpError):
    status = Status.UNAVAILABLE
    code = ErrorCode.UNAVAILABLE


class StorageUnavailable(Unavailable):
    """The registry or the audit log could not be written (disk full, I/O
    error): the change was not applied and nothing was stored; retry later."""

    code = ErrorCode.STORAGE_UNAVAILABLE


# The HAIDIP invocation gateway's upstream failures: HTTP statuses outside
# the AGTP status space, answered only on that surface.
class UpstreamUnreachable(AgtpError):
    """The invoked agent could not be reached (refused, DNS, TLS, reset) or
    answered something the gateway will not relay."""

    status = 502
    code = ErrorCode.UPSTREAM_UNREACHABLE


class UpstreamTimeout(AgtpError):
    """The invoked agent did not connect or answer within its timeout."""

    status = 504
    code = ErrorCode.UPSTREAM_TIMEOUT


class NotInvocable(Unprocessable):
    """The agent declares no endpoint the invocation gateway may call."""

    code = ErrorCode.NOT_INVOCABLE


# The codes named after a header or a parameter, as explicit mappings (no
# code is built from a name at run time).
REQUIRED_HEADER_CODES: dict[str, ErrorCode] = {
    "agent-id": ErrorCode.MISSING_AGENT_ID,
    "principal-id": ErrorCode.MISSING_PRINCIPAL_ID,
    "authority-scope": ErrorCode.MISSING_AUTHORITY_SCOPE,
}

INVALID_HEADER_CODES: dict[str, ErrorCode] = {
    "agent-id": ErrorCode.INVALID_AGENT_ID,
    "principal-id": ErrorCode.INVALID_PRINCIPAL_ID,
    "owner-id": ErrorCode.INVALID_OWNER_ID,
    "target-agent": ErrorCode.INVALID_TARGET_AGENT,
    "session-id": ErrorCode.INVALID_SESSION_ID,
    "task-id": ErrorCode.INVALID_TASK_ID,
    "agtp-method": ErrorCode.INVALID_AGTP_METHOD,
    "agtp-zone-id": ErrorCode.INVALID_AGTP_ZONE_ID,
    "agtp-federation-path": ErrorCode.INVALID_FEDERATION_PATH,
    "agtp-federation-budget-ms": ErrorCode.INVALID_FEDERATION_BUDGET,
}

# The request parameters :class:`InvalidParameter` names (mypy checks every
# call site against this list), and the code of each.
Parameter = Literal[
    "intent",
    "capability_domains",
    "trust_tier_min",
    "behavioral_trust_min",
    "governance_zone",
    "org_domain",
    "limit",
    "scope_negotiate",
    "include_evidence",
    "preferred_agent",
    "query",
    "required_tags",
    "excluded_tags",
    "preferred_tags",
    "protocols",
    "constraints",
    "detail",
    "client_context",
    "name",
    "parameters",
    "canonical_id",
    "manifest",
    "capabilities",
    "event",
]
PARAMETER_CODES: dict[Parameter, ErrorCode] = {
    "intent": ErrorCode.INVALID_INTENT,
    "capability_domains": ErrorCode.INVALID_CAPABILITY_DOMAINS,
    "trust_tier_min": ErrorCode.INVALID_TRUST_TIER_MIN,
    "behavioral_trust_min": ErrorCode.INVALID_BEHAVIORAL_TRUST_MIN,
    "governance_zone": ErrorCode.INVALID_GOVERNANCE_ZONE,
    "org_domain": ErrorCode.INVALID_ORG_DOMAIN,
    "limit": ErrorCode.INVALID_LIMIT,
    "scope_negotiate": ErrorCode.INVALID_SCOPE_NEGOTIATE,
    "include_evidence": ErrorCode.INVALID_INCLUDE_EVIDENCE,
    "preferred_agent": ErrorCode.INVALID_PREFERRED_AGENT,
    "query": ErrorCode.INVALID_QUERY,
    "required_tags": ErrorCode.INVALID_REQUIRED_TAGS,
    "excluded_tags": ErrorCode.INVALID_EXCLUDED_TAGS,
    "preferred_tags": ErrorCode.INVALID_PREFERRED_TAGS,
    "protocols": ErrorCode.INVALID_PROTOCOLS,
    "constraints": ErrorCode.INVALID_CONSTRAINTS,
    "detail": ErrorCode.INVALID_DETAIL,
    "client_context": ErrorCode.INVALID_CLIENT_CONTEXT,
    "name": ErrorCode.INVALID_NAME,
    "parameters": ErrorCode.INVALID_PARAMETERS,
    "canonical_id": ErrorCode.INVALID_CANONICAL_ID,
    "manifest": ErrorCode.INVALID_MANIFEST,
    "capabilities": ErrorCode.INVALID_CAPABILITIES,
    "event": ErrorCode.INVALID_EVENT,
}

# Every code's wire value, for docs and tests that enumerate them.
ERROR_CODES: frozenset[str] = frozenset(code.value for code in ErrorCode)
