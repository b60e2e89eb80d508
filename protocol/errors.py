"""One error hierarchy for every AGTP failure.

Each failure is a subclass of :class:`AgtpError` carrying an AGTP ``status``
and a stable machine-readable ``code``; the message is for humans. The server
turns any ``AgtpError`` into ``{"status", "task_id", "error": {"code",
"message"}}`` with the HTTP status equal to the AGTP status. ``ERROR_CODES``
lists every code, so docs and tests can enumerate them. An error may carry
extra response ``headers`` (e.g. ``Retry-After`` on 429, ``WWW-Authenticate``
on 401) that the server sends with the error body.
"""

from __future__ import annotations

from typing import ClassVar

from .status import Status


class AgtpError(Exception):
    """Base of all AGTP errors: an AGTP status and a stable code."""

    status: ClassVar[int] = Status.BAD_REQUEST
    code: ClassVar[str] = "bad_request"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
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
        return {"code": self.code, "message": self.message}


# 400 ---------------------------------------------------------------------
class BadRequest(AgtpError):
    status = Status.BAD_REQUEST
    code = "bad_request"


class MalformedJson(BadRequest):
    code = "malformed_json"


class BodyTooLarge(BadRequest):
    code = "body_too_large"


class HeaderTooLarge(BadRequest):
    code = "header_too_large"


class MissingHeader(BadRequest):
    """A required AGTP header is absent; the code names the header."""

    code = "missing_header"


class InvalidHeader(BadRequest):
    """A header is present but malformed; the code names the header."""

    code = "invalid_header"


class InvalidAuthorityScope(BadRequest):
    code = "invalid_authority_scope"


class UnsupportedVersion(BadRequest):
    code = "unsupported_agtp_version"


class UnsupportedContentType(BadRequest):
    code = "unsupported_content_type"


class UnsupportedMethod(BadRequest):
    code = "unsupported_method"


class MethodMismatch(BadRequest):
    code = "method_mismatch"


class TaskIdMismatch(BadRequest):
    code = "task_id_mismatch"


class InvalidBody(BadRequest):
    """The JSON parsed but the envelope is not an AGTP request body."""

    code = "invalid_body"


# 401/403/404/409/410 --------------------------------------------------------
class Unauthorized(AgtpError):
    status = Status.UNAUTHORIZED
    code = "unauthorized"


class AuthenticationFailed(Unauthorized):
    """The requester could not be authenticated (bearer token or client
    certificate); the per-instance code says which check failed."""

    code = "missing_token"


class NotFound(AgtpError):
    status = Status.NOT_FOUND
    code = "not_found"


class Conflict(AgtpError):
    status = Status.CONFLICT
    code = "conflict"


class Gone(AgtpError):
    status = Status.GONE
    code = "gone"


# 422 ---------------------------------------------------------------------
class Unprocessable(AgtpError):
    status = Status.UNPROCESSABLE
    code = "unprocessable"


class InvalidParameter(Unprocessable):
    """A request parameter has the wrong type or range; code is invalid_<name>."""

    code = "invalid_parameter"

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(f"{parameter}: {message}", code=f"invalid_{parameter}")
        self.parameter = parameter


class InvalidManifest(Unprocessable):
    """An Agent Manifest Document fails validation; code says which check."""

    code = "invalid_manifest"


class InvalidCapabilities(Unprocessable):
    code = "invalid_capabilities"


class AgentNotActive(Unprocessable):
    code = "lifecycle_not_active"


# Signature failures are 401-class: the submitter could not prove the
# governance platform vouched for the document.
class SignatureInvalid(AgtpError):
    status = Status.UNAUTHORIZED
    code = "signature_invalid"


class UnknownSigningKey(SignatureInvalid):
    code = "unknown_signing_key"


class UnsignedResponse(SignatureInvalid):
    """Raised by a client: a DISCOVER answer (result or refusal) carries no
    ANS signature, so it must be rejected (discovery draft 3.4, 7.1)."""

    code = "unsigned_response"


# 429 / 451 / 453 / 5xx ------------------------------------------------------
class RateLimited(AgtpError):
    status = Status.RATE_LIMITED
    code = "rate_limited"


class ScopeViolation(AgtpError):
    status = Status.SCOPE_VIOLATION
    code = "scope_violation"


class ZoneViolation(AgtpError):
    status = Status.ZONE_VIOLATION
    code = "zone_violation"


class RequestTimeout(AgtpError):
    status = Status.TIMEOUT
    code = "request_timeout"


class ServerError(AgtpError):
    status = Status.SERVER_ERROR
    code = "internal_error"


class Unavailable(AgtpError):
    status = Status.UNAVAILABLE
    code = "unavailable"


class StorageUnavailable(Unavailable):
    """The registry or the audit log could not be written (disk full, I/O
    error): the change was not applied and nothing was stored; retry later."""

    code = "storage_unavailable"


REQUIRED_HEADER_CODES = {
    "agent-id": "missing_agent_id",
    "principal-id": "missing_principal_id",
    "authority-scope": "missing_authority_scope",
}

INVALID_HEADER_CODES = {
    "agent-id": "invalid_agent_id",
    "principal-id": "invalid_principal_id",
    "session-id": "invalid_session_id",
    "task-id": "invalid_task_id",
    "agtp-method": "invalid_agtp_method",
    "agtp-zone-id": "invalid_agtp_zone_id",
    "agtp-federation-path": "invalid_federation_path",
    "agtp-federation-budget-ms": "invalid_federation_budget",
}

DISCOVER_PARAMETERS = (
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
)

# Registration lifecycle (governance/lifecycle.py, ans/service.py).
LIFECYCLE_CODES = (
    "invalid_event",  # 422: the lifecycle event document is malformed
    "stale_event",  # 409: issued_at outside the accepted window, or older than the last event
    "stale_metadata",  # 409: re-ACTIVATE with an older manifest than the stored one
    "invalid_transition",  # 409: e.g. REINSTATE of an agent dropped for freshness
    "agent_suspended",  # 409 on ACTIVATE (use REINSTATE); 503 on DESCRIBE
    "agent_retired",  # 410: Revoked/Deprecated canonical ids never come back
    "signing_key_removed",  # 401: the manifest's governance key is no longer trusted
)

# 401 codes of requester authentication (auth modes "token" and "mtls").
TOKEN_FAILURE_CODES = (
    "missing_token",
    "token_too_large",
    "token_malformed",
    "token_algorithm_not_allowed",
    "token_unsupported_header",
    "token_unknown_key",
    "token_signature_invalid",
    "token_expired",
    "token_not_yet_valid",
    "token_wrong_audience",
    "token_wrong_issuer",
    "token_subject_mismatch",
    "token_principal_mismatch",
    "token_zone_mismatch",
    "token_missing_claim",
    "token_invalid_claim",
)
CERTIFICATE_FAILURE_CODES = ("client_certificate_required", "certificate_identity_mismatch")

MANIFEST_CHECK_CODES = (
    "invalid_manifest",
    "manifest_missing_field",
    "manifest_field_type",
    "manifest_from_future",  # 422: last_updated/activated_at beyond the clock skew window
)


def _class_codes() -> set[str]:
    seen: set[str] = set()
    stack: list[type[AgtpError]] = [AgtpError]
    while stack:
        cls = stack.pop()
        seen.add(cls.code)
        stack.extend(cls.__subclasses__())
    return seen


ERROR_CODES: frozenset[str] = frozenset(
    _class_codes()
    | set(REQUIRED_HEADER_CODES.values())
    | set(INVALID_HEADER_CODES.values())
    | {f"invalid_{p}" for p in DISCOVER_PARAMETERS}
    | {"invalid_canonical_id", "invalid_parameters", "invalid_capabilities"}
    | {"duplicate_header", "missing_agtp_method", "digest_mismatch", "refusal_mismatch"}
    | {"invalid_start_line", "invalid_header_line", "invalid_content_length"}
    | set(MANIFEST_CHECK_CODES)
    | set(LIFECYCLE_CODES)
    | set(TOKEN_FAILURE_CODES)
    | set(CERTIFICATE_FAILURE_CODES)
)
