"""The AGTP envelope every method shares: the identity and envelope headers
(names lowercase, values validated and bounded), the JSON body envelope
(method, task_id, parameters), the task id a refusal answers, and the
response and error body encoders.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson

from . import jsonstrict
from .errors import (
    INVALID_HEADER_CODES,
    REQUIRED_HEADER_CODES,
    AgtpError,
    BadRequest,
    ErrorCode,
    InvalidBody,
    InvalidHeader,
    InvalidParameter,
    MethodMismatch,
    MissingHeader,
    TaskIdMismatch,
    UnknownBodyField,
    UnsupportedContentType,
    UnsupportedVersion,
)
from .request_types import (
    _PRINTABLE_RE,
    ACCEPTED_CONTENT_TYPES,
    AGTP_VERSION,
    CONTENT_TYPE,
    MAX_ID_LEN,
    MAX_TASK_ID_LEN,
    Identity,
    Limits,
)
from .scope import parse_authority_scope

# -- headers -------------------------------------------------------------------


def is_task_id(value: object) -> bool:
    """The one Task-ID rule, for the ``Task-ID`` header (after trimming), the
    body's ``task_id`` and every ``task-id`` the server sends back: 1 to
    MAX_TASK_ID_LEN printable ASCII characters, no leading or trailing blank.
    So no CR, LF, NUL or non-ASCII character can reach a response header."""
    return (
        isinstance(value, str)
        and len(value) <= MAX_TASK_ID_LEN
        and _PRINTABLE_RE.fullmatch(value) is not None
    )


def _header_text(headers: Mapping[str, str], name: str, max_len: int = MAX_ID_LEN) -> str | None:
    value = headers.get(name)
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if len(value) > max_len or _PRINTABLE_RE.fullmatch(value) is None:
        raise InvalidHeader(
            f"{name} must be printable ASCII of at most {max_len} characters",
            code=INVALID_HEADER_CODES.get(name, ErrorCode.INVALID_HEADER),
        )
    return value


def check_envelope_headers(headers: Mapping[str, str]) -> None:
    """AGTP-Version (if sent) must be AGTP/1.x; Content-Type (if sent) JSON."""
    version = headers.get("agtp-version")
    if version is not None and not re.fullmatch(r"AGTP/1(?:\.\d{1,3})?", version.strip()):
        raise UnsupportedVersion(
            f"AGTP-Version {version[:40]!r} is not supported; use {AGTP_VERSION}"
        )
    ctype = headers.get("content-type")
    if ctype is not None:
        base = ctype.split(";", 1)[0].strip().lower()
        if base and base not in ACCEPTED_CONTENT_TYPES:
            raise UnsupportedContentType(
                f"Content-Type {base[:60]!r} is not supported; use {CONTENT_TYPE}"
            )


def parse_identity(headers: Mapping[str, str]) -> Identity:
    """Agent-ID, Principal-ID and Authority-Scope are all required."""
    values: dict[str, str] = {}
    for name, code in REQUIRED_HEADER_CODES.items():
        if name == "authority-scope":
            raw = headers.get(name)
            text = raw.strip() if raw is not None else None
        else:
            text = _header_text(headers, name)
        if not text:
            raise MissingHeader(f"required header {_display(name)} is missing", code=code)
        values[name] = text
    return Identity(
        agent_id=values["agent-id"],
        principal_id=values["principal-id"],
        scope=parse_authority_scope(values["authority-scope"]),
        session_id=_header_text(headers, "session-id"),
        scope_header=values["authority-scope"],
    )


def has_identity(headers: Mapping[str, str]) -> bool:
    return any(headers.get(n) for n in REQUIRED_HEADER_CODES)


def _display(name: str) -> str:
    return "-".join("ID" if p == "id" else p.capitalize() for p in name.split("-"))


# -- body ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Envelope:
    task_id: str | None
    parameters: dict[str, Any]


def parse_envelope(
    method: str, headers: Mapping[str, str], body: bytes, limits: Limits
) -> Envelope:
    """The common AGTP body ``{"method", "task_id", "parameters", ...}``."""
    header_task = _header_text(headers, "task-id", MAX_TASK_ID_LEN)
    if not body:  # only a truly empty body means "no parameters"; " " must parse
        return Envelope(header_task, {})
    doc = jsonstrict.loads(body, max_bytes=limits.max_body_bytes)
    if not isinstance(doc, dict):
        raise InvalidBody("the AGTP request body must be a JSON object")
    body_method = doc.get("method")
    if body_method is not None and (
        not isinstance(body_method, str) or body_method.upper() != method
    ):
        raise MethodMismatch(f"body method {str(body_method)[:40]!r} does not match {method}")
    body_task = doc.get("task_id")
    if body_task is not None:
        # The body's task_id is echoed as the task-id response header: it
        # obeys the Task-ID header's rule (and is never trimmed).
        if not is_task_id(body_task):
            raise BadRequest(
                f"task_id must be a string of 1 to {MAX_TASK_ID_LEN} printable ASCII "
                "characters (no control characters, no leading or trailing blank)",
                code=ErrorCode.INVALID_TASK_ID,
            )
        if header_task is not None and body_task != header_task:
            raise TaskIdMismatch("the Task-ID header and the body task_id differ")
    task_id = header_task if header_task is not None else body_task
    with answering(task_id):
        check_body_shape(method, doc)
        params = doc.get("parameters", {})
        if not isinstance(params, dict):
            raise InvalidParameter("parameters", "must be a JSON object")
    return Envelope(task_id, params)


# The top-level keys of the AGTP request body (-02 and -09 alike).
ENVELOPE_KEYS = frozenset({"method", "task_id", "session_id", "parameters", "context"})


def check_body_shape(method: str, doc: Mapping[str, Any]) -> None:
    """A body ANS does not understand is refused, never answered as if it had
    no filter: a top-level key outside the envelope (the reference code's
    ``target``, parameters written beside ``parameters`` instead of in it, a
    typo) is 422 ``unknown_body_field``. A -02 body of envelope keys alone
    (``{"method": "DISCOVER"}``) still means "no parameters", as before."""
    unknown = set(doc) - ENVELOPE_KEYS
    if unknown:
        names = ", ".join(sorted(k[:40] for k in unknown)[:8])
        hint = "; a DISCOVER query goes in 'parameters'" if method == "DISCOVER" else ""
        raise UnknownBodyField(
            f"top-level body keys ANS does not understand: {names} (the body is "
            f"{{'method', 'task_id', 'parameters'}}{hint})"
        )


def task_id_hint(headers: Mapping[str, str]) -> str | None:
    """Best-effort Task-ID for error responses (never raises)."""
    value = headers.get("task-id")
    if value is None:
        return None
    value = value.strip()
    return value if is_task_id(value) else None


@contextmanager
def answering(task_id: str | None, digest: str | None = None) -> Iterator[None]:
    """An AgtpError raised inside carries ``task_id`` and the query
    ``digest`` (unless it already carries them), so that the error answer
    echoes the request's Task-ID and a signed refusal names its query."""
    try:
        yield
    except AgtpError as exc:
        if exc.task_id is None:
            exc.task_id = task_id
        if exc.query_digest is None:
            exc.query_digest = digest
        raise


# -- responses -------------------------------------------------------------------------


def encode_result(status: int, task_id: str | None, result: Mapping[str, Any]) -> bytes:
    return orjson.dumps({"status": status, "task_id": task_id, "result": result})


def encode_error(status: int, task_id: str | None, code: str, message: str) -> bytes:
    return orjson.dumps(
        {"status": status, "task_id": task_id, "error": {"code": code, "message": message}}
    )
